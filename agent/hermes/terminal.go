package hermes

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
	"github.com/proctor-dev/proctor/sandbox"
)

// maxOutputChars is terminal_tool's MAX_OUTPUT_CHARS: longer output keeps
// its first 40% and last 60% around a notice.
const maxOutputChars = 50000

// terminal is tools/terminal_tool.py's terminal_tool with a container
// backend: approvals are skipped, the command runs with `bash -c`.
func (s *Session) terminal(ctx context.Context, args *pyjson.Object) (reply, error) {
	command, _ := args.Get("command")
	timeout := arg(args, "timeout", nil)
	workdir := arg(args, "workdir", nil)
	// effective_timeout = timeout or default_timeout
	effective := timeout
	if !pyjson.Truthy(timeout) {
		effective = s.t.opts.CommandTimeout
	}
	if pyjson.Truthy(arg(args, "background", false)) {
		return s.spawn(ctx, args, command, workdir)
	}
	cmd, ok := command.(string)
	if !ok {
		// The backend's sudo rewrite runs re.search on the command.
		return terminalReply("", -1, fmt.Sprintf("Command execution failed: TypeError: expected string or bytes-like object, got '%s'", pyjson.TypeName(command))), nil
	}
	if pyjson.Truthy(workdir) {
		cmd = "cd " + pystr.Quote(pyjson.Str(workdir)) + " && " + cmd
	}
	output, code, err := s.foreground(ctx, cmd, effective)
	if err != nil {
		return reply{}, err
	}
	output = stripANSI(output)
	if output != "" {
		output = redact(pystr.Strip(output))
	}
	return terminalReply(output, code, nil), nil
}

func terminalReply(output string, code int, errMsg any) reply {
	return reply{obj: pyjson.NewObject().Set("output", output).Set("exit_code", code).Set("error", errMsg)}
}

// foreground runs one command as the docker backend's execute() does and
// returns its output (stdout and stderr merged, truncated as terminal_tool
// truncates it) and exit code.
func (s *Session) foreground(ctx context.Context, cmd string, timeout any) (string, int, error) {
	n, ok := asNum(timeout)
	if !ok {
		// deadline = time.monotonic() + timeout fails once the command
		// has started; proctor does not start it.
		return fmt.Sprintf("Docker execution error: unsupported operand type(s) for +: 'float' and '%s'", pyjson.TypeName(timeout)), 1, nil
	}
	timedOut := fmt.Sprintf("Command timed out after %ss", pyjson.Str(timeout))
	secs := n.float()
	if secs <= 0 || math.IsNaN(secs) {
		return timedOut, 124, nil
	}
	d := time.Duration(math.Min(secs, 1e6) * float64(time.Second))
	// exec: the shell's own process for the call becomes the command's
	// bash, a fork fewer per call; its pid, process group and exit code
	// are the same.
	r, err := s.sh.Exec(ctx, "exec bash -c "+escapeArg(cmd)+" </dev/null 2>&1", sandbox.ExecOptions{Timeout: d, MaxOutput: foregroundMax})
	if err != nil {
		return "", 0, err
	}
	if r.TimedOut {
		return timedOut, 124, nil
	}
	out := r.Stdout + r.Stderr
	if r.Truncated {
		if head, cut, tail := sandbox.CutOutput(out); cut > 0 {
			return truncate(pyjson.ValidUTF8([]byte(head)), cut, pyjson.ValidUTF8([]byte(tail))), r.ExitCode, nil
		}
	}
	return truncate(pyjson.ValidUTF8([]byte(out)), 0, ""), r.ExitCode, nil
}

// foregroundMax is what one command brings back from the sandbox: over it
// the sandbox keeps the head and the tail, which hold more than the 20,000
// and 30,000 characters the model sees.
const foregroundMax = 1 << 20

// truncate is terminal_tool's truncation of an output that is head, then
// missing characters never brought back (counted as one per byte), then
// tail: over maxOutputChars characters it keeps the first 40% and the last
// 60% around a notice of how many characters it left out.
func truncate(head string, missing int, tail string) string {
	n := pystr.Len(head) + missing + pystr.Len(tail)
	if n <= maxOutputChars {
		return head + tail
	}
	if missing == 0 {
		head, tail = head+tail, head+tail
	}
	h := maxOutputChars * 4 / 10
	t := maxOutputChars - h
	return pystr.Head(head, h) + fmt.Sprintf("\n\n... [OUTPUT TRUNCATED - %d chars omitted out of %d total] ...\n\n", n-h-t, n) + pystr.Tail(tail, t)
}
