// Package local runs sandboxes as host processes in a temporary folder. It
// is for development and for plugins whose tasks need no image: it is NOT
// isolated (commands see the host's files, network and users), and it says
// so once per process. Commands run in the same persistent shell as the
// docker backend, with the same process-group kill on timeout.
//
// Paths: the shell starts in the sandbox's workdir, ROOT/work joined with
// Spec.Workdir (an absolute Workdir such as /app keeps its shape under
// ROOT/work). Relative file paths resolve against that workdir; absolute
// ones are host paths, as they are for the commands themselves.
package local

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/archive"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Backend starts local sandboxes.
type Backend struct{}

var _ sandbox.Backend = Backend{}

var warnOnce sync.Once

// Sandbox is a folder on the host and a persistent bash in it.
type Sandbox struct {
	root string // the sandbox's folder
	work string // the shell's starting folder, under root/work
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
func (Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	switch {
	case spec.Image != "" || len(spec.BuildContext) > 0:
		name := spec.Image
		if name == "" {
			name = "built from the task's environment"
		}
		return nil, fmt.Errorf("the local backend runs no images, and this task needs one (%s); use [sandbox] backend = \"docker\"", name)
	case len(spec.Private) > 0:
		return nil, fmt.Errorf("the local backend cannot keep the verifier's folders %v from the agent; use [sandbox] backend = \"docker\"", spec.Private)
	}
	warnOnce.Do(func() {
		slog.Warn("local sandbox backend: commands run on this host WITHOUT isolation; use backend = \"docker\" for untrusted agents")
	})
	root, err := os.MkdirTemp("", prefix+safeLabel(spec.Labels[sandbox.LabelRun])+"-")
	if err != nil {
		return nil, fmt.Errorf("local sandbox: %w", err)
	}
	// Join cleans "/app" and "../x" alike to stay under root/work.
	work := filepath.Join(root, "work", filepath.Join("/", spec.Workdir))
	state := filepath.Join(root, "state")
	for _, d := range []string{work, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			os.RemoveAll(root)
			return nil, fmt.Errorf("local sandbox: %w", err)
		}
	}
	home := filepath.Join(root, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("local sandbox: %w", err)
	}
	cmd := exec.Command("bash", "-c", shell.Bootstrap(), "proctor-shell", state)
	cmd.Dir = work
	// The marker lets Close find every process the sandbox started, and
	// only those, even when a group id has since been reused on the host.
	cmd.Env = append(baseEnv(home), markerVar+"="+root)
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("local sandbox: start bash: %w", err)
	}
	s := &Sandbox{root: root, work: work, cmd: cmd}
	s.sh = shell.New(shell.Transport{
		Stdin:  stdin,
		Stdout: stdout,
		Kill: func(_ context.Context, pgid int) error {
			return syscall.Kill(-pgid, syscall.SIGKILL)
		},
		Close: func() error { return cmd.Process.Kill() },
	}, state)
	return s, nil
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
	f, err := os.Open(full)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("read %s: %w", p, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if st.IsDir() {
		return nil, 0, fmt.Errorf("read %s: is a directory", p)
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
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.done.Store(true)
		for _, g := range s.groups() {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
		_ = s.sh.Close()
		_ = s.cmd.Wait()
		s.closeErr = os.RemoveAll(s.root)
	})
	return s.closeErr
}

// markerVar is set in the environment of a local sandbox's shell.
const markerVar = "PROCTOR_LOCAL_SANDBOX"

// prefix starts the name of every local sandbox's folder in the temp
// folder; the run's id follows, so Prune finds a run's leftovers.
const prefix = "proctor-local-"

// safeLabel keeps a run id usable in a folder name.
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

// Prune removes what killed runs left behind: the folders of local
// sandboxes (of one run when runID is set) and every process started in
// them, including those that left their process group. It returns how many
// sandboxes it removed.
func (Backend) Prune(ctx context.Context, runID string) (int, error) {
	pattern := prefix + "*"
	if runID != "" {
		pattern = prefix + safeLabel(runID) + "-*"
	}
	roots, err := filepath.Glob(filepath.Join(os.TempDir(), pattern))
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, root := range roots {
		if st, err := os.Stat(filepath.Join(root, "state")); err != nil || !st.IsDir() {
			continue // not a sandbox's folder
		}
		for _, pid := range markedProcesses(root) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := os.RemoveAll(root); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// markedProcesses lists the processes whose initial environment carries a
// sandbox's marker.
func markedProcesses(root string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	marker := []byte("\x00" + markerVar + "=" + root + "\x00")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), marker) {
			out = append(out, pid)
		}
	}
	return out
}

// groups returns the process groups that still hold a process of this
// sandbox: every process whose initial environment carries the marker.
// Group ids recorded long ago are not trusted: the host may have reused
// them for an unrelated process.
func (s *Sandbox) groups() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	marker := []byte("\x00" + markerVar + "=" + s.root + "\x00")
	own := syscall.Getpgrp()
	seen := map[int]bool{}
	var out []int
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which may hold spaces: state ppid pgrp.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		pgrp, err := strconv.Atoi(f[2])
		if err != nil || pgrp < 2 || pgrp == own || seen[pgrp] {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), marker) {
			continue
		}
		seen[pgrp] = true
		out = append(out, pgrp)
	}
	return out
}
