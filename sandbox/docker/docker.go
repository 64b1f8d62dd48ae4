// Package docker runs sandboxes as Docker containers through the Engine API.
// It is the only package that imports the Docker client.
//
// Containers start closed: network "none", no privileges, no-new-privileges,
// all capabilities dropped but the few a task needs to run apt-get and
// services as root, and pids, memory and CPU limits. Commands run in one
// persistent shell per container (package shell) over a single attached
// exec, so a call costs a write and a read instead of an exec round trip.
package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/archive"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// stateDir is where the shell controller keeps its files in the container.
const stateDir = "/tmp/.proctor-shell"

// capabilities kept after dropping all. Tasks run apt-get, create users and
// start services as root, so root must still own and chown files
// (CHOWN, DAC_OVERRIDE, FOWNER, FSETID), switch users (SETUID, SETGID,
// SETPCAP for dropping capabilities when it does), signal its own processes
// (KILL, also how timeouts kill a command's group), bind low ports for
// services (NET_BIND_SERVICE), chroot for package scripts (SYS_CHROOT) and
// create device-less special files such as fifos (MKNOD). Left out of
// Docker's default set: NET_RAW (raw sockets; no network anyway) and
// AUDIT_WRITE.
var capabilities = []string{
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "MKNOD",
}

// Backend starts containers. It is safe for concurrent use.
type Backend struct {
	cli *client.Client
	log *slog.Logger

	mu     sync.Mutex
	builds map[string]*buildJob // single flight per build-context hash
}

var _ sandbox.Backend = (*Backend)(nil)

// New connects to the engine named by the environment (DOCKER_HOST, ...),
// negotiating the API version. It does not contact the engine yet.
func New() (*Backend, error) {
	cli, err := newClient()
	if err != nil {
		return nil, err
	}
	return &Backend{cli: cli, log: slog.Default(), builds: map[string]*buildJob{}}, nil
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

// Sandbox is one running container and its persistent shell.
type Sandbox struct {
	b       *Backend
	id      string
	workdir string
	user    string // spec.User
	image   string // the image's id (sha256:...), what actually ran
	sh      *shell.Shell
	hijack  interface{ Close() error }

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// ImageDigest is the id (sha256:...) of the image the container runs, so a
// run records exactly what it ran on.
func (s *Sandbox) ImageDigest() string { return s.image }

// ID is the container's id.
func (s *Sandbox) ID() string { return s.id }

// Start resolves the image (local, pulled or built), creates and starts the
// container, and attaches its shell.
func (b *Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	image, err := b.ensureImage(ctx, spec)
	if err != nil {
		return nil, err
	}
	network := spec.Network
	if network == "" {
		network = sandbox.NetworkNone
	}
	if network != sandbox.NetworkNone && network != sandbox.NetworkHost {
		return nil, fmt.Errorf("sandbox network %q: want %q or %q", network, sandbox.NetworkNone, sandbox.NetworkHost)
	}
	cpus := spec.CPUs
	if cpus <= 0 {
		cpus = sandbox.DefaultCPUs
	}
	mem := spec.MemoryMB
	if mem <= 0 {
		mem = sandbox.DefaultMemoryMB
	}
	pids := spec.PidsMax
	if pids <= 0 {
		pids = sandbox.DefaultPidsMax
	}
	labels := map[string]string{sandbox.LabelManaged: "true"}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	env := envList(spec.Env)
	init := true
	cfg := &container.Config{
		Image:      image,
		Entrypoint: []string{"sleep"},
		Cmd:        []string{"infinity"},
		WorkingDir: spec.Workdir,
		Env:        env,
		User:       spec.User,
		Labels:     labels,
	}
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(network),
		Init:        &init,
		Privileged:  false,
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
		CapAdd:      capabilities,
		Resources: container.Resources{
			NanoCPUs:   int64(cpus * 1e9),
			Memory:     mem << 20,
			MemorySwap: mem << 20,
			PidsLimit:  &pids,
		},
	}
	created, err := b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return nil, fmt.Errorf("create container from %s: %w", image, engineError(err))
	}
	s := &Sandbox{b: b, id: created.ID, workdir: spec.Workdir, user: spec.User}
	if ii, err := b.cli.ImageInspect(ctx, image); err == nil {
		s.image = ii.ID
	}
	if err := b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		s.remove(ctx)
		return nil, fmt.Errorf("start container from %s: %w", image, engineError(err))
	}
	if err := s.attachShell(ctx, spec.User, env); err != nil {
		s.remove(ctx)
		return nil, err
	}
	if s.workdir == "" {
		if r, err := s.sh.Exec(ctx, "pwd", sandbox.ExecOptions{}); err == nil {
			s.workdir = strings.TrimSpace(r.Stdout)
		}
	}
	return s, nil
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

func (s *Sandbox) attachShell(ctx context.Context, user string, env []string) error {
	ex, err := s.b.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User:         user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		WorkingDir:   s.workdir,
		Cmd:          []string{"bash", "-c", shell.Bootstrap(), "proctor-shell", stateDir},
	})
	if err != nil {
		return fmt.Errorf("start shell: %w", engineError(err))
	}
	hj, err := s.b.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("attach shell: %w", engineError(err))
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, hj.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	s.hijack = hj.Conn
	s.sh = shell.New(shell.Transport{
		Stdin:  writeCloser{&hj},
		Stdout: pr,
		Kill:   s.killGroup,
		Close:  func() error { hj.Close(); return nil },
	}, stateDir)
	// The first round trip proves bash is there and the shell is ready.
	r, err := s.sh.Exec(ctx, "true", sandbox.ExecOptions{})
	if err != nil || r.ExitCode != 0 {
		out := ""
		if rc, _, cerr := s.b.cli.CopyFromContainer(ctx, s.id, stateDir+"/controller.err"); cerr == nil {
			b, _ := io.ReadAll(io.LimitReader(rc, 4096))
			rc.Close()
			out = string(b)
		}
		return fmt.Errorf("start shell (the image needs bash): %v %s: %w", err, out, shell.ErrNoShell)
	}
	return nil
}

// writeCloser is the shell's stdin: writes go to the hijacked connection,
// Close half-closes it so the controller sees end of input.
type writeCloser struct{ hj *types.HijackedResponse }

func (w writeCloser) Write(p []byte) (int, error) { return w.hj.Conn.Write(p) }
func (w writeCloser) Close() error                { return w.hj.CloseWrite() }

// killGroup kills a process group from a separate exec, for when a call's
// context ends while the shell's command still runs.
func (s *Sandbox) killGroup(ctx context.Context, pgid int) error {
	// As the shell's own user: in a container whose user is not root, an
	// exec as root has no capabilities, so no CAP_KILL either.
	ex, err := s.b.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User: s.user,
		Cmd:  []string{"kill", "-KILL", "--", fmt.Sprintf("-%d", pgid)},
	})
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

// Exec runs cmd in the persistent shell. If the shell died, the container
// is inspected so the error says why (killed, OOM, engine restarted).
func (s *Sandbox) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if err := s.live(); err != nil {
		return sandbox.ExecResult{}, err
	}
	r, err := s.sh.Exec(ctx, cmd, o)
	if err != nil && errors.Is(err, sandbox.ErrGone) && !s.closed.Load() {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if st, ierr := s.b.cli.ContainerInspect(ictx, s.id); ierr == nil && st.State != nil {
			err = fmt.Errorf("container %.12s %s (exit %d, oom killed %v): %w", s.id, st.State.Status, st.State.ExitCode, st.State.OOMKilled, err)
		} else if ierr != nil {
			err = fmt.Errorf("container %.12s: %v: %w", s.id, engineError(ierr), err)
		}
	}
	return r, err
}

func (s *Sandbox) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(s.workdir, p)
}

// mkdir makes a folder (CopyToContainer needs it). The shell's round trip
// is cheap; when it cannot (a command broke PATH, or the spec's user may not
// write there) a separate exec as root does it.
func (s *Sandbox) mkdir(ctx context.Context, dir string) error {
	r, err := s.sh.Exec(ctx, "/bin/mkdir -p -- "+shell.Quote(dir)+" 2>/dev/null || mkdir -p -- "+shell.Quote(dir), sandbox.ExecOptions{Fresh: true})
	if err != nil {
		return err
	}
	if r.ExitCode == 0 {
		return nil
	}
	if err := s.rootExec(ctx, "mkdir", "-p", "--", dir); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	return nil
}

// rootExec runs argv as root in a separate exec (about 50 ms), for work
// that must not depend on the shell's user or state.
func (s *Sandbox) rootExec(ctx context.Context, argv ...string) error {
	ex, err := s.b.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User:         "0",
		Cmd:          argv,
		AttachStderr: true,
	})
	if err != nil {
		return engineError(err)
	}
	hj, err := s.b.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return engineError(err)
	}
	var stderr bytes.Buffer
	_, _ = stdcopy.StdCopy(io.Discard, &stderr, io.LimitReader(hj.Reader, 64<<10))
	hj.Close()
	st, err := s.b.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return engineError(err)
	}
	if st.ExitCode != 0 {
		return fmt.Errorf("%s: exit %d: %s", argv[0], st.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// copyTo extracts a tar archive into dir, owned by the sandbox's user. The
// engine resolves a user name in the container's passwd but not a numeric
// "uid[:gid]"; for those the archive's headers are rewritten to the ids
// (a chown as root cannot do it: an exec in a container whose user is not
// root gets no capabilities).
func (s *Sandbox) copyTo(ctx context.Context, dir string, data []byte) error {
	uid, gid, numeric := numericUser(s.user)
	if numeric {
		var err error
		if data, err = archive.Chown(data, uid, gid); err != nil {
			return err
		}
	}
	err := s.b.cli.CopyToContainer(ctx, s.id, dir, bytes.NewReader(data), container.CopyToContainerOptions{CopyUIDGID: !numeric})
	return engineError(err)
}

// numericUser parses "uid" or "uid:gid" (gid 0 when missing, as the
// engine runs it).
func numericUser(u string) (uid, gid int, ok bool) {
	us, gs, hasGid := strings.Cut(u, ":")
	uid, err := strconv.Atoi(us)
	if err != nil {
		return 0, 0, false
	}
	if hasGid {
		if gid, err = strconv.Atoi(gs); err != nil {
			return 0, 0, false
		}
	}
	return uid, gid, true
}

// WriteFile writes data to p, creating parent folders.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := s.live(); err != nil {
		return err
	}
	full := s.abs(p)
	if mode == 0 {
		mode = 0o644
	}
	if err := s.mkdir(ctx, path.Dir(full)); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: path.Base(full), Mode: int64(mode.Perm()), Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	tw.Write(data)
	tw.Close()
	if err := s.copyTo(ctx, path.Dir(full), buf.Bytes()); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// ReadFile reads a whole regular file.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rc, _, err := s.b.cli.CopyFromContainer(ctx, s.id, s.abs(p))
	if err != nil {
		if client.IsErrNotFound(err) {
			return nil, fmt.Errorf("read %s: %w", p, sandbox.ErrNotFound)
		}
		return nil, fmt.Errorf("read %s: %w", p, engineError(err))
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if h.Typeflag == tar.TypeDir {
		return nil, fmt.Errorf("read %s: is a directory", p)
	}
	if h.Typeflag == tar.TypeSymlink {
		// Follow the link through the shell's view of the file system.
		r, err := s.sh.Exec(ctx, "/bin/cat -- "+shell.Quote(s.abs(p)), sandbox.ExecOptions{MaxOutput: 1 << 30, Fresh: true})
		if err != nil {
			return nil, err
		}
		if r.ExitCode != 0 {
			return nil, fmt.Errorf("read %s: %s: %w", p, strings.TrimSpace(r.Stderr), sandbox.ErrNotFound)
		}
		return []byte(r.Stdout), nil
	}
	return io.ReadAll(tr)
}

// Upload checks the archive, then extracts it into dir.
func (s *Sandbox) Upload(ctx context.Context, dir string, r io.Reader) error {
	if err := s.live(); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	if err := archive.Check(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("upload to %s: %w: %w", dir, sandbox.ErrUnsafeArchive, err)
	}
	full := s.abs(dir)
	if err := s.mkdir(ctx, full); err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	if err := s.copyTo(ctx, full, data); err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	return nil
}

// Download returns p (a file or folder) as a tar stream.
func (s *Sandbox) Download(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rc, _, err := s.b.cli.CopyFromContainer(ctx, s.id, s.abs(p))
	if err != nil {
		if client.IsErrNotFound(err) {
			return nil, fmt.Errorf("download %s: %w", p, sandbox.ErrNotFound)
		}
		return nil, fmt.Errorf("download %s: %w", p, engineError(err))
	}
	return rc, nil
}

// Close removes the container, also after Ctrl-C: it uses its own short
// timeout, not ctx's cancellation.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
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
