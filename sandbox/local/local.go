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

// Start makes the folder and starts the shell. Image, build and resource
// fields of spec are ignored: a local sandbox has no image and no limits.
func (Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	warnOnce.Do(func() {
		slog.Warn("local sandbox backend: commands run on this host WITHOUT isolation; use backend = \"docker\" for untrusted agents")
	})
	root, err := os.MkdirTemp("", "proctor-local-")
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
	cmd := exec.Command("bash", "-c", shell.Bootstrap(), "proctor-shell", state)
	cmd.Dir = work
	// The marker lets Close find every process the sandbox started, and
	// only those, even when a group id has since been reused on the host.
	cmd.Env = append(os.Environ(), markerVar+"="+root)
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

// path maps a sandbox path: relative ones are under the shell's start
// folder, absolute ones are host paths (this backend is not isolated).
func (s *Sandbox) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.work, p)
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
	full := s.path(p)
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
	f, err := os.Open(s.path(p))
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
	full := s.path(dir)
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
	full := s.path(p)
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
