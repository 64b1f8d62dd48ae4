package hermes

import "github.com/proctor-dev/proctor/agent/pyjson"

// The tool definitions, as hermes-agent registers them (the *_SCHEMA dicts
// of tools/terminal_tool.py, tools/process_registry.py and
// tools/file_tools.py), key order included.

const terminalDescription = "Execute shell commands on a Linux environment. Filesystem persists between calls.\n\n" +
	"Do NOT use cat/head/tail to read files — use read_file instead.\n" +
	"Do NOT use grep/rg/find to search — use search_files instead.\n" +
	"Do NOT use ls to list directories — use search_files(target='files') instead.\n" +
	"Do NOT use sed/awk to edit files — use patch instead.\n" +
	"Do NOT use echo/cat heredoc to create files — use write_file instead.\n" +
	"Reserve terminal for: builds, installs, git, processes, scripts, network, package managers, and anything that needs a shell.\n\n" +
	"Foreground (default): Commands return INSTANTLY when done, even if the timeout is high. Set timeout=300 for long builds/scripts — you'll still get the result in seconds if it's fast. Prefer foreground for everything that finishes.\n" +
	"Background: ONLY for long-running servers, watchers, or processes that never exit. Set background=true to get a session_id, then use process(action=\"wait\") to block until done — it returns instantly on completion, same as foreground. Use process(action=\"poll\") only when you need a progress check without blocking.\n" +
	"Do NOT use background for scripts, builds, or installs — foreground with a generous timeout is always better (fewer tool calls, instant results).\n" +
	"Working directory: Use 'workdir' for per-command cwd.\n" +
	"PTY mode: Set pty=true for interactive CLI tools (Codex, Claude Code, Python REPL).\n\n" +
	"Do NOT use vim/nano/interactive tools without pty=true — they hang without a pseudo-terminal. Pipe git output to cat if it might page.\n"

// prop is one property: its type, then key/value pairs in order.
func prop(typ string, kv ...any) *pyjson.Object {
	o := pyjson.NewObject().Set("type", typ)
	for i := 0; i+1 < len(kv); i += 2 {
		o.Set(kv[i].(string), kv[i+1])
	}
	return o
}

func params(required []string, props ...any) *pyjson.Object {
	p := pyjson.NewObject()
	for i := 0; i+1 < len(props); i += 2 {
		p.Set(props[i].(string), props[i+1])
	}
	return pyjson.NewObject().Set("type", "object").Set("properties", p).Set("required", required)
}

func schema(name, description string, parameters *pyjson.Object) *pyjson.Object {
	return pyjson.NewObject().Set("name", name).Set("description", description).Set("parameters", parameters)
}

var schemas = map[string]*pyjson.Object{
	"terminal": schema("terminal", terminalDescription, params([]string{"command"},
		"command", prop("string", "description", "The command to execute on the VM"),
		"background", prop("boolean", "description", "ONLY for servers/watchers that never exit. For scripts, builds, installs — use foreground with timeout instead (it returns instantly when done).", "default", false),
		"timeout", prop("integer", "description", "Max seconds to wait (default: 180). Returns INSTANTLY when command finishes — set high for long tasks, you won't wait unnecessarily.", "minimum", 1),
		"workdir", prop("string", "description", "Working directory for this command (absolute path). Defaults to the session working directory."),
		"check_interval", prop("integer", "description", "Seconds between automatic status checks for background processes (gateway/messaging only, minimum 30). When set, I'll proactively report progress.", "minimum", 30),
		"pty", prop("boolean", "description", "Run in pseudo-terminal (PTY) mode for interactive CLI tools like Codex, Claude Code, or Python REPL. Only works with local and SSH backends. Default: false.", "default", false),
	)),
	"process": schema("process", "Manage background processes started with terminal(background=true). "+
		"Actions: 'list' (show all), 'poll' (check status + new output), "+
		"'log' (full output with pagination), 'wait' (block until done or timeout), "+
		"'kill' (terminate), 'write' (send raw stdin data without newline), "+
		"'submit' (send data + Enter, for answering prompts).", params([]string{"action"},
		"action", prop("string", "enum", []string{"list", "poll", "log", "wait", "kill", "write", "submit"}, "description", "Action to perform on background processes"),
		"session_id", prop("string", "description", "Process session ID (from terminal background output). Required for all actions except 'list'."),
		"data", prop("string", "description", "Text to send to process stdin (for 'write' and 'submit' actions)"),
		"timeout", prop("integer", "description", "Max seconds to block for 'wait' action. Returns partial output on timeout.", "minimum", 1),
		"offset", prop("integer", "description", "Line offset for 'log' action (default: last 200 lines)"),
		"limit", prop("integer", "description", "Max lines to return for 'log' action", "minimum", 1),
	)),
	"read_file": schema("read_file", "Read a text file with line numbers and pagination. Use this instead of cat/head/tail in terminal. Output format: 'LINE_NUM|CONTENT'. Suggests similar filenames if not found. Use offset and limit for large files. NOTE: Cannot read images or binary files — use vision_analyze for images.", params([]string{"path"},
		"path", prop("string", "description", "Path to the file to read (absolute, relative, or ~/path)"),
		"offset", prop("integer", "description", "Line number to start reading from (1-indexed, default: 1)", "default", 1, "minimum", 1),
		"limit", prop("integer", "description", "Maximum number of lines to read (default: 500, max: 2000)", "default", 500, "maximum", 2000),
	)),
	"write_file": schema("write_file", "Write content to a file, completely replacing existing content. Use this instead of echo/cat heredoc in terminal. Creates parent directories automatically. OVERWRITES the entire file — use 'patch' for targeted edits.", params([]string{"path", "content"},
		"path", prop("string", "description", "Path to the file to write (will be created if it doesn't exist, overwritten if it does)"),
		"content", prop("string", "description", "Complete content to write to the file"),
	)),
	"patch": schema("patch", "Targeted find-and-replace edits in files. Use this instead of sed/awk in terminal. Uses fuzzy matching (9 strategies) so minor whitespace/indentation differences won't break it. Returns a unified diff. Auto-runs syntax checks after editing.\n\nReplace mode (default): find a unique string and replace it.\nPatch mode: apply V4A multi-file patches for bulk changes.", params([]string{"mode"},
		"mode", prop("string", "enum", []string{"replace", "patch"}, "description", "Edit mode: 'replace' for targeted find-and-replace, 'patch' for V4A multi-file patches", "default", "replace"),
		"path", prop("string", "description", "File path to edit (required for 'replace' mode)"),
		"old_string", prop("string", "description", "Text to find in the file (required for 'replace' mode). Must be unique in the file unless replace_all=true. Include enough surrounding context to ensure uniqueness."),
		"new_string", prop("string", "description", "Replacement text (required for 'replace' mode). Can be empty string to delete the matched text."),
		"replace_all", prop("boolean", "description", "Replace all occurrences instead of requiring a unique match (default: false)", "default", false),
		"patch", prop("string", "description", "V4A format patch content (required for 'patch' mode). Format:\n*** Begin Patch\n*** Update File: path/to/file\n@@ context hint @@\n context line\n-removed line\n+added line\n*** End Patch"),
	)),
	"search_files": schema("search_files", "Search file contents or find files by name. Use this instead of grep/rg/find/ls in terminal. Ripgrep-backed, faster than shell equivalents.\n\nContent search (target='content'): Regex search inside files. Output modes: full matches with line numbers, file paths only, or match counts.\n\nFile search (target='files'): Find files by glob pattern (e.g., '*.py', '*config*'). Also use this instead of ls — results sorted by modification time.", params([]string{"pattern"},
		"pattern", prop("string", "description", "Regex pattern for content search, or glob pattern (e.g., '*.py') for file search"),
		"target", prop("string", "enum", []string{"content", "files"}, "description", "'content' searches inside file contents, 'files' searches for files by name", "default", "content"),
		"path", prop("string", "description", "Directory or file to search in (default: current working directory)", "default", "."),
		"file_glob", prop("string", "description", "Filter files by pattern in grep mode (e.g., '*.py' to only search Python files)"),
		"limit", prop("integer", "description", "Maximum number of results to return (default: 50)", "default", 50),
		"offset", prop("integer", "description", "Skip first N results for pagination (default: 0)", "default", 0),
		"output_mode", prop("string", "enum", []string{"content", "files_only", "count"}, "description", "Output format for grep mode: 'content' shows matching lines with line numbers, 'files_only' lists file paths, 'count' shows match counts per file", "default", "content"),
		"context", prop("integer", "description", "Number of context lines before and after each match (grep mode only)", "default", 0),
	)),
}
