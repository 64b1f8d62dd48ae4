package kubernetes

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/isolate"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// An isolated sandbox is a pod with two shells, both started through the
// warden (sandbox/warden), which the backend writes into the pod before
// either: the plugin's, in a mount namespace where the spec's Private
// folders are tmpfs mounts only it sees, and the agent's, in PID and mount
// namespaces of its own without CAP_SYS_ADMIN. The docker backend does the
// same with a container; docs/security.md says what it guarantees.

// pluginState is the plugin shell's folder: under the warden's folder,
// which the warden seals read-only, and a private tmpfs of its own.
const pluginState = shell.WardenDir + "/plugin"

// install writes the warden into the pod for the node's architecture and
// resolves users (names as the image's passwd and group say, before the
// agent can change them) with it: one exec, in three steps. The script
// says whether the container runs as root (the warden needs it) and the
// node's architecture; then it reads the warden's size and bytes, makes
// the working folder ($1: the agent's shell, which makes it otherwise,
// may run as a user who cannot); then it prints `warden id` of each user
// (the other arguments).
const install = `if [ "$EUID" != 0 ]; then
  u=$(id -un 2>/dev/null) || u=$(id -u):$(id -g)
  printf 'user %s\n' "$u"; exit 10
fi
printf 'arch %s\n' "$HOSTTYPE"
IFS= read -r n || exit 1
w=` + shell.WardenPath + `
mkdir -p ` + shell.WardenDir + ` && mkdir -p -m 700 ` + pluginState + ` && head -c "$n" > "$w.new" && chmod 755 "$w.new" && mv -f "$w.new" "$w" || exit 1
[ "$(stat -c %s "$w")" = "$n" ] || { echo "warden: wrote $(stat -c %s "$w") of $n bytes" >&2; exit 1; }
[ -z "$1" ] || mkdir -p -- "$1" || exit 1
shift
for u in "$@"; do printf 'id '; "$w" id "$u" || exit 11; done`

// imageUser is the user an image runs as when it is not root: an isolated
// pod must run as root, with this for the spec's user.
type imageUser string

func (u imageUser) Error() string { return fmt.Sprintf("the image runs as %q, not root", string(u)) }

// archs maps bash's HOSTTYPE to Go's architecture names.
var archs = map[string]string{"x86_64": "amd64", "aarch64": "arm64"}

// installWarden runs install and returns the users' ids, in the order
// asked.
func (s *Sandbox) installWarden(ctx context.Context, users []string) ([]userIDs, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr tail
	var code int
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		argv := append([]string{"bash", "-c", install, "proctor-install", s.workdirSpec}, users...)
		err = s.b.stream(ctx, s.name, argv, inR, outW, &stderr)
		var ee *exitError
		if errors.As(err, &ee) {
			code, err = ee.code, nil
		}
		outW.Close()
		inR.Close()
	}()
	out := bufio.NewReaderSize(outR, 4096)
	line, _ := out.ReadSlice('\n')
	first := strings.Fields(string(line))
	var ids []userIDs
	if len(first) == 2 && first[0] == "arch" {
		arch := archs[first[1]]
		if arch == "" {
			arch = first[1]
		}
		w, werr := shell.Warden(arch)
		if werr != nil {
			inW.CloseWithError(werr)
			outR.Close()
			<-done
			return nil, werr
		}
		go func() {
			fmt.Fprintf(inW, "%d\n", len(w))
			inW.Write(w)
			inW.Close()
		}()
		for {
			line, rerr := out.ReadSlice('\n')
			if rerr != nil {
				break
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "id "); ok {
				u, perr := parseIDs(v)
				if perr != nil {
					outR.Close()
					<-done
					return nil, fmt.Errorf("resolve users: %w", perr)
				}
				ids = append(ids, u)
			}
		}
	}
	io.Copy(io.Discard, io.LimitReader(out, 64<<10))
	outR.Close()
	inW.Close()
	<-done
	msg := strings.TrimSpace(stderr.String())
	switch {
	case err != nil:
		return nil, fmt.Errorf("put the warden into the pod: %w", s.explain(ctx, err))
	case code == 10 && len(first) == 2 && first[0] == "user":
		return nil, imageUser(first[1])
	case code == 11:
		return nil, fmt.Errorf("resolve user %q in the image: %s", users[min(len(ids), len(users)-1)], strings.TrimPrefix(msg, "warden: "))
	case code != 0:
		return nil, fmt.Errorf("put the warden into the pod: exit %d: %s", code, msg)
	case len(ids) != len(users):
		return nil, fmt.Errorf("resolve users %q: got %d answers", users, len(ids))
	}
	return ids, nil
}

// startIsolated puts the warden in, resolves the users and starts both
// shells at once.
func (s *Sandbox) startIsolated(ctx context.Context) error {
	var users []string
	if s.spec.User != "" {
		users = append(users, s.spec.User)
	}
	if s.spec.AgentUser != "" && s.spec.AgentUser != s.spec.User {
		users = append(users, s.spec.AgentUser)
	}
	ids, err := s.installWarden(ctx, users)
	if err != nil {
		return err
	}
	if s.spec.User != "" {
		s.user = &ids[0]
		ids = ids[1:]
	}
	if len(ids) > 0 {
		s.agentUser = &ids[0]
	}
	sized := s.spec.WithDefaults()
	s.tmpfsMiB, s.pidsMax = sized.MemoryMB, sized.PidsMax
	user := ""
	if s.user != nil {
		user = s.user.ids()
	}
	prefix := shell.PluginArgs(s.tmpfsMiB, s.private, pluginState, user)
	s.agent = &agentView{s: s}
	s.agent.view = view{s: s, shell: s.agent.current, closed: &s.agent.closed}
	var wg sync.WaitGroup
	var agentErr error
	wg.Go(func() { agentErr = s.agent.start(ctx) })
	sh, ns, err := s.open(ctx, controllerSpec{state: pluginState, prefix: prefix, home: s.user, header: true, kill: s.killGroup})
	s.sh, s.pluginNS = sh, ns
	wg.Wait()
	return errors.Join(err, agentErr)
}

// Agent returns the agent's view (the sandbox itself when it is not
// isolated).
func (s *Sandbox) Agent() sandbox.Sandbox {
	if s.agent == nil {
		return s
	}
	return s.agent
}

// Seal empties the private folders for verification, and stops the agent's
// processes when they leave the sandbox too few process slots
// (isolate.Seal). A pod the cluster stopped for going over its disk limit
// fails with ErrLimit.
func (s *Sandbox) Seal(ctx context.Context) (string, error) {
	if err := s.live(); err != nil {
		return "", err
	}
	user := ""
	if s.user != nil {
		user = s.user.ids()
	}
	// A pod's process limit is the node's (the kubelet's podPidsLimit),
	// on the pod's cgroup: the container's own says "max". isolate.Seal
	// holds the spec's.
	return isolate.Seal(ctx, sealer{s}, isolate.Sandbox{Agent: s.agent != nil, PidsMax: s.pidsMax,
		Private: s.private, TmpfsMiB: s.tmpfsMiB, User: user, PluginNS: s.pluginNS})
}

// sealer is what isolate.Seal needs of a pod: the plugin's shell counts
// processes, an exec of its own runs the warden as root.
type sealer struct{ s *Sandbox }

func (x sealer) Stat(ctx context.Context) (pids, max int64, err error) { return x.s.sh.Stat(ctx) }
func (x sealer) StopAgent(ctx context.Context) error                   { return x.s.agent.stop(ctx) }
func (x sealer) Warden(ctx context.Context, args ...string) error      { return x.s.warden(ctx, args...) }
func (x sealer) Explain(ctx context.Context, err error) error          { return x.s.explain(ctx, err) }

// warden runs the warden with args in an exec of its own, as the
// container's user (root), and nothing of the image: after the agent's
// turn, the image's programs may be the agent's.
func (s *Sandbox) warden(ctx context.Context, args ...string) error {
	var stderr tail
	err := s.b.stream(ctx, s.name, append([]string{shell.WardenPath}, args...), nil, nil, &stderr)
	var ee *exitError
	if errors.As(err, &ee) {
		return fmt.Errorf("warden %s: exit %d: %s", args[0], ee.code, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return s.explain(ctx, err)
	}
	return nil
}

// agentView is the agent's side of an isolated sandbox: its own shell in
// its own namespaces, started again when a command kills it.
type agentView struct {
	view
	s *Sandbox

	mu     sync.Mutex
	sh     *Controller
	nsInit int // the agent namespace's init, as the container numbers it
	closed atomic.Bool
}

func (a *agentView) current() *Controller {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sh
}

func (a *agentView) namespace() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nsInit
}

// start starts the agent's shell through the warden, as the agent's user.
func (a *agentView) start(ctx context.Context) error {
	user := a.user()
	ids := ""
	if user != nil {
		ids = user.ids()
	}
	prefix := shell.AgentArgs(a.s.private, ids)
	sh, ns, err := a.s.open(ctx, controllerSpec{state: stateDir, prefix: prefix, home: user, header: true, dropped: true,
		kill: func(ctx context.Context, pgid int) error {
			return a.s.warden(ctx, "kill", strconv.Itoa(a.namespace()), strconv.Itoa(pgid))
		}})
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.sh, a.nsInit = sh, ns
	a.mu.Unlock()
	return nil
}

// stop kills every process of the agent's namespace, through the plugin
// shell's builtin kill: it needs no new process.
func (a *agentView) stop(ctx context.Context) error {
	a.mu.Lock()
	sh, ns := a.sh, a.nsInit
	a.mu.Unlock()
	if sh != nil {
		sh.Close()
	}
	if ns > 1 {
		if err := a.s.sh.Signal(ctx, 9, ns); err != nil {
			return a.s.explain(ctx, err)
		}
	}
	return nil
}

// Exec runs cmd in the agent's shell (isolate.Exec): a shell that a
// command killed is started again, and the call reports exit 137. A pod
// the cluster stopped for going over its disk limit fails the call with
// ErrLimit.
func (a *agentView) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return isolate.Exec(ctx, agentSide{a}, cmd, o)
}

// agentSide is what isolate.Exec needs of the agent's view.
type agentSide struct{ a *agentView }

func (x agentSide) Shell() isolate.Shell                         { return x.a.current() }
func (x agentSide) Restart(ctx context.Context) error            { return x.a.start(ctx) }
func (x agentSide) Live() error                                  { return x.a.live() }
func (x agentSide) Closed() bool                                 { return x.a.s.closed.Load() }
func (x agentSide) Running(ctx context.Context) bool             { return x.a.s.running(ctx) }
func (x agentSide) Explain(ctx context.Context, err error) error { return x.a.s.explain(ctx, err) }

// Close ends the agent's shell; the sandbox lives on until its own Close.
func (a *agentView) Close(ctx context.Context) error {
	a.closed.Store(true)
	if sh := a.current(); sh != nil {
		sh.Close()
	}
	return nil
}
