package isolate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// fakeSealer plays a sandbox for Seal and records what Seal asked of it.
type fakeSealer struct {
	pids, max int64
	statErr   error
	stopErr   error
	wardenErr error

	stopped bool
	warden  [][]string
}

func (f *fakeSealer) Stat(context.Context) (int64, int64, error) { return f.pids, f.max, f.statErr }
func (f *fakeSealer) StopAgent(context.Context) error {
	f.stopped = true
	return f.stopErr
}
func (f *fakeSealer) Warden(_ context.Context, args ...string) error {
	f.warden = append(f.warden, args)
	return f.wardenErr
}
func (f *fakeSealer) Explain(_ context.Context, err error) error {
	return fmt.Errorf("explained: %w", err)
}

// The policy both backends follow. Before it was one, the docker backend
// sealed a sandbox without an agent without asking whether it answered,
// and kept no process room when its cgroup gave no limit; the kubernetes
// backend did both.
func TestSeal(t *testing.T) {
	dead := fmt.Errorf("shell: %w", sandbox.ErrGone)
	cases := []struct {
		name    string
		sb      fakeSealer
		policy  Sandbox
		stopped bool
		note    string // a part of the note
		err     string // a part of the error
		remount bool
	}{
		{name: "room", sb: fakeSealer{pids: 10, max: 1024}, policy: Sandbox{Agent: true, PidsMax: 1024}},
		{name: "no room", sb: fakeSealer{pids: 1000, max: 1024}, policy: Sandbox{Agent: true, PidsMax: 1024}, stopped: true, note: "1000 of 1024"},
		{name: "no limit known", sb: fakeSealer{pids: 190, max: -1}, policy: Sandbox{Agent: true, PidsMax: 200}, stopped: true, note: "190 of 200"},
		{name: "node's limit", sb: fakeSealer{pids: 190, max: 4096}, policy: Sandbox{Agent: true, PidsMax: 200}, stopped: true, note: "190 of 200"},
		{name: "lower limit than the spec's", sb: fakeSealer{pids: 90, max: 100}, policy: Sandbox{Agent: true, PidsMax: 200}, stopped: true, note: "90 of 100"},
		{name: "dead", sb: fakeSealer{statErr: dead}, policy: Sandbox{Agent: true, PidsMax: 200}, err: "explained: shell"},
		{name: "dead without an agent", sb: fakeSealer{statErr: dead}, policy: Sandbox{}, err: "explained: shell"},
		{name: "no agent", sb: fakeSealer{pids: 1000, max: 1024}, policy: Sandbox{PidsMax: 1024, Private: []string{"/tests"}}},
		{name: "private", sb: fakeSealer{pids: 1, max: 1024}, policy: Sandbox{Agent: true, PidsMax: 1024, Private: []string{"/tests"}, TmpfsMiB: 64, User: "1:2:3", PluginNS: 42}, remount: true},
		{name: "private, no room", sb: fakeSealer{pids: 1000, max: 1024}, policy: Sandbox{Agent: true, PidsMax: 1024, Private: []string{"/tests"}}, stopped: true, note: "1000 of 1024", remount: true},
		{name: "stop fails", sb: fakeSealer{pids: 1000, max: 1024, stopErr: errors.New("no kill")}, policy: Sandbox{Agent: true, PidsMax: 1024}, stopped: true, err: "no kill"},
		{name: "remount fails", sb: fakeSealer{pids: 1, max: 1024, wardenErr: errors.New("no mount")}, policy: Sandbox{Agent: true, PidsMax: 1024, Private: []string{"/tests"}}, remount: true, err: "empty the private folders: no mount"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			note, err := Seal(context.Background(), &c.sb, c.policy)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("error %v, want %q", err, c.err)
			}
			if c.err != "" && errors.Is(c.sb.statErr, sandbox.ErrGone) && !errors.Is(err, sandbox.ErrGone) {
				t.Errorf("error %v does not match ErrGone", err)
			}
			if c.sb.stopped != c.stopped {
				t.Errorf("agent stopped %v, want %v", c.sb.stopped, c.stopped)
			}
			if c.note == "" && note != "" || !strings.Contains(note, c.note) {
				t.Errorf("note %q, want one with %q", note, c.note)
			}
			want := [][]string(nil)
			if c.remount {
				want = [][]string{shell.Remount(c.policy.TmpfsMiB, c.policy.User, c.policy.PluginNS, c.policy.Private)}
			}
			if !slices.EqualFunc(c.sb.warden, want, slices.Equal) {
				t.Errorf("warden ran %q, want %q", c.sb.warden, want)
			}
		})
	}
}

// fakeShell answers every command with res and err, and records Close.
type fakeShell struct {
	res    sandbox.ExecResult
	err    error
	closed bool
}

func (f *fakeShell) Exec(context.Context, string, sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return f.res, f.err
}
func (f *fakeShell) Close() error { f.closed = true; return nil }

// fakeAgent plays an agent's side for Exec.
type fakeAgent struct {
	sh         *fakeShell
	next       *fakeShell
	restartErr error
	live       func() error
	closed     bool
	running    bool
	restarts   int
}

func (f *fakeAgent) Shell() Shell { return f.sh }
func (f *fakeAgent) Restart(context.Context) error {
	f.restarts++
	if f.restartErr != nil {
		return f.restartErr
	}
	f.sh = f.next
	return nil
}
func (f *fakeAgent) Live() error {
	if f.live != nil {
		return f.live()
	}
	return nil
}
func (f *fakeAgent) Closed() bool                 { return f.closed }
func (f *fakeAgent) Running(context.Context) bool { return f.running }
func (f *fakeAgent) Explain(_ context.Context, err error) error {
	return fmt.Errorf("explained: %w", err)
}

func TestExec(t *testing.T) {
	ctx := context.Background()
	gone := fmt.Errorf("shell died: %w", sandbox.ErrGone)
	t.Run("answer", func(t *testing.T) {
		a := &fakeAgent{sh: &fakeShell{res: sandbox.ExecResult{Stdout: "hi\n"}}, running: true}
		if r, err := Exec(ctx, a, "echo hi", sandbox.ExecOptions{}); err != nil || r.Stdout != "hi\n" || a.restarts != 0 {
			t.Fatalf("%+v %v, %d restarts", r, err, a.restarts)
		}
	})
	t.Run("killed shell restarts", func(t *testing.T) {
		old := &fakeShell{err: gone}
		a := &fakeAgent{sh: old, next: &fakeShell{}, running: true}
		r, err := Exec(ctx, a, "kill -9 -1", sandbox.ExecOptions{})
		if err != nil || r.ExitCode != 137 || !strings.Contains(r.Stderr, shell.Restarted) {
			t.Fatalf("%+v %v: want exit 137 and the note", r, err)
		}
		if a.restarts != 1 || !old.closed || a.sh != a.next {
			t.Fatalf("restarts %d, old shell closed %v", a.restarts, old.closed)
		}
	})
	t.Run("restart fails", func(t *testing.T) {
		a := &fakeAgent{sh: &fakeShell{err: gone}, restartErr: errors.New("no shell"), running: true}
		if _, err := Exec(ctx, a, "kill -9 -1", sandbox.ExecOptions{}); err == nil || !strings.Contains(err.Error(), "explained") || !strings.Contains(err.Error(), "no shell") {
			t.Fatalf("want the explained failure, got %v", err)
		}
	})
	t.Run("sandbox gone", func(t *testing.T) {
		a := &fakeAgent{sh: &fakeShell{err: gone}}
		if _, err := Exec(ctx, a, "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "explained") || a.restarts != 0 {
			t.Fatalf("want the explained ErrGone and no restart, got %v (%d restarts)", err, a.restarts)
		}
	})
	t.Run("closed", func(t *testing.T) {
		a := &fakeAgent{sh: &fakeShell{err: gone}, closed: true, running: true}
		if _, err := Exec(ctx, a, "true", sandbox.ExecOptions{}); err != gone || a.restarts != 0 {
			t.Fatalf("want the shell's error, got %v (%d restarts)", err, a.restarts)
		}
	})
	t.Run("over the limit", func(t *testing.T) {
		over := false
		a := &fakeAgent{sh: &fakeShell{err: gone}, running: true, live: func() error {
			if over {
				return sandbox.ErrLimit
			}
			over = true // the watchdog stops the shell during the call
			return nil
		}}
		if _, err := Exec(ctx, a, "fill the disk", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrLimit) || a.restarts != 0 {
			t.Fatalf("want ErrLimit and no restart, got %v (%d restarts)", err, a.restarts)
		}
		if _, err := Exec(ctx, a, "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrLimit) {
			t.Fatalf("a call after: want ErrLimit, got %v", err)
		}
	})
	t.Run("other failures pass", func(t *testing.T) {
		other := errors.New("write: broken pipe")
		a := &fakeAgent{sh: &fakeShell{err: other}, running: true}
		if _, err := Exec(ctx, a, "true", sandbox.ExecOptions{}); err != other || a.restarts != 0 {
			t.Fatalf("got %v (%d restarts)", err, a.restarts)
		}
	})
}
