package agent

import (
	"strings"
	"testing"
)

// Each golden test plays fixed tool calls in a Docker sandbox of the base
// image and pins, byte for byte, what the model receives. The expectations
// were written from hermes-agent's source at commit hermes.Commit (the file
// each test pins is named on it); run with -update to rewrite them after a
// deliberate change, and read the diff.

// TestGoldenSchemas pins the tool definitions: testdata/golden/schemas.json
// is json.dumps of get_tool_definitions(["terminal", "file"]), the schema
// dicts of tools/terminal_tool.py, tools/process_registry.py and
// tools/file_tools.py, sorted by name as tools/registry.py sorts them.
func TestGoldenSchemas(t *testing.T) {
	tools, _ := NewToolset([]string{"terminal", "file"})
	compareGolden(t, "schemas.json", tools.h.DefinitionsJSON()+"\n")
	if got := strings.Join(tools.Names(), ","); got != "patch,process,read_file,search_files,terminal,write_file" {
		t.Errorf("tool order %s", got)
	}
}

// TestGoldenDispatch pins how a call reaches a tool, and the answers to bad
// calls: environments/agent_loop.py (unknown tools, invalid JSON, the
// command preview), model_tools.py and tools/registry.py (exceptions).
func TestGoldenDispatch(t *testing.T) {
	runGolden(t, "dispatch", ToolOptions{}, []goldenStep{
		call("nope", `{}`),
		call("nöpe", `{}`),
		call("terminal", `{"command": `),
		call("terminal", ``),
		call("read_file", `{'path': 'x'}`),
		call("read_file", `{"path": "x"} trailing`),
		call("read_file", "{\"path\": \"a\tb\"}"),
		call("terminal", `{"command": "echo hi"}`),
		call("terminal", `null`),
		call("terminal", `[1, 2]`),
		call("read_file", `"a string"`),
		call("write_file", `5`),
		call("terminal", `{"command": null}`),
		call("terminal", `{"command": 5}`),
		call("terminal", `{"command": {"a": 1}}`),
		call("terminal", `{"command": ["ls"]}`),
		call("terminal", `{}`),
	})
}

// TestGoldenTerminal pins foreground commands: tools/terminal_tool.py
// (terminal_tool: truncation to 50,000 characters, ANSI stripping,
// redaction by agent/redact.py, the result dict) and
// tools/environments/docker.py and base.py (bash -c, merged output, the
// timeout answer).
func TestGoldenTerminal(t *testing.T) {
	runGolden(t, "terminal", ToolOptions{}, []goldenStep{
		call("terminal", `{"command": "echo hello"}`),
		call("terminal", `{"command": "echo out; echo err >&2; exit 3"}`),
		call("terminal", `{"command": "cd /tmp && export X=1 && pwd"}`),
		call("terminal", `{"command": "pwd; echo \"x=$X\""}`),
		call("terminal", `{"command": "pwd", "workdir": "/tmp"}`),
		call("terminal", `{"command": "pwd", "workdir": "/no such dir"}`),
		call("terminal", `{"command": "sleep 5; echo late", "timeout": 1}`),
		call("terminal", `{"command": "echo quick", "timeout": 0}`),
		call("terminal", `{"command": "echo never", "timeout": -5}`),
		call("terminal", `{"command": "echo never", "timeout": "30"}`),
		call("terminal", `{"command": "sleep 2", "timeout": 0.5}`),
		call("terminal", `{"command": "printf '\\033[1;31mred\\033[0m plain\\n'"}`),
		call("terminal", `{"command": "echo '<a href=\"x\">&amp;</a>'"}`),
		call("terminal", `{"command": "printf '  \\n\\tpadded\\n\\n  '"}`),
		call("terminal", `{"command": "printf 'bad \\377 byte é'"}`),
		call("terminal", `{"command": "echo OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz0123; echo token=abc; echo 'call +14155552671 now'"}`),
		call("terminal", `{"command": "for i in $(seq 1 9000); do echo \"line $i\"; done"}`),
		call("terminal", `{"command": "python3 -c \"print('é' * 60000)\""}`),
		call("terminal", `{"command": "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end"}`),
		call("terminal", `{"command": "nosuchcommand"}`),
		call("terminal", `{"command": "if"}`),
	})
}

// TestGoldenProcess pins background processes and the process tool:
// tools/process_registry.py (spawn, poll, read_log, wait, kill_process,
// write_stdin, submit_stdin, list_sessions, _handle_process) and the
// background branch of tools/terminal_tool.py.
func TestGoldenProcess(t *testing.T) {
	waitLog := func(id, text string) goldenStep {
		return sh(`until grep -q '` + text + `' /tmp/hermes_bg_` + id + `.log 2>/dev/null; do sleep 0.05; done`)
	}
	runGolden(t, "process", ToolOptions{CommandTimeout: 5}, []goldenStep{
		call("process", `{"action": "list"}`),
		call("terminal", `{"command": "echo start; read x; echo got:$x; exit 3", "background": true}`),
		waitLog("proc_000000000001", "start"),
		call("process", `{"action": "poll", "session_id": "proc_000000000001"}`),
		call("process", `{"action": "submit", "session_id": "proc_000000000001", "data": "hi é"}`),
		call("process", `{"action": "wait", "session_id": "proc_000000000001"}`),
		call("process", `{"action": "poll", "session_id": "proc_000000000001"}`),
		call("process", `{"action": "kill", "session_id": "proc_000000000001"}`),
		call("process", `{"action": "write", "session_id": "proc_000000000001", "data": "x"}`),
		call("terminal", `{"command": "for i in $(seq 1 300); do echo row $i; done; sleep 100", "background": true, "workdir": "/tmp", "check_interval": 10}`),
		waitLog("proc_000000000002", "row 300"),
		call("process", `{"action": "log", "session_id": "proc_000000000002"}`),
		call("process", `{"action": "log", "session_id": "proc_000000000002", "offset": 10, "limit": 3}`),
		call("process", `{"action": "log", "session_id": "proc_000000000002", "offset": -2}`),
		call("process", `{"action": "log", "session_id": "proc_000000000002", "offset": "5"}`),
		call("process", `{"action": "wait", "session_id": "proc_000000000002", "timeout": 1}`),
		call("process", `{"action": "wait", "session_id": "proc_000000000002", "timeout": 600}`),
		call("process", `{"action": "kill", "session_id": "proc_000000000002"}`),
		call("process", `{"action": "poll", "session_id": "proc_000000000002"}`),
		call("terminal", `{"command": "python3 -c 'import sys; print(sys.stdin.isatty())'", "background": true, "pty": true}`),
		call("process", `{"action": "wait", "session_id": "proc_000000000003", "timeout": 5}`),
		call("terminal", `{"command": "python3 -c 'import sys; print(sys.stdin.isatty())'", "background": true}`),
		call("process", `{"action": "wait", "session_id": "proc_000000000004", "timeout": 5}`),
		call("process", `{"action": "list"}`),
		call("terminal", `{"command": "true", "background": true, "workdir": "/missing"}`),
		call("process", `{"action": "poll", "session_id": "proc_nope"}`),
		call("process", `{"action": "poll", "session_id": 12}`),
		call("process", `{"action": "wait"}`),
		call("process", `{"action": "restart", "session_id": "proc_000000000001"}`),
		call("process", `{}`),
	})
}

// TestGoldenReadWrite pins read_file and write_file: tools/file_tools.py
// (read_file_tool with its repeated-read guard, write_file_tool) and
// tools/file_operations.py (read_file, _suggest_similar_files,
// _add_line_numbers, write_file).
func TestGoldenReadWrite(t *testing.T) {
	runGolden(t, "readwrite", ToolOptions{}, []goldenStep{
		call("write_file", `{"path": "/work/src/app.py", "content": "import os\n\ndef main():\n    print('hi')\n"}`),
		call("write_file", `{"path": "notes.txt", "content": "no newline at the end"}`),
		call("write_file", `{"path": "/etc/passwd", "content": "x"}`),
		call("write_file", `{"path": "/work/src", "content": "x"}`),
		call("write_file", `{"path": "empty.txt", "content": null}`),
		call("write_file", `{"path": "/work/uni.txt", "content": "é😀 <&>\n"}`),
		call("read_file", `{"path": "/work/src/app.py"}`),
		call("read_file", `{"path": "notes.txt"}`),
		call("read_file", `{"path": "/work/uni.txt"}`),
		call("read_file", `{"path": "/work/src/ap.py"}`),
		call("read_file", `{"path": "/work/src/app.py", "offset": 2, "limit": 2}`),
		call("read_file", `{"path": "/work/src/app.py", "offset": 0}`),
		call("read_file", `{"path": "/work/src/app.py", "limit": "5"}`),
		call("read_file", `{"path": 5}`),
		sh(`seq 1 2500 > long.txt; printf 'x%.0s' $(seq 1 2100) > wide.txt; printf '\000\001\002binary' > blob.dat; : > pic.png; printf 'PASSWORD=hunter2\nkey: sk-abcdefghijklmnop1234\n' > secrets.env`),
		call("read_file", `{"path": "long.txt"}`),
		call("read_file", `{"path": "long.txt", "offset": 2400, "limit": 5000}`),
		call("read_file", `{"path": "wide.txt"}`),
		call("read_file", `{"path": "blob.dat"}`),
		call("read_file", `{"path": "pic.png"}`),
		call("read_file", `{"path": "secrets.env"}`),
		call("read_file", `{"path": "~/.profile", "limit": 2}`),
		call("read_file", `{"path": "notes.txt"}`),
		call("read_file", `{"path": "notes.txt"}`),
		call("read_file", `{"path": "notes.txt"}`),
		call("read_file", `{"path": "notes.txt"}`),
		call("terminal", `{"command": "true"}`),
		call("read_file", `{"path": "notes.txt"}`),
	})
}

// TestGoldenSearch pins search_files: tools/file_tools.py (search_tool,
// its guard and truncation hint) and tools/file_operations.py (search,
// _search_files, _search_with_grep) in an image without ripgrep, where
// hermes falls back to grep and find.
func TestGoldenSearch(t *testing.T) {
	runGolden(t, "search", ToolOptions{}, []goldenStep{
		sh(`mkdir -p pkg/sub .hidden && printf 'def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n' > pkg/ops.py && printf 'from ops import add\nprint(add(1, 2))\n' > pkg/sub/main.py && echo 'def add' > .hidden/x.py && echo 'TOKEN=abcdef0123456789xyz' > pkg/conf.ini && touch -d @1700000000 pkg/ops.py && touch -d @1700000100 pkg/sub/main.py`),
		call("search_files", `{"pattern": "def add", "path": "pkg"}`),
		call("search_files", `{"pattern": "def add"}`),
		call("search_files", `{"pattern": "add", "path": "/work/pkg", "output_mode": "count"}`),
		call("search_files", `{"pattern": "add", "path": "/work/pkg", "output_mode": "files_only"}`),
		call("search_files", `{"pattern": "return", "path": "pkg", "context": 1, "limit": 2}`),
		call("search_files", `{"pattern": "def", "path": "pkg", "file_glob": "*.py", "limit": 1, "offset": 1}`),
		call("search_files", `{"pattern": "TOKEN", "path": "pkg"}`),
		call("search_files", `{"pattern": "(add|sub)", "path": "pkg"}`),
		call("search_files", `{"pattern": "x", "path": "/nowhere"}`),
		call("search_files", `{"pattern": "*.py", "target": "files", "path": "pkg"}`),
		call("search_files", `{"pattern": "*.rs", "target": "files", "path": "pkg"}`),
		call("search_files", `{"pattern": "ops", "target": "find", "path": "pkg"}`),
		call("search_files", `{"pattern": "add", "path": "pkg", "limit": "5"}`),
		call("search_files", `{"pattern": 7, "path": "pkg"}`),
		call("search_files", `{"pattern": "def add", "path": "pkg"}`),
		call("search_files", `{"pattern": "def add", "path": "pkg"}`),
		call("search_files", `{"pattern": "def add", "path": "pkg"}`),
	})
}

// TestGoldenPatch pins the patch tool: tools/file_tools.py (patch_tool),
// tools/file_operations.py (patch_replace, patch_v4a, _check_lint,
// _unified_diff), tools/fuzzy_match.py and tools/patch_parser.py.
func TestGoldenPatch(t *testing.T) {
	v4a := func(s string) string {
		b, _ := jsonString(s)
		return `{"mode": "patch", "patch": ` + b + `}`
	}
	runGolden(t, "patch", ToolOptions{}, []goldenStep{
		sh(`mkdir -p calc && printf 'def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n' > calc/ops.py && printf 'alpha\nbeta\ngamma\n' > words.txt && printf 'x = 1\ny = 2\n' > gone.py && printf 'keep\n' > old.txt`),
		call("patch", `{"path": "calc/ops.py", "old_string": "return a - b\n\n\ndef sub", "new_string": "return a + b\n\n\ndef sub"}`),
		call("patch", `{"path": "calc/ops.py", "old_string": "return a - b", "new_string": "return a * b"}`),
		call("patch", `{"path": "calc/ops.py", "old_string": "return a", "new_string": "return  a", "replace_all": true}`),
		call("patch", `{"path": "words.txt", "old_string": "  beta  ", "new_string": "BETA"}`),
		call("patch", `{"path": "words.txt", "old_string": "delta", "new_string": "DELTA"}`),
		call("patch", `{"path": "words.txt", "old_string": "alpha\\nBETA", "new_string": "A\nB"}`),
		call("patch", `{"path": "words.txt", "old_string": "gamma", "new_string": "gamma"}`),
		call("patch", `{"path": "missing.txt", "old_string": "a", "new_string": "b"}`),
		call("patch", `{"old_string": "a", "new_string": "b"}`),
		call("patch", `{"path": "words.txt", "old_string": "a"}`),
		call("patch", `{"mode": "rewrite"}`),
		call("patch", `{"mode": "patch"}`),
		call("patch", v4a("*** Begin Patch\n*** Add File: pkg/new.py\n+print('new')\n+x = 1\n*** Update File: calc/ops.py\n@@ def sub @@\n def sub(a, b):\n-    return  a * b\n+    return a * b\n*** Delete File: gone.py\n*** Move File: old.txt -> moved.txt\n*** End Patch")),
		call("patch", v4a("*** Begin Patch\n*** Update File: words.txt\n@@\n-not there\n+x\n*** Delete File: never.py\n*** End Patch")),
		call("patch", v4a("*** Update File: words.txt\n@@ gamma @@\n+delta\n")),
		call("read_file", `{"path": "words.txt"}`),
		call("terminal", `{"command": "ls; cat calc/ops.py moved.txt pkg/new.py"}`),
		// The fuzzier strategies: indentation, unicode punctuation under a
		// block anchor, and lines that are only alike.
		sh(`printf 'class A:\n    def f(self):\n        x = \xe2\x80\x9cquoted\xe2\x80\x9d \xe2\x80\x94 dash\n        return x\n' > a.py && printf 'alpha = 1\nbeta = 2\ngamma = 3\ndelta = 4\n' > vars.txt`),
		call("patch", `{"path": "a.py", "old_string": "def f(self):\nx = \"quoted\" -- dash\nreturn x", "new_string": "def f(self):\n        return 1"}`),
		call("patch", `{"path": "vars.txt", "old_string": "alpha = 1\nbeta = 20\ngamma = 30\ndelta = 4", "new_string": "all = 0"}`),
		call("patch", `{"path": "vars.txt", "old_string": "all = O", "new_string": "all = 1"}`),
		call("patch", `{"path": "vars.txt", "old_string": "al = 0", "new_string": "all = 1"}`),
	})
}

// TestGoldenLint pins the syntax check after an edit
// (tools/file_operations.py's _check_lint) where the linter exists: hermes
// learns once per session whether `python` is on PATH.
func TestGoldenLint(t *testing.T) {
	runGolden(t, "lint", ToolOptions{}, []goldenStep{
		sh(`ln -s /usr/bin/python3 /usr/local/bin/python && printf 'def f():\n    return 1\n' > m.py`),
		call("patch", `{"path": "m.py", "old_string": "return 1", "new_string": "return (1"}`),
		call("patch", `{"path": "m.py", "old_string": "return (1", "new_string": "return 2"}`),
		call("patch", `{"mode": "patch", "patch": "*** Begin Patch\n*** Add File: n.py\n+x = [\n*** End Patch"}`),
	})
}

// jsonString writes s as a JSON string.
func jsonString(s string) (string, error) {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}
