// Package local runs sandboxes as host processes in a temporary folder. It
// is for development and for plugins whose tasks need no image: it is NOT
// isolated (commands see the host's files, network and users), and it says
// so once per process. Commands run in the same persistent shell as the
// docker backend, with the same process-group kill on timeout. Close kills
// everything a sandbox started through its cgroup where proctor can make
// one, else through the process groups of its shell (cgroup.go), so its
// cost does not grow with the processes on the host.
//
// Paths: the shell starts in the sandbox's workdir, ROOT/work joined with
// Spec.Workdir (an absolute Workdir such as /app keeps its shape under
// ROOT/work). Relative file paths resolve against that workdir; absolute
// ones are host paths, as they are for the commands themselves.
package local

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/archive"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Backend starts local sandboxes.
type Backend struct {
	// ProcessGroups tracks a sandbox's processes by the process groups its
	// shell started even where a cgroup could be made (see cgroup.go).
	ProcessGroups bool
}

var _ sandbox.Backend = Backend{}

// Abilities: none. A local sandbox runs no image, keeps nothing apart,
// and its commands have the host's network whatever the spec asks.
func (Backend) Abilities(context.Context) sandbox.Abilities { return sandbox.Abilities{} }

var warnOnce sync.Once

// Sandbox is a folder on the host and a persistent bash in it.
type Sandbox struct {
	root string  // the sandbox's folder
	work string  // the shell's starting folder, under root/work
	cg   *cgroup // nil: the sandbox's processes are tracked by process group
	cmd  *exec.Cmd
	sh   *shell.Shell

	closeOnce sync.Once
	closeErr  error
	done      atomic.Bool
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Start makes the folder and starts the shell. Resource fields of spec are
// ignored: a local sandbox has no limits. A spec that needs an image or
// private folders is refused: the host has neither, and a task that writes
// its absolute paths (Terminal-Bench's /tests, /logs) would write them on
// the host.
func (b Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if _, err := spec.NetworkMode(); err != nil {
		return nil, err
	}
	switch {
	case spec.Image != "" || len(spec.BuildContext) > 0:
		name := spec.Image
		if name == "" {
			name = "built from the task's environment"
		}
		return nil, fmt.Errorf("the local backend runs no images, and this task needs one (%s); use [sandbox] backend = \"docker\"", name)
	case len(spec.Private) > 0:
		return nil, fmt.Errorf("the local backend cannot keep the verifier's folders %v from the agent; use [sandbox] backend = \"docker\"", spec.Private)
	case spec.Layer != nil:
		return nil, fmt.Errorf("the local backend installs nothing, and %s is installed into the task's image; use [sandbox] backend = \"docker\"", spec.Layer.Name)
	}
	warnOnce.Do(func() {
		slog.Warn("local sandbox backend: commands run on this host WITHOUT isolation; use backend = \"docker\" for untrusted agents")
	})
	root, err := os.MkdirTemp("", prefix+safeLabel(spec.Labels[sandbox.LabelRun])+"-")
	if err != nil {
		return nil, fmt.Errorf("local sandbox: %w", err)
	}
	// Join cleans "/app" and "../x" alike to stay under root/work.
	s := &Sandbox{root: root, work: filepath.Join(root, "work", filepath.Join("/", spec.Workdir))}
	for _, d := range []string{s.work, s.state(), s.home()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			os.RemoveAll(root)
			return nil, fmt.Errorf("local sandbox: %w", err)
		}
	}
	// The folder's name holds the run's id only in part (safeLabel):
	// the whole id, for Prune to tell runs apart.
	if err := os.WriteFile(filepath.Join(root, runFile), []byte(spec.Labels[sandbox.LabelRun]), 0o644); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("local sandbox: %w", err)
	}
	if !b.ProcessGroups {
		s.cg = s.makeCgroup()
	}
	err = s.startShell(spec)
	if err != nil && s.cg != nil {
		s.cg.remove(context.WithoutCancel(ctx))
		s.cg = nil
		if err = s.startShell(spec); err == nil {
			// The kernel will not clone into a cgroup (before Linux
			// 5.7): process groups from now on.
			slog.Debug("local sandbox: no cgroups: the kernel refuses to start a process in one")
			disableCgroups()
		}
	}
	if err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("local sandbox: start bash: %w", err)
	}
	return s, nil
}

func (s *Sandbox) state() string { return filepath.Join(s.root, "state") }
func (s *Sandbox) home() string  { return filepath.Join(s.root, "home") }

// makeCgroup makes the sandbox's cgroup and names it in the sandbox's
// folder, or returns nil where this process cannot make one.
func (s *Sandbox) makeCgroup() *cgroup {
	parent := cgroupParent()
	if parent == "" {
		return nil
	}
	cg, err := newCgroup(parent, filepath.Base(s.root))
	if err != nil {
		slog.Debug("local sandbox: no cgroup", "parent", parent, "err", err)
		return nil
	}
	if err := os.WriteFile(filepath.Join(s.root, cgroupFile), []byte(cg.dir+"\n"), 0o644); err != nil {
		cg.remove(context.Background())
		return nil
	}
	return cg
}

// startShell starts the sandbox's bash, in its cgroup when it has one.
func (s *Sandbox) startShell(spec sandbox.Spec) error {
	cmd := exec.Command("bash", "-c", shell.Bootstrap(), "proctor-shell", s.state())
	cmd.Dir = s.work
	// The marker lets Prune find every process of a sandbox that a killed
	// proctor left behind, also outside any cgroup.
	cmd.Env = append(baseEnv(s.home()), markerVar+"="+s.root)
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// A session of its own: no controlling terminal of proctor's, and
	// a session id that tells the sandbox's process groups from others.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if s.cg != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(s.cg.fd.Fd())
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if s.cg != nil {
		s.cg.release()
	}
	s.cmd = cmd
	s.sh = shell.New(shell.Transport{
		Stdin:  stdin,
		Stdout: stdout,
		Kill: func(_ context.Context, pgid int) error {
			return syscall.Kill(-pgid, syscall.SIGKILL)
		},
		Close: func() error { return cmd.Process.Kill() },
	}, s.state())
	return nil
}

// Root is the sandbox's folder on the host.
func (s *Sandbox) Root() string { return s.root }

// Exec runs cmd in the persistent shell.
func (s *Sandbox) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return s.sh.Exec(ctx, cmd, o)
}

// baseEnv is the environment a local sandbox starts with: none of
// proctor's own (API keys live there), only what a shell needs.
func baseEnv(home string) []string {
	env := []string{"HOME=" + home, "LANG=C.UTF-8", "TERM=dumb"}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env = append(env, "PATH="+path)
	if u := os.Getenv("USER"); u != "" {
		env = append(env, "USER="+u)
	}
	return env
}

// path maps a sandbox path for a file operation: relative ones are under
// the shell's start folder; absolute ones must lie in the sandbox's own
// folder (the agent may compute them from its working directory): this
// backend refuses to write or read the host's files for a plugin.
func (s *Sandbox) path(p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.work, p)
	}
	p = filepath.Clean(p)
	if p != s.root && !strings.HasPrefix(p, s.root+string(filepath.Separator)) {
		return "", fmt.Errorf("local sandbox: %s is outside the sandbox's folder %s; on the local backend, file operations use paths relative to the working directory", p, s.work)
	}
	return p, nil
}

func (s *Sandbox) live() error {
	if s.done.Load() {
		return sandbox.ErrClosed
	}
	return nil
}

// WriteFile writes data, creating parent folders.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := s.live(); err != nil {
		return err
	}
	full, err := s.path(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	return os.WriteFile(full, data, mode)
}

// ReadFile reads the first limit bytes of a file and its size.
func (s *Sandbox) ReadFile(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	if err := s.live(); err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		limit = sandbox.DefaultReadLimit
	}
	full, err := s.path(p)
	if err != nil {
		return nil, 0, err
	}
	// The path is opened without reading first (O_PATH), so nothing left
	// there makes the read wait: a FIFO or device reads as empty, as the
	// other backends read it. A regular file is then opened for reading.
	at, err := os.OpenFile(full, unix.O_PATH, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("read %s: %w", p, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, 0, err
	}
	defer at.Close()
	st, err := at.Stat()
	if err != nil {
		return nil, 0, err
	}
	switch {
	case st.IsDir():
		return nil, 0, fmt.Errorf("read %s: is a directory", p)
	case !st.Mode().IsRegular():
		return nil, 0, nil
	}
	f, err := os.Open("/proc/self/fd/" + strconv.Itoa(int(at.Fd())))
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, 0, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	return b, st.Size(), err
}

// Upload extracts a tar stream into dir after checking it.
func (s *Sandbox) Upload(ctx context.Context, dir string, r io.Reader) error {
	if err := s.live(); err != nil {
		return err
	}
	full, err := s.path(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(full, 0o755); err != nil {
		return err
	}
	if err := archive.Extract(r, full); err != nil {
		if errors.Is(err, archive.ErrUnsafe) {
			return fmt.Errorf("upload to %s: %w: %w", dir, sandbox.ErrUnsafeArchive, err)
		}
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	return nil
}

// Download returns a file or folder as a tar stream, named by its base.
func (s *Sandbox) Download(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	full, err := s.path(p)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(full); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("download %s: %w", p, sandbox.ErrNotFound)
		}
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := archive.Pack(tw, full, filepath.Dir(full))
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// Close kills every process the sandbox started and removes its folder.
// With a cgroup that is every process, also those that left their process
// group; without one, it is the process groups of the shell and of each
// command, and a process that made a group or session of its own (setsid)
// lives on until a prune finds it by its marker.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.done.Store(true)
		var errs []error
		if s.cg == nil {
			for _, g := range s.groups() {
				_ = syscall.Kill(-g, syscall.SIGKILL)
			}
		} else if err := killCgroup(s.cg.dir); err != nil {
			errs = append(errs, fmt.Errorf("local sandbox: %w", err))
		}
		_ = s.sh.Close()
		_ = s.cmd.Wait()
		if s.cg != nil {
			errs = append(errs, s.cg.remove(ctx))
		}
		errs = append(errs, os.RemoveAll(s.root))
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// groups returns the process groups to kill when the sandbox has no
// cgroup: the shell's, and each command's (what a command starts in the
// background stays in its group unless it asks for another) that is still
// the sandbox's. A group whose leader lives in another session has an id
// the host reused; one whose leader is gone keeps its id as long as one of
// its members lives, and is killed.
func (s *Sandbox) groups() []int {
	sid := s.cmd.Process.Pid // the shell leads a session of its own
	out := []int{sid}
	for _, g := range s.sh.Groups() {
		if g <= 1 || slices.Contains(out, g) {
			continue
		}
		if got, err := unix.Getsid(g); err == nil && got == sid || errors.Is(err, syscall.ESRCH) {
			out = append(out, g)
		}
	}
	return out
}

// markerVar is set in the environment of a local sandbox's shell.
const markerVar = "PROCTOR_LOCAL_SANDBOX"

// prefix starts the name of every local sandbox's folder in the temp
// folder; the run's id follows, so Prune finds a run's leftovers.
const prefix = "proctor-local-"

// runFile, in a sandbox's folder, holds the run's whole id.
const runFile = "run"

// safeLabel keeps a run id usable in a folder name: it maps characters
// and cuts long ids, so two runs can share one.
func safeLabel(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}
