package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Schema is an OpenAI function tool definition.
type Schema struct {
	Type     string         `json:"type"`
	Function SchemaFunction `json:"function"`
}

// SchemaFunction describes one tool to the model.
type SchemaFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type tool struct {
	schema Schema
	run    func(ctx context.Context, sh Shell, args json.RawMessage) (string, error)
}

// maxToolFile is the most a file tool reads of a file.
const maxToolFile = 16 << 20

// Toolset is the tools offered to the model, by name.
type Toolset struct {
	tools []tool
}

// Toolsets names the selectable groups.
var Toolsets = map[string][]string{
	"terminal": {"terminal", "process"},
	"file":     {"read_file", "write_file", "patch", "search_files"},
}

// NewToolset selects tools by toolset name ("terminal", "file").
func NewToolset(sets []string) (*Toolset, error) {
	all := allTools()
	ts := &Toolset{}
	for _, s := range sets {
		names, ok := Toolsets[s]
		if !ok {
			return nil, fmt.Errorf("unknown toolset %q: want terminal or file", s)
		}
		for _, n := range names {
			ts.tools = append(ts.tools, all[n])
		}
	}
	return ts, nil
}

// Names lists the tools.
func (t *Toolset) Names() []string {
	var n []string
	for _, tl := range t.tools {
		n = append(n, tl.schema.Function.Name)
	}
	return n
}

// Schemas are the tool definitions sent to the model.
func (t *Toolset) Schemas() []Schema {
	var s []Schema
	for _, tl := range t.tools {
		s = append(s, tl.schema)
	}
	return s
}

// Dispatch runs one tool call and returns what the model sees. failed is
// set when the call was refused or the tool reported an error.
func (t *Toolset) Dispatch(ctx context.Context, sh Shell, call ToolCall) (out string, failed bool) {
	name := call.Function.Name
	i := slices.IndexFunc(t.tools, func(tl tool) bool { return tl.schema.Function.Name == name })
	if i < 0 {
		names, _ := json.Marshal(t.Names())
		return errorJSON("Unknown tool '%s'. Available tools: %s", name, names), true
	}
	args, err := DecodeArgs(call.Function.Arguments)
	if err != nil {
		return errorJSON("Invalid JSON in tool arguments: %v. Please retry with valid JSON.", err), true
	}
	res, err := t.tools[i].run(ctx, sh, args)
	if err != nil {
		if errors.Is(err, sandbox.ErrClosed) || errors.Is(err, sandbox.ErrGone) || ctx.Err() != nil {
			return errorJSON("%s failed: %v", name, err), true
		}
		return errorJSON("%v", err), true
	}
	return trimOut(res), false
}

// DecodeArgs checks tool arguments: a JSON object (an empty string means
// no arguments).
func DecodeArgs(s string) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage("{}"), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	return json.RawMessage(s), nil
}

func params(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `}`)
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func allTools() map[string]tool {
	return map[string]tool{
		"terminal": {
			schema: Schema{Type: "function", Function: SchemaFunction{
				Name:        "terminal",
				Description: "Execute a shell command in the task environment. The shell is persistent: the working directory and exported variables carry over between calls. Use background=true for servers and long-running processes, then manage them with the process tool.",
				Parameters: params(`"command":{"type":"string","description":"The command to execute"},`+
					`"timeout":{"type":"integer","description":"Timeout in seconds (default 180)"},`+
					`"workdir":{"type":"string","description":"Working directory for this command only"},`+
					`"background":{"type":"boolean","description":"Run in the background and return at once"}`, "command"),
			}},
			run: runTerminal,
		},
		"process": {
			schema: Schema{Type: "function", Function: SchemaFunction{
				Name:        "process",
				Description: "Manage background processes started with terminal(background=true): list them, poll one's status, read its log, wait for it, or kill it.",
				Parameters: params(`"action":{"type":"string","enum":["list","poll","log","wait","kill"]},`+
					`"session_id":{"type":"string","description":"The id returned when the process was started"},`+
					`"timeout":{"type":"integer","description":"Seconds to wait (wait only, default 60)"}`, "action"),
			}},
			run: runProcess,
		},
		"read_file": {
			schema: Schema{Type: "function", Function: SchemaFunction{
				Name:        "read_file",
				Description: "Read a text file with line numbers. Use offset and limit for large files.",
				Parameters: params(`"path":{"type":"string"},`+
					`"offset":{"type":"integer","description":"Line to start from (1-based, default 1)"},`+
					`"limit":{"type":"integer","description":"Lines to read (default 500, max 2000)"}`, "path"),
			}},
			run: runReadFile,
		},
		"write_file": {
			schema: Schema{Type: "function", Function: SchemaFunction{
				Name:        "write_file",
				Description: "Write content to a file, creating parent directories and replacing the file if it exists.",
				Parameters:  params(`"path":{"type":"string"},"content":{"type":"string"}`, "path", "content"),
			}},
			run: runWriteFile,
		},
		"patch": {
			schema: Schema{Type: "function", Function: SchemaFunction{
				Name:        "patch",
				Description: "Edit a file by replacing text. old_string must match exactly once unless replace_all is true. Returns a unified diff of the change.",
				Parameters: params(`"mode":{"type":"string","enum":["replace"]},"path":{"type":"string"},`+
					`"old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean"}`, "path", "old_string", "new_string"),
			}},
			run: runPatch,
		},
		"search_files": {
			schema: Schema{Type: "function", Function: SchemaFunction{
				Name:        "search_files",
				Description: "Search file contents with a regular expression (target=content) or find files by name glob (target=files).",
				Parameters: params(`"pattern":{"type":"string"},"target":{"type":"string","enum":["content","files"]},`+
					`"path":{"type":"string","description":"Where to search (default .)"},"file_glob":{"type":"string"},`+
					`"limit":{"type":"integer","description":"Max results (default 50)"},"offset":{"type":"integer"},`+
					`"output_mode":{"type":"string","enum":["content","files_only","count"]},"context":{"type":"integer"}`, "pattern"),
			}},
			run: runSearch,
		},
	}
}

func runTerminal(ctx context.Context, sh Shell, raw json.RawMessage) (string, error) {
	var a struct {
		Command    string `json:"command"`
		Timeout    int    `json:"timeout"`
		Workdir    string `json:"workdir"`
		Background bool   `json:"background"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("bad arguments: %v", err)
	}
	if strings.TrimSpace(a.Command) == "" {
		return "", errors.New("command is required")
	}
	if a.Background {
		id := fmt.Sprintf("bg%d", time.Now().UnixNano()%1e9)
		cmd := fmt.Sprintf("mkdir -p /tmp/.proctor-bg && nohup bash -c %s > /tmp/.proctor-bg/%s.log 2>&1 & echo $! > /tmp/.proctor-bg/%s.pid; echo $!", shell.Quote(a.Command), id, id)
		r, err := sh.Exec(ctx, cmd, sandbox.ExecOptions{Workdir: a.Workdir, Timeout: 30 * time.Second})
		if err != nil {
			return "", err
		}
		return toJSON(map[string]any{"output": "Background process started", "session_id": id, "pid": strings.TrimSpace(r.Stdout), "exit_code": 0, "error": nil}), nil
	}
	timeout := time.Duration(a.Timeout) * time.Second
	if timeout <= 0 {
		timeout = 180 * time.Second
	}
	r, err := sh.Exec(ctx, a.Command, sandbox.ExecOptions{Timeout: timeout, Workdir: a.Workdir, MaxOutput: 256 << 10})
	if err != nil {
		return "", err
	}
	out := r.Stdout
	if r.Stderr != "" {
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		out += r.Stderr
	}
	var errMsg any
	if r.TimedOut {
		errMsg = fmt.Sprintf("Command timed out after %s", timeout)
		r.ExitCode = 124
	}
	return toJSON(map[string]any{"output": trimOut(out), "exit_code": r.ExitCode, "error": errMsg}), nil
}

func runProcess(ctx context.Context, sh Shell, raw json.RawMessage) (string, error) {
	var a struct {
		Action    string `json:"action"`
		SessionID string `json:"session_id"`
		Timeout   int    `json:"timeout"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("bad arguments: %v", err)
	}
	if a.Action != "list" && !validID(a.SessionID) {
		return "", errors.New("session_id is required (as returned by terminal with background=true)")
	}
	dir := "/tmp/.proctor-bg/"
	var cmd string
	timeout := 30 * time.Second
	switch a.Action {
	case "list":
		cmd = `cd ` + dir + ` 2>/dev/null || exit 0; for f in *.pid; do [ -e "$f" ] || continue; id=${f%.pid}; p=$(cat "$f"); if kill -0 "$p" 2>/dev/null; then s=running; else s=exited; fi; echo "$id pid=$p $s"; done`
	case "poll":
		cmd = `p=$(cat ` + dir + a.SessionID + `.pid) && if kill -0 "$p" 2>/dev/null; then echo running; else echo exited; fi; tail -c 2000 ` + dir + a.SessionID + `.log`
	case "log":
		cmd = `cat ` + dir + a.SessionID + `.log`
	case "wait":
		w := a.Timeout
		if w <= 0 {
			w = 60
		}
		timeout = time.Duration(w+5) * time.Second
		cmd = fmt.Sprintf(`p=$(cat %s%s.pid) && for i in $(seq %d); do kill -0 "$p" 2>/dev/null || { echo exited; exit 0; }; sleep 1; done; echo still running`, dir, a.SessionID, w)
	case "kill":
		cmd = `p=$(cat ` + dir + a.SessionID + `.pid) && kill -TERM "$p" 2>/dev/null; sleep 0.2; kill -KILL "$p" 2>/dev/null; echo killed`
	default:
		return "", fmt.Errorf("unknown action %q: want list, poll, log, wait or kill", a.Action)
	}
	r, err := sh.Exec(ctx, cmd, sandbox.ExecOptions{Timeout: timeout})
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return "", fmt.Errorf("%s %s: %s", a.Action, a.SessionID, strings.TrimSpace(r.Stderr+r.Stdout))
	}
	return toJSON(map[string]any{"output": trimOut(r.Stdout), "session_id": a.SessionID}), nil
}

func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func runReadFile(ctx context.Context, sh Shell, raw json.RawMessage) (string, error) {
	var a struct {
		Path   string `json:"path"`
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("bad arguments: %v", err)
	}
	if a.Path == "" {
		return "", errors.New("path is required")
	}
	if a.Offset < 1 {
		a.Offset = 1
	}
	if a.Limit <= 0 {
		a.Limit = 500
	}
	a.Limit = min(a.Limit, 2000)
	b, _, err := sh.ReadFile(ctx, a.Path, maxToolFile)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return "", fmt.Errorf("file not found: %s", a.Path)
		}
		return "", err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var sb strings.Builder
	end := min(a.Offset-1+a.Limit, len(lines))
	for i := a.Offset - 1; i < end; i++ {
		line := lines[i]
		if len(line) > 2000 {
			line = line[:2000] + "... [line truncated]"
		}
		fmt.Fprintf(&sb, "%6d|%s\n", i+1, line)
	}
	return toJSON(map[string]any{"content": sb.String(), "total_lines": len(lines), "truncated": end < len(lines)}), nil
}

func runWriteFile(ctx context.Context, sh Shell, raw json.RawMessage) (string, error) {
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("bad arguments: %v", err)
	}
	if a.Path == "" || a.Content == nil {
		return "", errors.New("path and content are required")
	}
	if err := sh.WriteFile(ctx, a.Path, []byte(*a.Content), 0o644); err != nil {
		return "", err
	}
	return toJSON(map[string]any{"bytes_written": len(*a.Content), "path": a.Path}), nil
}

func runPatch(ctx context.Context, sh Shell, raw json.RawMessage) (string, error) {
	var a struct {
		Mode       string  `json:"mode"`
		Path       string  `json:"path"`
		OldString  *string `json:"old_string"`
		NewString  *string `json:"new_string"`
		ReplaceAll bool    `json:"replace_all"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("bad arguments: %v", err)
	}
	if a.Mode != "" && a.Mode != "replace" {
		return "", fmt.Errorf("mode %q is not supported: use replace", a.Mode)
	}
	if a.Path == "" || a.OldString == nil || a.NewString == nil {
		return "", errors.New("path, old_string and new_string are required")
	}
	if *a.OldString == "" {
		return "", errors.New("old_string must not be empty")
	}
	b, size, err := sh.ReadFile(ctx, a.Path, maxToolFile)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return "", fmt.Errorf("file not found: %s", a.Path)
		}
		return "", err
	}
	if size > int64(len(b)) {
		return "", fmt.Errorf("%s is %d bytes, over the %d bytes patch can edit", a.Path, size, maxToolFile)
	}
	old := string(b)
	n := strings.Count(old, *a.OldString)
	switch {
	case n == 0:
		return "", fmt.Errorf("old_string not found in %s", a.Path)
	case n > 1 && !a.ReplaceAll:
		return "", fmt.Errorf("old_string matches %d times in %s: give more context to make it unique, or set replace_all", n, a.Path)
	}
	updated := strings.Replace(old, *a.OldString, *a.NewString, map[bool]int{true: -1, false: 1}[a.ReplaceAll])
	if err := sh.WriteFile(ctx, a.Path, []byte(updated), 0o644); err != nil {
		return "", err
	}
	return toJSON(map[string]any{"success": true, "replacements": map[bool]int{true: n, false: 1}[a.ReplaceAll], "diff": UnifiedDiff(a.Path, old, updated)}), nil
}

func runSearch(ctx context.Context, sh Shell, raw json.RawMessage) (string, error) {
	var a struct {
		Pattern    string `json:"pattern"`
		Target     string `json:"target"`
		Path       string `json:"path"`
		FileGlob   string `json:"file_glob"`
		Limit      int    `json:"limit"`
		Offset     int    `json:"offset"`
		OutputMode string `json:"output_mode"`
		Context    int    `json:"context"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("bad arguments: %v", err)
	}
	if a.Pattern == "" {
		return "", errors.New("pattern is required")
	}
	if a.Path == "" {
		a.Path = "."
	}
	if a.Limit <= 0 {
		a.Limit = 50
	}
	var cmd string
	if a.Target == "files" {
		cmd = fmt.Sprintf("find %s -name %s -not -path '*/.git/*' 2>/dev/null | sort", shell.Quote(a.Path), shell.Quote(a.Pattern))
	} else {
		flags := "-rnI"
		switch a.OutputMode {
		case "files_only":
			flags = "-rlI"
		case "count":
			flags = "-rcI"
		}
		if a.Context > 0 {
			flags += fmt.Sprintf(" -C %d", min(a.Context, 10))
		}
		if a.FileGlob != "" {
			flags += " --include=" + shell.Quote(a.FileGlob)
		}
		cmd = fmt.Sprintf("grep %s --exclude-dir=.git -E -e %s %s 2>/dev/null", flags, shell.Quote(a.Pattern), shell.Quote(a.Path))
	}
	cmd += fmt.Sprintf(" | tail -n +%d | head -n %d", a.Offset+1, a.Limit+1)
	r, err := sh.Exec(ctx, cmd, sandbox.ExecOptions{Timeout: 60 * time.Second})
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	more := len(lines) > a.Limit
	if more {
		lines = lines[:a.Limit]
	}
	res := map[string]any{"matches": lines, "count": len(lines), "truncated": more}
	if more {
		res["next_offset"] = a.Offset + a.Limit
	}
	return toJSON(res), nil
}
