// Package shell is the persistent shell the sandbox backends (docker,
// kubernetes, local) share. A small bash controller runs inside the sandbox
// and starts every command in its own session and process group, with the
// shell state (working directory and exported variables) restored before
// and saved after, so `cd` and `export` persist between calls while a
// timeout can kill a command's whole group. Output goes to files inside the
// sandbox and only its head and tail travel back, so a command printing
// 100 MB costs the host at most the cap.
package shell

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

//go:embed controller.sh
var controller string

// Bootstrap returns the bash script a backend runs (with `bash -c SCRIPT
// proctor-shell STATEDIR`) to start the controller in stateDir.
func Bootstrap() string {
	return `[ -d "$1" ] || mkdir -p "$1" || exit 1
` + controller
}

// Transport is how the host talks to one controller.
type Transport struct {
	// Stdin and Stdout are the controller's standard streams.
	Stdin  io.WriteCloser
	Stdout io.Reader
	// Kill kills process group pgid in the sandbox, out of band, when a
	// call's context ends while its command still runs.
	Kill func(ctx context.Context, pgid int) error
	// Close ends the controller.
	Close func() error
}

// Shell is one persistent shell. Calls are serialised.
type Shell struct {
	t     Transport
	state string
	r     *bufio.Reader

	mu     sync.Mutex
	groups []int // process groups started, for backends that must kill leftovers
	seq    int
	cap    int
	dead   error
	closed atomic.Bool
}

// New wraps a started controller whose state folder is stateDir.
func New(t Transport, stateDir string) *Shell {
	return &Shell{t: t, state: stateDir, r: bufio.NewReaderSize(t.Stdout, 64<<10), cap: 1 << 20}
}

// StateDir is the controller's folder inside the sandbox.
func (s *Shell) StateDir() string { return s.state }

// watchdogDelay is how long a call whose context ended waits for the
// controller's answer before it declares the sandbox gone.
var watchdogDelay = 15 * time.Second

// Exec runs one command. See sandbox.Sandbox.Exec.
func (s *Shell) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if s.closed.Load() {
		return sandbox.ExecResult{}, sandbox.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return sandbox.ExecResult{}, sandbox.ErrClosed
	}
	if s.dead != nil {
		return sandbox.ExecResult{}, s.dead
	}
	if err := ctx.Err(); err != nil {
		return sandbox.ExecResult{}, err
	}
	if strings.IndexByte(cmd, 0) >= 0 {
		return sandbox.ExecResult{}, errors.New("exec: command contains a NUL byte")
	}
	start := time.Now()
	s.seq++
	id := s.seq
	script, err := commandScript(cmd, o)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	if _, err := io.WriteString(s.t.Stdin, s.request(id, script, o)); err != nil {
		return sandbox.ExecResult{}, s.fail(fmt.Errorf("send command: %v: %w", err, sandbox.ErrGone))
	}

	// Kill the command's group when ctx ends; the controller still answers.
	var pgid atomic.Int64
	stop := context.AfterFunc(ctx, func() {
		if p := pgid.Load(); p > 0 {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = s.t.Kill(kctx, int(p))
		}
	})
	defer stop()
	// If the controller does not answer within a while after ctx ended,
	// the sandbox is gone. The watch ends with this call: a controller
	// that answered stays usable however long the sandbox lives on.
	answered := make(chan struct{})
	defer close(answered)
	watchdog := context.AfterFunc(ctx, func() {
		t := time.NewTimer(watchdogDelay)
		defer t.Stop()
		select {
		case <-t.C:
			if s.t.Close != nil {
				s.t.Close()
			}
		case <-answered:
		}
	})
	defer watchdog()

	res, err := s.await(ctx, id, &pgid)
	if err != nil {
		return res, err
	}
	res.Duration = time.Since(start)
	if ctx.Err() != nil && !res.TimedOut {
		return res, ctx.Err()
	}
	return res, nil
}

// commandScript is what the controller runs for cmd: the per-call
// environment and directory, then the command.
func commandScript(cmd string, o sandbox.ExecOptions) (string, error) {
	var b strings.Builder
	if !o.Fresh && (o.Workdir != "" || len(o.Env) > 0) {
		// A per-call directory or environment must not leak into the shell.
		b.WriteString("__proctor_keep=1\n")
	}
	for _, k := range slices.Sorted(maps.Keys(o.Env)) {
		if !validName(k) {
			return "", fmt.Errorf("exec: invalid environment variable name %q", k)
		}
		if strings.IndexByte(o.Env[k], 0) >= 0 {
			return "", fmt.Errorf("exec: environment variable %s contains a NUL byte", k)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, Quote(o.Env[k]))
	}
	if o.Workdir != "" {
		fmt.Fprintf(&b, "cd %s || exit 1\n", Quote(o.Workdir))
	}
	b.WriteString(cmd)
	b.WriteString("\n")
	return b.String(), nil
}

// request is the controller's request to run script as call id: the
// output cap when it changed, then RUN with the timeout, sizes and
// freshness, the script and the stdin.
func (s *Shell) request(id int, script string, o sandbox.ExecOptions) string {
	maxOut := o.MaxOutput
	if maxOut <= 0 {
		maxOut = sandbox.DefaultMaxOutput
	}
	var req strings.Builder
	if maxOut != s.cap {
		fmt.Fprintf(&req, "CAP %d\n", maxOut)
		s.cap = maxOut
	}
	tmo := o.Timeout.Milliseconds()
	if o.Timeout > 0 && tmo == 0 {
		tmo = 1
	}
	fresh := ""
	if o.Fresh {
		fresh = " F"
	}
	fmt.Fprintf(&req, "RUN %d %d %d %d%s\n", id, tmo, len(script), len(o.Stdin), fresh)
	req.WriteString(script)
	req.Write(o.Stdin)
	return req.String()
}

// await reads the controller's replies to call id: START, with the
// command's process group (stored in pgid, and killed at once when ctx
// has ended), then DONE with the exit status and the output.
func (s *Shell) await(ctx context.Context, id int, pgid *atomic.Int64) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	for {
		line, err := s.readLine()
		if err != nil {
			return res, s.fail(fmt.Errorf("read reply: %v: %w", err, sandbox.ErrGone))
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "@@PROCTOR" || f[2] != strconv.Itoa(id) {
			continue
		}
		if f[1] == "START" && len(f) == 4 {
			p, err := strconv.Atoi(f[3])
			if err != nil || p < 2 {
				// Never kill group 0 (ours) or -1 (everything).
				return res, s.fail(fmt.Errorf("bad reply %q: %w", line, sandbox.ErrGone))
			}
			pgid.Store(int64(p))
			s.groups = append(s.groups, p)
			if ctx.Err() != nil {
				kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_ = s.t.Kill(kctx, p)
				cancel()
			}
			continue
		}
		if f[1] != "DONE" {
			continue
		}
		d, err := parseDone(f, s.cap)
		if err != nil {
			return res, s.fail(fmt.Errorf("bad reply %q: %v: %w", line, err, sandbox.ErrGone))
		}
		res.ExitCode = d.exit
		res.TimedOut = d.timedOut
		res.OOMKilled = d.oom
		out, tout, err := s.readStream(d.outSize, d.outSent)
		if err != nil {
			return res, err
		}
		errs, terr, err := s.readStream(d.errSize, d.errSent)
		if err != nil {
			return res, err
		}
		res.Stdout, res.Stderr, res.Truncated = out, errs, tout || terr
		return res, nil
	}
}

// Stat reports the sandbox's process count and limit from its cgroup
// (max < 0 when there is none), asked of the controller without a fork, so
// it answers even when the sandbox has no process slot left.
func (s *Shell) Stat(ctx context.Context) (pids, max int64, err error) {
	f, err := s.control(ctx, "STAT\n", "STAT", 4)
	if err != nil {
		return 0, 0, err
	}
	pids, _ = strconv.ParseInt(f[2], 10, 64)
	max = -1
	if v, err := strconv.ParseInt(f[3], 10, 64); err == nil {
		max = v
	}
	return pids, max, nil
}

// Signal sends sig to pid (as the sandbox numbers it) with the
// controller's builtin kill, without a fork.
func (s *Shell) Signal(ctx context.Context, sig, pid int) error {
	if pid < 2 {
		return fmt.Errorf("signal: refusing pid %d", pid)
	}
	f, err := s.control(ctx, fmt.Sprintf("SIG %d %d\n", sig, pid), "SIG", 3)
	if err != nil {
		return err
	}
	if f[2] != "0" {
		return fmt.Errorf("signal %d to pid %d: kill exit %s", sig, pid, f[2])
	}
	return nil
}

// control sends one control line and reads the reply frame of the given
// kind with n fields.
func (s *Shell) control(ctx context.Context, line, kind string, n int) ([]string, error) {
	if s.closed.Load() {
		return nil, sandbox.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != nil {
		return nil, s.dead
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(s.t.Stdin, line); err != nil {
		return nil, s.fail(fmt.Errorf("send %s: %v: %w", kind, err, sandbox.ErrGone))
	}
	for {
		l, err := s.readLine()
		if err != nil {
			return nil, s.fail(fmt.Errorf("read %s reply: %v: %w", kind, err, sandbox.ErrGone))
		}
		f := strings.Fields(l)
		if len(f) == n && f[0] == "@@PROCTOR" && f[1] == kind {
			return f, nil
		}
	}
}

// done is a parsed DONE frame header.
type done struct {
	exit             int
	timedOut, oom    bool
	outSize, errSize int64
	outSent, errSent int64
}

// parseDone checks a DONE frame's fields. Any process in the sandbox that
// can write to the controller's stdout can forge one, so sizes are bounded
// by the cap this host asked for before anything is allocated.
func parseDone(f []string, cap int) (done, error) {
	var d done
	if len(f) != 10 {
		return d, errors.New("want 10 fields")
	}
	var n [8]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i+2], 10, 64)
		if err != nil || v < 0 {
			return d, fmt.Errorf("field %d: not a count", i+2)
		}
		n[i] = v
	}
	if n[1] > 255 || n[2] > 1 || n[3] > 1 {
		return d, errors.New("exit status out of range")
	}
	if n[6] > n[4] || n[7] > n[5] || n[6] > int64(cap) || n[7] > int64(cap) {
		return d, errors.New("sizes out of range")
	}
	return done{exit: int(n[1]), timedOut: n[2] == 1, oom: n[3] == 1,
		outSize: n[4], errSize: n[5], outSent: n[6], errSent: n[7]}, nil
}

// readStream reads sent bytes of a stream whose full size was size, and
// puts a marker where bytes were cut.
func (s *Shell) readStream(size, sent int64) (string, bool, error) {
	buf := make([]byte, sent)
	if _, err := io.ReadFull(s.r, buf); err != nil {
		return "", false, s.fail(fmt.Errorf("read output: %v: %w", err, sandbox.ErrGone))
	}
	if size <= sent {
		return string(buf), false, nil
	}
	head := sent / 2
	return string(buf[:head]) + sandbox.CutMark(size-sent) + string(buf[head:]), true, nil
}

// readLine reads one frame line. Lines are short; a longer one is not
// from the controller, and is refused instead of buffered without bound.
func (s *Shell) readLine() (string, error) {
	b, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", errors.New("line over 64 KiB in the reply stream")
	}
	return string(b), err
}

func (s *Shell) fail(err error) error {
	if s.closed.Load() {
		err = sandbox.ErrClosed
	}
	s.dead = err
	return err
}

// Groups returns the process groups of every command started so far
// (background children stay in their command's group).
func (s *Shell) Groups() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.groups)
}

// Closed reports whether Close was called.
func (s *Shell) Closed() bool { return s.closed.Load() }

// Close ends the controller. Commands still running are the backend's to
// kill (it owns the sandbox).
func (s *Shell) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.t.Stdin.Close()
	if s.t.Close != nil {
		return s.t.Close()
	}
	return nil
}

// Quote returns s as one single-quoted bash word.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func validName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ErrNoShell is returned by backends whose image has no bash.
var ErrNoShell = errors.New("no bash in the sandbox image")
