package hermes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
	"github.com/proctor-dev/proctor/sandbox"
)

// result is what hermes' environment execute() returns for one command:
// its output (stdout and stderr merged, decoded as text) and exit code.
type result struct {
	out  string
	code int
}

// step is one command as hermes' file operations run it, with the stdin
// it is given (nil: none).
type step struct {
	cmd   string
	stdin []byte
	// filter, when set, is a command the output goes through in the
	// sandbox; the exit code stays the step's.
	filter string
	// shell runs the command with its own `bash -c`, as hermes does, for
	// commands whose failures bash itself words (a redirection to a
	// directory: "bash: line 1: x: Is a directory"). The others run in
	// the batch's shell, which saves a process.
	shell bool
	// when, if set, is a shell test on the exit codes of earlier steps
	// ($r0, $r1, ...) that must hold for the step to run; a step that
	// does not run answers nothing, with code 0.
	when string
}

// run runs commands as hermes' container backends run each of them, from
// the sandbox's working directory with stderr merged into stdout, but all
// in one sandbox call. A step the time limit cut gets the
// answer hermes' backends give: "Command timed out after Ns", code 124.
// maxOut bounds what one call brings back; over it the call fails.
func (s *Session) run(ctx context.Context, timeout time.Duration, maxOut int, steps ...step) ([]result, error) {
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	mark := "\n@@HERMES-" + hex.EncodeToString(tok) + " "
	var script strings.Builder
	var stdin []byte
	for i, st := range steps {
		in := " </dev/null"
		if st.stdin != nil {
			in, stdin = "", st.stdin
		}
		filter, code := "", `"$?"`
		if st.filter != "" {
			filter, code = " | "+st.filter, `"${PIPESTATUS[0]}"`
		}
		run := "{ " + st.cmd + "\n}"
		if st.shell {
			run = "bash -c " + escapeArg(st.cmd)
		}
		if st.when != "" {
			fmt.Fprintf(&script, "if %s; then\n", st.when)
		}
		fmt.Fprintf(&script, "%s%s 2>&1%s; r%d=%s\n", run, in, filter, i, code)
		if st.when != "" {
			fmt.Fprintf(&script, "else r%d=0; fi\n", i)
		}
		fmt.Fprintf(&script, "printf '%%s%%d\\n' %s \"$r%d\"\n", escapeArg(mark), i)
	}
	if maxOut <= 0 {
		maxOut = sandbox.DefaultMaxOutput
	}
	r, err := s.sh.Exec(ctx, script.String(), sandbox.ExecOptions{Timeout: timeout, Stdin: stdin, MaxOutput: maxOut})
	if err != nil {
		return nil, err
	}
	if r.Truncated {
		return nil, fmt.Errorf("output over %d bytes", maxOut)
	}
	out := make([]result, len(steps))
	rest := r.Stdout
	for i := range steps {
		k := strings.Index(rest, mark)
		nl := -1
		if k >= 0 {
			nl = strings.IndexByte(rest[k+len(mark):], '\n')
		}
		if k < 0 || nl < 0 {
			for j := i; j < len(steps); j++ {
				out[j] = result{out: fmt.Sprintf("Command timed out after %ds", int(timeout.Seconds())), code: 124}
			}
			break
		}
		code, _ := strconv.Atoi(rest[k+len(mark) : k+len(mark)+nl])
		out[i] = result{out: pyjson.ValidUTF8([]byte(rest[:k])), code: code}
		rest = rest[k+len(mark)+nl+1:]
	}
	return out, nil
}

// run1 runs one command.
func (s *Session) run1(ctx context.Context, timeout time.Duration, cmd string) (result, error) {
	r, err := s.run(ctx, timeout, 0, step{cmd: cmd})
	if err != nil {
		return result{}, err
	}
	return r[0], nil
}

// hasCommand is ShellFileOperations._has_command, cached per session.
func (s *Session) hasCommand(ctx context.Context, name string) (bool, error) {
	if v, ok := s.has[name]; ok {
		return v, nil
	}
	r, err := s.run1(ctx, s.envTimeout(), fmt.Sprintf("command -v %s >/dev/null 2>&1 && echo 'yes'", name))
	if err != nil {
		return false, err
	}
	s.has[name] = pystr.Strip(r.out) == "yes"
	return s.has[name], nil
}

// expandPath is ShellFileOperations._expand_path: ~ and ~user through the
// sandbox's shell.
func (s *Session) expandPath(ctx context.Context, path string) (string, error) {
	if !strings.HasPrefix(path, "~") {
		return path, nil
	}
	r, err := s.run1(ctx, s.envTimeout(), "echo $HOME")
	if err != nil {
		return "", err
	}
	home := pystr.Strip(r.out)
	if r.code != 0 || home == "" {
		return path, nil
	}
	if path == "~" {
		return home, nil
	}
	if strings.HasPrefix(path, "~/") {
		return home + path[1:], nil
	}
	rest := path[1:]
	user := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		user = rest[:i]
	}
	if user == "" || strings.Trim(user, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return path, nil
	}
	r, err = s.run1(ctx, s.envTimeout(), "echo ~"+user)
	if err != nil {
		return "", err
	}
	if uh := pystr.Strip(r.out); r.code == 0 && uh != "" {
		return uh + path[1+len(user):], nil
	}
	return path, nil
}
