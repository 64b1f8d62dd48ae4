package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Protocols of the exec stream.
const (
	// ProtocolAuto tries WebSocket and falls back to SPDY when the API
	// server (or a proxy in front of it) refuses the upgrade.
	ProtocolAuto = ""
	// ProtocolSPDY uses SPDY only, for servers older than 1.31.
	ProtocolSPDY = "spdy"
)

// exitError is a command's non-zero exit status.
type exitError struct {
	code   int
	stderr string
}

func (e *exitError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return fmt.Sprintf("exit status %d: %s", e.code, e.stderr)
}

// stream runs argv in a pod's container over one exec connection and
// blocks until it ends. A nil stdin, stdout or stderr is not attached. A
// non-zero exit is an *exitError; other errors are the connection's.
func (b *Backend) stream(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := b.cs.CoreV1().RESTClient().Post().Namespace(b.ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: containerName,
			Command:   argv,
			Stdin:     stdin != nil,
			Stdout:    stdout != nil,
			Stderr:    stderr != nil,
		}, scheme.ParameterCodec)
	ex, err := b.executor(req.URL())
	if err != nil {
		return err
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return &exitError{code: ce.Code}
	}
	return err
}

func (b *Backend) executor(u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(b.rest, "POST", u)
	if err != nil || b.cfg.Protocol == ProtocolSPDY {
		return spdy, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(b.rest, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// run runs a bash script with args as a separate exec (tens of
// milliseconds) and returns its exit code. The script sees the container's
// environment, never the persistent shell's. Stderr is kept (bounded) for
// messages.
func (s *Sandbox) run(ctx context.Context, script string, args []string, stdin io.Reader, stdout io.Writer) (int, string, error) {
	return s.runArgv(ctx, append([]string{"bash", "-c", script, "proctor"}, args...), stdin, stdout)
}

// runArgv is run for a program of its own.
func (s *Sandbox) runArgv(ctx context.Context, argv []string, stdin io.Reader, stdout io.Writer) (int, string, error) {
	var stderr tail
	err := s.b.stream(ctx, s.name, argv, stdin, stdout, &stderr)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, strings.TrimSpace(stderr.String()), nil
	}
	if err != nil {
		return -1, stderr.String(), s.explain(ctx, err)
	}
	return 0, strings.TrimSpace(stderr.String()), nil
}

// tail keeps the last 4 KiB written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 4096; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// limitWriter keeps at most max bytes and fails past them, which ends the
// exec stream: content from a sandbox is untrusted and its size unknown.
type limitWriter struct {
	buf  bytes.Buffer
	max  int
	over bool
}

var errTooLarge = errors.New("too large")

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.max {
		w.over = true
		return 0, errTooLarge
	}
	return w.buf.Write(p)
}

// Controller is one shell controller running in the sandbox over its own
// exec stream: the plugin's, and in an isolated sandbox the agent's.
type Controller struct {
	*shell.Shell
	cancel context.CancelFunc
	done   chan struct{}
}

// controllerSpec says how to start one shell controller.
type controllerSpec struct {
	state string // the controller's state folder
	// prefix runs first, as the container's user, and starts the rest
	// (the warden, which switches to the user itself).
	prefix []string
	user   *userIDs // switched to with setpriv after prefix (nil: stay)
	home   *userIDs // whose HOME the shell gets (nil: the container's)
	// header: prefix prints "@@PROCTOR NS <pid>" before the shell starts.
	header bool
	// dropped: prefix runs first, and enter after it, with what prefix
	// left (the agent's shell, started again after the agent ran: the
	// exec runs as root with the sandbox's capabilities, and the image's
	// bash may be the agent's by then).
	dropped bool
	kill    func(ctx context.Context, pgid int) error
}

// open starts a shell controller: `prefix... [setpriv...] bash -c
// BOOTSTRAP proctor-shell STATE` from the sandbox's working directory,
// after enter (before prefix, or after it when dropped). The stream
// outlives ctx, which bounds only the start; Close ends it. With header,
// it returns the pid the prefix named.
func (s *Sandbox) open(ctx context.Context, cs controllerSpec) (*Controller, int, error) {
	home := ""
	if cs.home != nil {
		home = strconv.Itoa(cs.home.uid)
	}
	argv := []string{"bash", "-c", enter, "proctor-enter", cs.state + ".err", s.workdirSpec, home,
		strings.Join(slices.Sorted(maps.Keys(s.spec.Env)), " ")}
	if cs.dropped {
		argv = append(slices.Clone(cs.prefix), argv...)
	} else {
		argv = append(argv, cs.prefix...)
	}
	if cs.user != nil {
		argv = append(argv, cs.user.setpriv()...)
	}
	argv = append(argv, "bash", "-c", shell.Bootstrap(), "proctor-shell", cs.state)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Controller{cancel: cancel, done: make(chan struct{})}
	// A prefix that runs first writes its own errors (the warden's) to the
	// exec's stderr, before enter sends the rest to a file.
	var stderr io.Writer
	var prefixErr tail
	if cs.dropped {
		stderr = &prefixErr
	}
	go func() {
		defer close(c.done)
		err := s.b.stream(sctx, s.name, argv, inR, outW, stderr)
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		// The stream's stdin copy ends quietly; the shell's next write
		// fails.
		inW.Close()
	}()
	out := bufio.NewReaderSize(outR, 64<<10)
	ns := 0
	if cs.header {
		stop := context.AfterFunc(ctx, cancel)
		ns, _ = shell.ReadNSHeader(out) // 0: the start fails below, with the shell's errors
		stop()
	}
	c.Shell = shell.New(shell.Transport{
		Stdin:  inW,
		Stdout: out,
		Kill:   cs.kill,
		Close:  func() error { cancel(); return nil },
	}, cs.state)
	// The first round trip proves bash is there and the shell is ready.
	var r sandbox.ExecResult
	err := errors.New("the warden did not say which namespace it made")
	if !cs.header || ns > 0 {
		r, err = c.Exec(ctx, "true", sandbox.ExecOptions{})
	}
	if err != nil || r.ExitCode != 0 {
		c.Close()
		<-c.done
		msg := strings.TrimSpace(prefixErr.String() + " " + s.startErrors(ctx, cs.state))
		if err == nil {
			err = fmt.Errorf("exit %d", r.ExitCode)
		}
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("start shell: %w", ctx.Err())
		}
		if cs.user != nil && strings.Contains(msg, "setpriv") {
			return nil, 0, fmt.Errorf("start shell as user %q (the image needs setpriv, from util-linux): %v %s: %w", s.spec.User, err, msg, shell.ErrNoShell)
		}
		return nil, 0, fmt.Errorf("start shell (the image needs bash): %v %s: %w", s.explain(ctx, err), msg, shell.ErrNoShell)
	}
	return c, ns, nil
}

// Close ends the controller's stream.
func (c *Controller) Close() error {
	err := c.Shell.Close()
	c.cancel()
	return err
}

// startErrors reads what a controller that failed to start wrote to its
// error files. In an isolated pod the warden reads them: an exec runs as
// root with the pod's capabilities, and after the agent's turn the image's
// programs may be the agent's.
func (s *Sandbox) startErrors(ctx context.Context, stateDir string) string {
	var out limitWriter
	out.max = 8 << 10
	if s.agent == nil {
		s.run(ctx, `cat -- "$1.err" "$1/controller.err" 2>/dev/null | tail -c 4096`, []string{stateDir}, nil, &out)
		return strings.TrimSpace(out.buf.String())
	}
	for _, f := range []string{stateDir + ".err", stateDir + "/controller.err"} {
		s.runArgv(ctx, []string{shell.WardenPath, "read", "-engine", f, "4096"}, nil, &out)
	}
	return strings.TrimSpace(out.buf.String())
}

// enter prepares a controller's process as the container's user: it
// drops the variables Kubernetes adds to every container (the API
// server's address; a sandbox on docker has none) unless the spec set
// them, creates and enters the working directory, sets HOME for the sandbox's
// user, then runs the rest of its arguments as a child, with its errors
// going to a file, and waits for it. It stays as the parent so the exec's
// own stderr stays open: the controller moves its stderr to a file, and
// containerd closes an exec's stdin as soon as its stderr ends.
const enter = `e=$1 w=$2 u=$3 keep=" $4 "; shift 4
for v in $(compgen -e); do
  case $v in KUBERNETES_SERVICE_*|KUBERNETES_PORT*) [ "${keep#* $v }" = "$keep" ] && unset "$v" ;; esac
done
if [ -n "$w" ]; then mkdir -p -- "$w" 2>>"$e" && cd -- "$w" 2>>"$e" || exit 1; fi
if [ -n "$u" ]; then h=$(getent passwd "$u" 2>/dev/null | cut -d: -f6); [ -n "$h" ] && export HOME="$h"; fi
"$@" <&0 2>>"$e" &
wait $!`

// killGroup kills a process group from a separate exec, for when a call's
// context ends while the shell's command still runs.
// In an isolated pod the warden kills it, never the image's bash.
func (s *Sandbox) killGroup(ctx context.Context, pgid int) error {
	if s.agent != nil {
		return s.warden(ctx, "kill", "0", strconv.Itoa(pgid))
	}
	code, msg, err := s.run(ctx, `kill -KILL -- "-$1"`, []string{fmt.Sprint(pgid)}, nil, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("kill -%d: exit %d: %s", pgid, code, msg)
	}
	return err
}
