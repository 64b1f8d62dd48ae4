package terminus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
	"github.com/proctor-dev/proctor/sandbox"
)

// Harbor's TmuxSession (src/harbor/agents/terminus_2/tmux_session.py):
// the session's name, the longest tmux command it sends, the folder the
// pane's output and the recording go to (Harbor's EnvironmentPaths.agent_dir).
const (
	sessionName  = "terminus-2"
	sendKeysMax  = 16000
	agentLogDir  = "/logs/agent"
	historyLimit = 10000000
)

// captureMax bounds what one command of the session may print: a capture
// of the whole history is at most 2,000 lines of history (the pane's
// limit: Harbor raises history-limit only after the pane exists) and the
// screen, in UTF-8.
const captureMax = 16 << 20

// clock is the time a session waits by: time.Now and a sleep that ends
// with ctx; tests record the waits instead.
type clock struct {
	now   func() time.Time
	sleep func(ctx context.Context, secs float64) error
}

func realClock() clock {
	return clock{now: time.Now, sleep: func(ctx context.Context, secs float64) error {
		if secs <= 0 || secs != secs {
			return ctx.Err()
		}
		t := time.NewTimer(time.Duration(secs * float64(time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
}

// session is TmuxSession over a Shell: every tmux command runs as Harbor's
// environment.exec runs it (a fresh bash -c in the task's directory, its
// stderr after its stdout), so what the model reads is what tmux printed.
type session struct {
	sh            agent.Shell
	tmux          string // how commands name tmux ("tmux")
	width, height int
	record        bool
	logDir        string // where the pane's log and the recording go
	clock         clock
	prev          *string // the last whole capture (_previous_buffer)
}

// run is environment.exec: the command's output (stdout then stderr, as
// docker compose exec merges them, decoded with errors="replace") and its
// exit code. An error is the sandbox's.
func (s *session) run(ctx context.Context, cmd string) (string, int, error) {
	r, err := s.sh.Exec(ctx, cmd, sandbox.ExecOptions{Fresh: true, MaxOutput: captureMax})
	if err != nil {
		return "", 0, err
	}
	return pyjson.ValidUTF8([]byte(r.Stdout + r.Stderr)), r.ExitCode, nil
}

// startCommand is _tmux_start_session.
func (s *session) startCommand() string {
	return fmt.Sprintf("export TERM=xterm-256color && export SHELL=/bin/bash && %s new-session -x %d -y %d -d -s %s 'bash --login' \\; pipe-pane -t %s 'cat > %s/terminus_2.pane'",
		s.tmux, s.width, s.height, sessionName, sessionName, s.logDir)
}

// start is TmuxSession.start after tmux is in place: the session, the
// history limit, and (record) asciinema started in the pane and the
// screen cleared, which the model's first screen shows.
func (s *session) start(ctx context.Context) error {
	out, rc, err := s.run(ctx, s.startCommand())
	if err != nil {
		return err
	}
	if rc != 0 {
		return fmt.Errorf("Failed to start tmux session. Error: %s", out)
	}
	if _, _, err := s.run(ctx, fmt.Sprintf("%s set-option -g history-limit %d", s.tmux, historyLimit)); err != nil {
		return err
	}
	if !s.record {
		return nil
	}
	if err := s.sendKeys(ctx, []string{"asciinema rec --stdin " + s.logDir + "/recording.cast", "Enter"}, 1.0); err != nil {
		return err
	}
	if err := s.sendKeys(ctx, []string{"clear", "Enter"}, 0); err != nil {
		return err
	}
	return s.settle(ctx)
}

// settle waits, at most two seconds, for the clear sent by start to reach
// the screen (the cursor back on its first line). Harbor does not wait:
// its next command, a docker compose exec, takes long enough; a capture a
// millisecond later here would show the screen before the clear.
func (s *session) settle(ctx context.Context) error {
	deadline := s.clock.now().Add(2 * time.Second)
	for {
		out, _, err := s.run(ctx, s.tmux+" display-message -p -t "+sessionName+" '#{cursor_y}'")
		if err != nil || strings.TrimSpace(out) == "0" || !s.clock.now().Before(deadline) {
			return err
		}
		if err := s.clock.sleep(ctx, 0.02); err != nil {
			return err
		}
	}
}

// alive is is_session_alive.
func (s *session) alive(ctx context.Context) (bool, error) {
	_, rc, err := s.run(ctx, s.tmux+" has-session -t "+sessionName)
	return err == nil && rc == 0, err
}

// sendKeys is send_keys with block=False, the only way Terminus-2 sends
// keys: every tmux send-keys command, then a wait until minTimeout seconds
// have passed since the first.
func (s *session) sendKeys(ctx context.Context, keys []string, minTimeout float64) error {
	start := s.clock.now()
	for _, cmd := range s.sendKeysCommands(keys) {
		out, rc, err := s.run(ctx, cmd)
		if err != nil {
			return err
		}
		if rc != 0 {
			return fmt.Errorf("failed to send non-blocking keys: command=%s, return_code=%d, output=%s",
				pystr.Head(pyjson.Repr(cmd), 100), rc, pyjson.Repr(out))
		}
	}
	if elapsed := s.clock.now().Sub(start).Seconds(); elapsed < minTimeout {
		return s.clock.sleep(ctx, minTimeout-elapsed)
	}
	return nil
}

// sendKeysCommands is _tmux_send_keys: one tmux send-keys with every key
// shell-quoted, or, past 16,000 bytes, several, a key too long for one
// split into pieces whose quoted form fits.
func (s *session) sendKeysCommands(keys []string) []string {
	prefix := s.tmux + " send-keys -t " + pystr.Quote(sessionName) + " --"
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = pystr.Quote(k)
	}
	if single := prefix + " " + strings.Join(quoted, " "); len(single) <= sendKeysMax {
		return []string{single}
	}
	var cmds, cur []string
	curLen := len(prefix)
	flush := func() {
		if len(cur) > 0 {
			cmds = append(cmds, prefix+" "+strings.Join(cur, " "))
			cur = nil
			curLen = len(prefix)
		}
	}
	for i, k := range keys {
		add := 1 + len(quoted[i])
		switch {
		case curLen+add <= sendKeysMax:
			cur = append(cur, quoted[i])
			curLen += add
		case len(prefix)+add <= sendKeysMax:
			flush()
			cur = append(cur, quoted[i])
			curLen = len(prefix) + add
		default:
			flush()
			for _, chunk := range splitKey(k, sendKeysMax-len(prefix)-1) {
				if curLen+1+len(chunk) <= sendKeysMax {
					cur = append(cur, chunk)
					curLen += 1 + len(chunk)
				} else {
					flush()
					cur = append(cur, chunk)
					curLen = len(prefix) + 1 + len(chunk)
				}
			}
		}
	}
	flush()
	return cmds
}

// splitKey is _split_key_for_tmux: the longest prefixes, in code points,
// whose quoted form is at most max bytes, found by bisection, quoted.
func splitKey(key string, max int) []string {
	var chunks []string
	rest := []rune(key)
	for len(rest) > 0 {
		lo, hi, best := 1, len(rest), 1
		for lo <= hi {
			mid := (lo + hi) / 2
			if len(pystr.Quote(string(rest[:mid]))) <= max {
				best, lo = mid, mid+1
			} else {
				hi = mid - 1
			}
		}
		chunks = append(chunks, pystr.Quote(string(rest[:best])))
		rest = rest[best:]
	}
	return chunks
}

// capture is capture_pane: the screen, or the whole history and screen.
func (s *session) capture(ctx context.Context, entire bool) (string, error) {
	cmd := s.tmux + " capture-pane -p -t " + sessionName
	if entire {
		cmd = s.tmux + " capture-pane -p -S - -t " + sessionName
	}
	out, _, err := s.run(ctx, cmd)
	return out, err
}

// incremental is get_incremental_output: what is new since the last call,
// or the screen when that cannot be told.
func (s *session) incremental(ctx context.Context) (string, error) {
	cur, err := s.capture(ctx, true)
	if err != nil {
		return "", err
	}
	first := s.prev == nil
	newContent, found := s.findNew(cur)
	s.prev = &cur
	if !first && found && pystr.Strip(newContent) != "" {
		return "New Terminal Output:\n" + newContent, nil
	}
	screen, err := s.capture(ctx, false)
	return "Current Terminal Screen:\n" + screen, err
}

// findNew is _find_new_content, with its quirk: the offset of the last
// line of the previous (stripped) buffer is taken into the current one.
func (s *session) findNew(cur string) (string, bool) {
	pb := ""
	if s.prev != nil {
		pb = pystr.Strip(*s.prev)
	}
	if !strings.Contains(cur, pb) {
		return "", false
	}
	idx := pystr.Index(cur, pb)
	if strings.Contains(pb, "\n") {
		idx = pystr.LastIndex(pb, "\n")
	}
	return pystr.From(cur, idx), true
}
