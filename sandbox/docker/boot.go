package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/mux"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// A sandbox's shells run under the container's first process, on the one
// stream the engine attaches to it, so a start costs the engine a create,
// an attach and a start, and no exec (a runc exec costs about 40 ms here,
// two at once about 60 ms): in an isolated sandbox that process is the
// warden's mux (sandbox/mux), which carries both shells and the host's
// kill and remount requests; otherwise it is the shell controller itself.

// bootScript runs first in an isolated sandbox whose engine cannot bind the
// warden's folder (wardendir.go): it puts the warden (the first $1 bytes of
// stdin) into its folder, with the plugin shell's state folder, and hands
// the rest of stdin, and its other arguments, to the warden's mux.
const bootScript = `set -e
rm -rf ` + shell.WardenDir + `
mkdir -m 755 ` + shell.WardenDir + `
mkdir -m 700 ` + pluginState + `
head -c "$1" > ` + shell.WardenPath + `
chmod 755 ` + shell.WardenPath + `
shift
exec ` + shell.WardenPath + ` mux "$@"
`

// offlineShell runs before the shell controller of a sandbox without
// isolation whose network the engine left off (its first process is root
// then): what the warden's mux does with -no-network, in bash builtins.
const offlineShell = `{ read -r; read -r; while IFS=: read -r __if _; do
  __if=${__if//[[:space:]]/}
  [ "$__if" = lo ] || { echo "` + mux.NetworkNotOff + ` the interface $__if" >&2; exit 1; }
done; } < /proc/net/dev || exit 1
[ -L /etc/hosts ] && { echo "` + mux.NetworkNotOff + ` a link for /etc/hosts" >&2; exit 1; }
printf '%s' '` + mux.LoopbackHosts + `' > /etc/hosts || exit 1
`

// entrypoint is what the container runs first: the shell controller
// without isolation; with it, the warden's mux from its bound folder, or
// the boot script that receives a copy of the warden (sent, the length of
// send). offline: the engine left the container's network off (see
// Start), and the first process finishes it.
func (b *Backend) entrypoint(send []byte, offline bool) []string {
	warden := []string{shell.WardenPath, "mux"}
	if offline {
		warden = append(warden, "-no-network")
	}
	switch {
	case !b.isolate && offline:
		return bootstrap(stateDir, offlineShell)
	case !b.isolate:
		return bootstrap(stateDir)
	case send == nil:
		return warden
	}
	return append([]string{"bash", "-c", bootScript, "proctor-boot", strconv.Itoa(len(send))}, warden[2:]...)
}

// attachFirst asks the engine to keep the first process's standard
// streams for an attach: stdin open until the attached client leaves (so
// the sandbox's processes end with proctor, even when it is killed), and
// no log driver copying what the shells say.
func attachFirst(cfg *container.Config, hc *container.HostConfig) {
	cfg.OpenStdin, cfg.StdinOnce = true, true
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true
	hc.LogConfig = container.LogConfig{Type: "none"}
}

// boot attaches to the created container, starts it and brings up its
// shells: the plugin's and, in an isolated sandbox, the agent's. send is
// the warden for the boot script, nil when the container binds it.
func (s *Sandbox) boot(ctx context.Context, send []byte, env []string) error {
	hj, err := s.b.cli.ContainerAttach(ctx, s.id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fmt.Errorf("attach to container: %w", engineError(err))
	}
	s.conn = hj.Conn
	pr, pw := io.Pipe()
	s.stderr = &headBuffer{max: 4096}
	go func() {
		_, err := stdcopy.StdCopy(pw, s.stderr, hj.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	if err := s.b.cli.ContainerStart(ctx, s.id, container.StartOptions{}); err != nil {
		hj.Close()
		return fmt.Errorf("start container: %w", engineError(err))
	}
	if !s.b.isolate {
		sh, _, err := s.ready(ctx, shell.Transport{
			Stdin: writeCloser{&hj}, Stdout: pr, Kill: s.killGroup, Close: func() error { hj.Close(); return nil },
		}, stateDir, false, s.stderr.String)
		s.sh = sh
		return err
	}
	if _, err := hj.Conn.Write(send); err != nil {
		hj.Close()
		return fmt.Errorf("send the warden: %w", engineError(err))
	}
	s.mux = mux.NewClient(pr, hj.Conn, func() error { hj.Close(); return nil })
	if err := s.mux.Ready(ctx); err != nil {
		s.mux.Close()
		return fmt.Errorf("start the warden: %v %s: %w", err, strings.TrimSpace(s.stderr.String()), shell.ErrNoShell)
	}
	return s.startShells(ctx, env)
}

// startShells starts the plugin's shell and the agent's, both at once, on
// the mux.
func (s *Sandbox) startShells(ctx context.Context, env []string) error {
	plugin := append(shell.PluginArgs(s.tmpfsMiB, s.private, pluginState, s.user), bootstrap(pluginState)...)
	s.agent = &agentView{s: s, env: env}
	s.agent.view = view{s: s, shell: s.agent.current}
	var wg sync.WaitGroup
	var agentErr error
	wg.Go(func() { agentErr = s.agent.start(ctx) })
	sh, ns, err := s.openShell(ctx, plugin, pluginState, func(ctx context.Context, pgid int) error {
		return s.mux.Kill(ctx, 0, pgid)
	})
	s.sh, s.pluginNS = sh, ns
	wg.Wait()
	return errors.Join(err, agentErr)
}

// openShell starts a shell controller through the warden on a channel of
// the mux; kill kills a process group of it.
func (s *Sandbox) openShell(ctx context.Context, argv []string, state string, kill func(context.Context, int) error) (*shell.Shell, int, error) {
	ch, err := s.mux.Open(argv)
	if err != nil {
		return nil, 0, fmt.Errorf("start shell: %w", err)
	}
	return s.ready(ctx, shell.Transport{Stdin: ch, Stdout: ch, Kill: kill, Close: ch.Drop}, state, true, func() string {
		return ch.Stderr() + ch.Exit()
	})
}

// ready wraps a started controller and checks it answers. With header, it
// first reads the warden's line naming the namespace's init.
func (s *Sandbox) ready(ctx context.Context, t shell.Transport, state string, header bool, stderr func() string) (*shell.Shell, int, error) {
	out := bufio.NewReaderSize(t.Stdout, 64<<10)
	t.Stdout = out
	nsInit := 0
	if header {
		var err error
		if nsInit, err = shell.ReadNSHeader(out); err != nil {
			t.Close()
			return nil, 0, fmt.Errorf("start the agent's shell: %v %s", err, stderr())
		}
	}
	sh := shell.New(t, state)
	// The first round trip proves bash is there and the shell is ready.
	r, err := sh.Exec(ctx, "true", sandbox.ExecOptions{})
	if err != nil || r.ExitCode != 0 {
		sh.Close()
		detail := strings.TrimSpace(stderr())
		if detail == "" {
			detail = s.controllerErr(ctx, state)
		}
		return nil, 0, fmt.Errorf("start shell (the image needs bash): %v %s: %w", err, detail, shell.ErrNoShell)
	}
	return sh, nsInit, nil
}
