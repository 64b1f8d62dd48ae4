// Package docker runs sandboxes as Docker containers through the Engine API.
// It is the only package that imports the Docker client.
//
// Containers start closed: network "none", no privileges, no-new-privileges,
// all capabilities dropped but the few a task needs to run apt-get and
// services as root, and pids, memory and CPU limits. Commands run in
// persistent shells (package shell) on the stream the engine attaches to
// the container's first process (boot.go), so a start costs no exec and a
// call costs a write and a read instead of an exec round trip.
package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	dnetwork "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/isolate"
	"github.com/proctor-dev/proctor/sandbox/mux"
	"github.com/proctor-dev/proctor/sandbox/seccomp"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Backend starts containers. It is safe for concurrent use.
type Backend struct {
	cli     *client.Client
	log     *slog.Logger
	isolate bool

	mu     sync.Mutex
	builds map[string]*buildJob // single flight per build-context hash

	armorOnce sync.Once
	armor     bool
	quota     atomic.Int32 // storage-opt support: quotaUnknown, quotaYes, quotaNo
	wardens   wardenDirs

	// networked: a container with its network off did not work out on
	// this engine (offlineRefused), so sandboxes on "none" get the
	// engine's network "none" instead (see Start).
	networked atomic.Bool
	// archiveOnly: the warden cannot do the host's root file operations
	// on this machine (archiveFallback), so small uploads and reads go
	// through the engine's archive API, as large ones do.
	archiveOnly atomic.Bool
	// binds are folders of this machine bound read-only into every
	// container (WithReadOnlyDir); bindsOff: the engine refused them.
	binds    []mount.Mount
	bindsOff atomic.Bool
	// fakeOffline changes the containers made with their network off, to
	// play an engine that does not run them as proctor needs (tests only).
	fakeOffline func(*container.Config, *container.HostConfig)
}

var _ sandbox.Backend = (*Backend)(nil)

// Option tunes a Backend.
type Option func(*Backend)

// WithIsolation turns the separation of the agent from the plugin (the
// warden's namespaces, see sandbox.Isolated) on, the default, or off. Off,
// containers get no CAP_SYS_ADMIN and one shell serves agent and plugin
// alike, as on engines that refuse the capability; specs with private
// folders are then refused.
func WithIsolation(on bool) Option { return func(b *Backend) { b.isolate = on } }

// WithReadOnlyDir binds the folder source of this machine read-only into
// every container at target: tools an agent brings into sandboxes whose
// image lacks them (Terminus-2's static tmux), at no cost per start. Where
// the engine does not run on this machine, or refuses the bind,
// containers go without it; the agent then writes what it needs into the
// sandbox itself.
func WithReadOnlyDir(source, target string) Option {
	return func(b *Backend) {
		b.binds = append(b.binds, mount.Mount{Type: mount.TypeBind, Source: source, Target: target, ReadOnly: true})
	}
}

// New connects to the engine named by the environment (DOCKER_HOST, ...),
// negotiating the API version. It does not contact the engine yet.
func New(opts ...Option) (*Backend, error) {
	cli, err := newClient()
	if err != nil {
		return nil, err
	}
	b := &Backend{cli: cli, log: slog.Default(), builds: map[string]*buildJob{}, isolate: true}
	b.wardens.off = !localEngine(cli.DaemonHost())
	for _, o := range opts {
		o(b)
	}
	b.bindsOff.Store(b.wardens.off)
	return b, nil
}

// Isolated reports whether the backend keeps agents apart from plugins.
func (b *Backend) Isolated() bool { return b.isolate }

// Abilities: containers run an image; they keep the agent apart unless
// isolation is off (WithIsolation); the default network is the engine's
// bridge, which an engine may lack.
func (b *Backend) Abilities(ctx context.Context) sandbox.Abilities {
	return sandbox.Abilities{Isolated: b.isolate, Images: true, NoDefaultNetwork: b.NoDefaultNetwork(ctx)}
}

// apparmor reports whether the engine confines containers with AppArmor.
func (b *Backend) apparmor(ctx context.Context) bool {
	b.armorOnce.Do(func() {
		info, err := b.cli.Info(ctx)
		if err != nil {
			return
		}
		for _, o := range info.SecurityOptions {
			if strings.Contains(o, "name=apparmor") {
				b.armor = true
			}
		}
	})
	return b.armor
}

func newClient() (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w: %w", sandbox.ErrEngine, err)
	}
	return cli, nil
}

// Close releases the client.
func (b *Backend) Close() error { return b.cli.Close() }

// Info describes the engine.
type Info struct {
	ServerVersion string
	APIVersion    string
	RootDir       string
}

// engineError turns a connection failure into ErrEngine with a hint.
func engineError(err error) error {
	if err == nil {
		return nil
	}
	if client.IsErrConnectionFailed(err) || strings.Contains(err.Error(), "Cannot connect to the Docker daemon") {
		return fmt.Errorf("%w: %v (start it with `make engine` or scripts/engine.sh, or set DOCKER_HOST)", sandbox.ErrEngine, err)
	}
	return err
}

// Ping checks that the engine answers and reports its versions.
func (b *Backend) Ping(ctx context.Context) (Info, error) {
	if _, err := b.cli.Ping(ctx); err != nil {
		return Info{}, engineError(err)
	}
	v, err := b.cli.ServerVersion(ctx)
	if err != nil {
		return Info{}, engineError(err)
	}
	info := Info{ServerVersion: v.Version, APIVersion: b.cli.ClientVersion()}
	if si, err := b.cli.Info(ctx); err == nil {
		info.RootDir = si.DockerRootDir
	}
	return info, nil
}

// NoDefaultNetwork says why the engine's default network
// (sandbox.NetworkDefault) would leave a container with nothing but its
// loopback, or "" when it has one: an engine started with --bridge=none
// has no "bridge" network.
func (b *Backend) NoDefaultNetwork(ctx context.Context) string {
	if _, err := b.cli.NetworkInspect(ctx, "bridge", dnetwork.InspectOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return "the Docker engine has no bridge network (dockerd --bridge=none)"
		}
		return "the Docker engine's bridge network: " + engineError(err).Error()
	}
	return ""
}

// Ping connects with the environment's settings and pings the engine.
func Ping(ctx context.Context) (Info, error) {
	b, err := New()
	if err != nil {
		return Info{}, err
	}
	defer b.Close()
	return b.Ping(ctx)
}

// ImagePresent reports whether ref exists in the local image store.
func ImagePresent(ctx context.Context, ref string) (bool, error) {
	b, err := New()
	if err != nil {
		return false, err
	}
	defer b.Close()
	return b.imagePresent(ctx, ref)
}

func (b *Backend) imagePresent(ctx context.Context, ref string) (bool, error) {
	_, err := b.cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if client.IsErrNotFound(err) {
		return false, nil
	}
	return false, engineError(err)
}

// Sandbox is one running container with its shells. It is the plugin's
// view: its commands run in the plugin's shell, which in an isolated
// sandbox lives in a mount namespace where the spec's Private folders are
// the plugin's own. Agent gives the agent's view.
type Sandbox struct {
	view
	b       *Backend
	id      string
	workdir string
	user    string       // the user commands run as (the spec's, or the image's)
	image   string       // the image's id (sha256:...), what actually ran
	ref     string       // the image reference it was started from (a local build's tag)
	owner   string       // "uid:gid" owning files copied in, when the engine cannot tell
	sh      *shell.Shell // the plugin's shell
	conn    io.Closer    // the stream attached to the container's first process
	stderr  *headBuffer  // the head of that process's stderr
	mux     *mux.Client  // the warden's mux on that stream, in an isolated sandbox
	// bound: the warden's folder is bound into a sandbox without
	// isolation whose shell runs as root, for its small uploads.
	bound bool

	// Isolation: private folders, their tmpfs size, the agent's view.
	private  []string
	tmpfsMiB int64
	pidsMax  int64 // the spec's process limit, which Seal holds
	pluginNS int   // the plugin warden's pid: it holds the plugin's mount namespace
	agent    *agentView
	disk     *diskWatch // nil when the engine enforces the disk limit

	// The agent's user and the owner of the files it copies in, when they
	// are not the plugin's.
	agentUser, agentOwner string

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var (
	_ sandbox.Sandbox  = (*Sandbox)(nil)
	_ sandbox.Isolated = (*Sandbox)(nil)
	_ sandbox.Imaged   = (*Sandbox)(nil)
)

// ImageDigest is the id (sha256:...) of the image the container runs, so a
// run records exactly what it ran on.
func (s *Sandbox) ImageDigest() string { return s.image }

// ImageRef is the reference of the image the container runs: the spec's
// image, or the tag of the local build when the image was built from the
// spec's context.
func (s *Sandbox) ImageRef() string { return s.ref }

// ID is the container's id.
func (s *Sandbox) ID() string { return s.id }

// pluginState is the plugin shell's folder in an isolated sandbox: under
// the sealed warden folder, and a private tmpfs of its own.
const pluginState = shell.WardenDir + "/plugin"

// Start resolves the image (local, pulled or built), creates and starts the
// container, and attaches its shells.
func (b *Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	network, err := spec.NetworkMode()
	if err != nil {
		return nil, err
	}
	private, err := shell.PrivateDirs(spec.Private)
	if err != nil {
		return nil, err
	}
	if spec.AgentUser != "" && spec.AgentUser != spec.User && !b.isolate {
		return nil, fmt.Errorf("the agent's user %q is not the verifier's %q: only an isolated sandbox runs them apart ([sandbox] isolation = true)", spec.AgentUser, spec.User)
	}
	if len(private) > 0 && !b.isolate {
		return nil, fmt.Errorf("the spec has private folders %v, but this docker backend runs without isolation; turn isolation on ([sandbox] isolation = true)", private)
	}
	image, ii, err := b.image(ctx, spec)
	if err != nil {
		return nil, err
	}
	// An isolated sandbox needs the warden; one without isolation binds it
	// where it can (placeWarden).
	warden, werr := shell.Warden(ii.Architecture)
	if b.isolate && werr != nil {
		return nil, werr
	}
	facts, err := b.facts(ctx)
	if err != nil {
		return nil, err
	}
	imageUser := ""
	if ii.Config != nil {
		imageUser = ii.Config.User
	}
	for {
		p := containerPlan(spec, network, image, imageUser, facts)
		s, err := b.run(ctx, spec, p, ii.ID, private, warden, werr)
		if err != nil && p.offline && offlineRefused(err) {
			// Once: from now on the plan has the engine's "none".
			b.networkOn(err)
			facts.networked = true
			continue
		}
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// image resolves the spec's image (local, pulled or built, with its layer
// on top) to a reference and what the engine says of it.
func (b *Backend) image(ctx context.Context, spec sandbox.Spec) (string, *image.InspectResponse, error) {
	ref, found, err := b.ensureImage(ctx, spec)
	if err != nil {
		return "", nil, err
	}
	if found == nil {
		ii, err := b.cli.ImageInspect(ctx, ref)
		if err != nil {
			return "", nil, fmt.Errorf("inspect image %s: %w", ref, engineError(err))
		}
		found = &ii
	}
	if spec.Layer != nil {
		return b.layered(ctx, found, spec.Layer)
	}
	return ref, found, nil
}

// facts are what the backend knows of the engine now.
func (b *Backend) facts(ctx context.Context) (engineFacts, error) {
	e := engineFacts{isolate: b.isolate, networked: b.networked.Load(), quota: b.quota.Load() != quotaNo}
	if !b.isolate {
		return e, nil
	}
	profile, err := seccomp.Docker()
	if err != nil {
		return e, fmt.Errorf("seccomp profile: %w", err)
	}
	e.seccomp, e.apparmor = profile, b.apparmor(ctx)
	return e, nil
}

// run creates the container of p, starts it and attaches its shells.
// imageID is the image the plan's reference names.
func (b *Backend) run(ctx context.Context, spec sandbox.Spec, p plan, imageID string, private []string, warden []byte, werr error) (*Sandbox, error) {
	if p.offline && b.fakeOffline != nil {
		b.fakeOffline(p.cfg, p.hc)
	}
	id, send, bound, err := b.create(ctx, p, warden, werr)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{b: b, id: id, workdir: spec.Workdir, user: p.user, agentUser: spec.AgentUser, image: imageID, ref: p.cfg.Image, private: private,
		tmpfsMiB: p.hc.Memory >> 20, pidsMax: *p.hc.PidsLimit, bound: bound}
	s.view = view{s: s, shell: func() *shell.Shell { return s.sh }, plugin: true}
	if err := s.boot(ctx, send, p.cfg.Env); err != nil {
		s.remove(ctx)
		return nil, fmt.Errorf("container from %s: %w", p.cfg.Image, err)
	}
	// The engine's quota holds bytes only: the watchdog holds the inodes
	// always, and the bytes where there is no quota.
	sized := spec.WithDefaults()
	s.watchDisk(sized.DiskMB, sized.DiskInodes, p.hc.StorageOpt == nil)
	if s.workdir == "" {
		if r, err := s.sh.Exec(ctx, "pwd", sandbox.ExecOptions{}); err == nil {
			s.workdir = strings.TrimSpace(r.Stdout)
		}
	}
	if b.isolate {
		if err := s.resolveUsers(ctx); err != nil {
			s.remove(ctx)
			return nil, err
		}
	}
	return s, nil
}

// create makes the container of p, with the warden's folder and the
// backend's binds placed. What the engine refuses (the binds, the disk
// quota) it learns once: the container is made without it, now and
// from then on. send is the warden's bytes for the boot script, where the
// container does not bind its folder.
func (b *Backend) create(ctx context.Context, p plan, warden []byte, werr error) (id string, send []byte, bound bool, err error) {
	cfg, hc := p.cfg, p.hc
	send, bound, err = b.placeWarden(hc, p.user, warden, werr)
	if err != nil {
		return "", nil, false, err
	}
	cfg.Entrypoint = b.entrypoint(send, p.offline)
	wardenMounts := len(hc.Mounts)
	if !b.bindsOff.Load() {
		hc.Mounts = append(hc.Mounts, b.binds...)
	}
	created, err := b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if bindRefused(err) && len(hc.Mounts) > wardenMounts {
		b.log.Debug("the engine cannot bind the folders given to the backend: containers go without them", "err", err)
		b.bindsOff.Store(true)
		hc.Mounts = hc.Mounts[:wardenMounts]
		created, err = b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	}
	if bindRefused(err) && len(hc.Mounts) > 0 {
		b.log.Debug("the engine cannot bind the warden's folder: sending it to each isolated container, and leaving it out of the others", "err", err)
		b.wardens.disable()
		hc.Mounts, bound = nil, false
		if b.isolate {
			send = warden
		}
		cfg.Entrypoint = b.entrypoint(send, p.offline)
		created, err = b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	}
	if quotaRefused(err) {
		b.quota.Store(quotaNo)
		hc.StorageOpt = nil
		created, err = b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	} else if err == nil && hc.StorageOpt != nil {
		b.quota.Store(quotaYes)
	}
	if err != nil && p.offline && offlineRefused(err) {
		return "", nil, false, err // Start plans again with the engine's "none"
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("create container from %s: %w", cfg.Image, engineError(err))
	}
	return created.ID, send, bound, nil
}

// resolveUsers turns the users into numbers, resolved before the agent
// can change the image's passwd: later shells (a restart, the remount)
// and the files the engine copies in use them.
func (s *Sandbox) resolveUsers(ctx context.Context) error {
	for _, u := range []struct{ user, owner *string }{{&s.user, &s.owner}, {&s.agentUser, &s.agentOwner}} {
		if *u.user == "" {
			continue
		}
		r, err := s.sh.Exec(ctx, shell.WardenCommand("id", *u.user), sandbox.ExecOptions{Fresh: true})
		ids := strings.TrimSpace(r.Stdout)
		if err != nil || r.ExitCode != 0 || strings.Count(ids, ":") != 2 {
			return fmt.Errorf("resolve user %q in the image: %v %s", *u.user, err, strings.TrimSpace(r.Stderr))
		}
		*u.user = ids
		uid, gid, _ := strings.Cut(ids, ":")
		gid, _, _ = strings.Cut(gid, ":")
		*u.owner = uid + ":" + gid
	}
	return nil
}

// placeWarden binds the warden's folder into the container (hc), checked
// first (wardenDirs.mount). An isolated sandbox whose engine cannot bind
// it gets the warden's bytes to send (the boot script receives them).
// Without isolation the warden only extracts small uploads and reads
// files, run by the root shell as root:root (view.rootWarden), and is
// bound only there (bound); where it cannot be, the archive API does.
func (b *Backend) placeWarden(hc *container.HostConfig, user string, warden []byte, werr error) (send []byte, bound bool, err error) {
	if !b.isolate && (!rootUser(user) || !rootGroup(user) || werr != nil) {
		return nil, false, nil
	}
	m, ok, err := b.wardens.mount(warden)
	switch {
	case err != nil:
		return nil, false, err
	case ok:
		hc.Mounts = append(hc.Mounts, m)
		return nil, !b.isolate, nil
	case b.isolate:
		return warden, false, nil
	}
	return nil, false, nil
}

// ListInterfaces is a command that prints a sandbox's network interfaces,
// comma-separated: "lo" where it has no network.
const ListInterfaces = `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | paste -sd,`

// OfflineNetwork says how isolated sandboxes on network "none" get it: the
// engine's network off, the rest done by the warden (the cheaper start),
// or the engine's own "none" where that did not work out on this engine.
func (b *Backend) OfflineNetwork() string {
	if b.networked.Load() {
		return `the engine's network "none"`
	}
	return "the engine's network off; the warden checks it and writes /etc/hosts"
}

// offlineRefused reports whether err is a container with its network off
// that did not work out: the engine refused the IPv6 sysctl, or runc could
// not write it (a kernel without IPv6), or the engine gave the container a
// network anyway (the warden's check).
func offlineRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, mux.NetworkNotOff) || strings.Contains(msg, "sysctl") || strings.Contains(msg, "disable_ipv6")
}

// networkOn gives sandboxes on "none" the engine's own network "none"
// from now on, where a disabled network did not work out (err),
// and says so once.
func (b *Backend) networkOn(err error) {
	if !b.networked.Swap(true) {
		b.log.Warn("the engine does not run a container with its network off as proctor needs: sandboxes get the engine's network \"none\" instead", "err", err)
	}
}

// agentUserOr is the user the agent's commands run as.
func (s *Sandbox) agentUserOr() (user, owner string) {
	if s.agentUser != "" {
		return s.agentUser, s.agentOwner
	}
	return s.user, s.owner
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// stateDir is where the shell controller keeps its files when the sandbox
// is not isolated, and the agent's shell when it is.
const stateDir = "/tmp/.proctor-shell"

// bootstrap starts the shell controller in state, after the scripts
// before, if any.
func bootstrap(state string, before ...string) []string {
	return []string{"bash", "-c", strings.Join(before, "") + shell.Bootstrap(), "proctor-shell", state}
}

// controllerErr reads the controller's own error log, for a shell that
// would not start.
func (s *Sandbox) controllerErr(ctx context.Context, state string) string {
	rc, _, err := s.b.cli.CopyFromContainer(ctx, s.id, state+"/controller.err")
	if err != nil {
		return ""
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(tr, 4096))
	return string(b)
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.String()
}

// writeCloser is the shell's stdin: writes go to the hijacked connection,
// Close half-closes it so the controller sees end of input.
type writeCloser struct{ hj *types.HijackedResponse }

func (w writeCloser) Write(p []byte) (int, error) { return w.hj.Conn.Write(p) }
func (w writeCloser) Close() error                { return w.hj.CloseWrite() }

// killGroup kills a process group of a sandbox without isolation from a
// separate exec, for when a call's context ends while the shell's command
// still runs; an isolated sandbox asks its mux. It runs as the shell's own
// user: in a container whose user is not root, an exec as root has no
// capabilities, so no CAP_KILL either.
func (s *Sandbox) killGroup(ctx context.Context, pgid int) error {
	return s.detachedExec(ctx, s.user, "kill", "-KILL", "--", fmt.Sprintf("-%d", pgid))
}

func (s *Sandbox) detachedExec(ctx context.Context, user string, argv ...string) error {
	ex, err := s.b.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{User: user, Cmd: argv})
	if err != nil {
		return err
	}
	return s.b.cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{Detach: true})
}

func (s *Sandbox) live() error {
	if s.closed.Load() {
		return sandbox.ErrClosed
	}
	return nil
}

// gone explains a shell that died: the container's state, when the engine
// can still say.
func (s *Sandbox) gone(ctx context.Context, err error) error {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if st, ierr := s.b.cli.ContainerInspect(ictx, s.id); ierr == nil && st.State != nil {
		return fmt.Errorf("container %.12s %s (exit %d, oom killed %v): %w", s.id, st.State.Status, st.State.ExitCode, st.State.OOMKilled, err)
	} else if ierr != nil {
		return fmt.Errorf("container %.12s: %v: %w", s.id, engineError(ierr), err)
	}
	return err
}

// running reports whether the container still runs.
func (s *Sandbox) running(ctx context.Context) bool {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	st, err := s.b.cli.ContainerInspect(ictx, s.id)
	return err == nil && st.State != nil && st.State.Running
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
// (isolate.Seal). A sandbox over its disk limit fails with ErrLimit.
func (s *Sandbox) Seal(ctx context.Context) (string, error) {
	if err := s.live(); err != nil {
		return "", err
	}
	if err := s.disk.exceeded(); err != nil {
		return "", err
	}
	return isolate.Seal(ctx, sealer{s}, isolate.Sandbox{Agent: s.agent != nil, PidsMax: s.pidsMax,
		Private: s.private, TmpfsMiB: s.tmpfsMiB, User: s.user, PluginNS: s.pluginNS})
}

// sealer is what isolate.Seal needs of a container: the plugin's shell
// counts processes, the warden's mux runs the warden as root.
type sealer struct{ s *Sandbox }

func (x sealer) Stat(ctx context.Context) (pids, max int64, err error) { return x.s.sh.Stat(ctx) }
func (x sealer) StopAgent(ctx context.Context) error                   { return x.s.agent.stop(ctx) }
func (x sealer) Warden(ctx context.Context, args ...string) error {
	return x.s.wardenExec(ctx, args...)
}
func (x sealer) Explain(ctx context.Context, err error) error { return x.s.gone(ctx, err) }

// rootUser reports whether a user spec runs as root.
func rootUser(u string) bool {
	name, _, _ := strings.Cut(u, ":")
	return name == "" || name == "0" || name == "root"
}

// rootGroup reports whether a user runs with group 0: no group given (root's
// own), or group 0 or root.
func rootGroup(u string) bool {
	_, group, ok := strings.Cut(u, ":")
	return !ok || group == "0" || group == "root"
}

// agentView is the agent's side of an isolated sandbox: its own shell in
// its own namespaces, started again when a command kills it.
type agentView struct {
	view
	s   *Sandbox
	env []string

	mu     sync.Mutex
	sh     *shell.Shell
	nsInit int // the agent namespace's init, as the container numbers it
}

func (a *agentView) current() *shell.Shell {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sh
}

func (a *agentView) start(ctx context.Context) error {
	user, _ := a.s.agentUserOr()
	argv := append(shell.AgentArgs(a.s.private, user), bootstrap(stateDir)...)
	sh, nsInit, err := a.s.openShell(ctx, argv, stateDir, func(ctx context.Context, pgid int) error {
		return a.s.mux.Kill(ctx, a.namespace(), pgid)
	})
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.sh, a.nsInit = sh, nsInit
	a.mu.Unlock()
	return nil
}

func (a *agentView) namespace() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nsInit
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
			return a.s.gone(ctx, err)
		}
	}
	return nil
}

// Exec runs cmd in the agent's shell (isolate.Exec): a shell that a
// command killed is started again, and the call reports exit 137. Once
// the sandbox is over its disk limit, the call fails with ErrLimit.
func (a *agentView) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return isolate.Exec(ctx, agentSide{a}, cmd, o)
}

// agentSide is what isolate.Exec needs of the agent's view.
type agentSide struct{ a *agentView }

func (x agentSide) Shell() isolate.Shell                         { return x.a.current() }
func (x agentSide) Restart(ctx context.Context) error            { return x.a.start(ctx) }
func (x agentSide) Closed() bool                                 { return x.a.s.closed.Load() }
func (x agentSide) Running(ctx context.Context) bool             { return x.a.s.running(ctx) }
func (x agentSide) Explain(ctx context.Context, err error) error { return x.a.s.gone(ctx, err) }

func (x agentSide) Live() error {
	if err := x.a.s.live(); err != nil {
		return err
	}
	return x.a.s.disk.exceeded()
}

// Close ends the agent's shell; the sandbox lives on until its own Close.
func (a *agentView) Close(ctx context.Context) error {
	if sh := a.current(); sh != nil {
		sh.Close()
	}
	return nil
}

// Close removes the container, also after Ctrl-C: it uses its own short
// timeout, not ctx's cancellation.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.disk != nil {
			close(s.disk.stop)
		}
		if s.agent != nil {
			s.agent.Close(ctx)
		}
		if s.sh != nil {
			s.sh.Close()
		}
		s.closeErr = s.remove(ctx)
	})
	return s.closeErr
}

func (s *Sandbox) remove(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	defer func() {
		if s.mux != nil {
			s.mux.Close()
		}
		if s.conn != nil {
			s.conn.Close()
		}
	}()
	if err := s.b.removeContainer(ctx, s.id); err != nil {
		return fmt.Errorf("remove container %.12s: %w", s.id, engineError(err))
	}
	return nil
}

// removeContainer force-removes a container. One already gone is fine; one
// whose removal another request started (a run's Close still in flight when
// its process exited, then `sandbox prune`) is waited for, so the caller
// learns whether it is gone rather than a conflict.
func (b *Backend) removeContainer(ctx context.Context, id string) error {
	err := b.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || client.IsErrNotFound(err) {
		return nil
	}
	if !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "already in progress") {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, ierr := b.cli.ContainerInspect(ctx, id); client.IsErrNotFound(ierr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (still being removed: %w)", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Prune removes the containers proctor made: all of them, or those of one
// run when runID is set. It returns how many it removed.
func (b *Backend) Prune(ctx context.Context, runID string) (int, error) {
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"))
	if runID != "" {
		f.Add("label", sandbox.LabelRun+"="+runID)
	}
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", engineError(err))
	}
	n := 0
	var errs []error
	for _, c := range list {
		if err := b.removeContainer(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove %.12s: %w", c.ID, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
