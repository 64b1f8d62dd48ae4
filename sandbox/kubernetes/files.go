package kubernetes

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/archive"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// view is one side of a sandbox, the plugin's or the agent's. Its commands
// run in its own shell. Files travel over exec streams of their own, as
// the view's user, except those in the plugin's private folders: they live
// in the plugin shell's mount namespace, which only that shell (and the
// warden it runs) reaches.
type view struct {
	s      *Sandbox
	shell  func() *Controller
	plugin bool
	// closed is set when the view was closed on its own (the agent's,
	// while the sandbox lives on); nil for the plugin's.
	closed *atomic.Bool
}

// live fails once the sandbox, or the view, was closed.
func (v view) live() error {
	if v.closed != nil && v.closed.Load() {
		return sandbox.ErrClosed
	}
	return v.s.live()
}

// Exec runs cmd in the view's shell. If the shell died, the pod is read so
// the error says why (evicted, over its disk limit, OOM killed, deleted,
// deadline).
func (v view) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if err := v.live(); err != nil {
		return sandbox.ExecResult{}, err
	}
	r, err := v.shell().Exec(ctx, cmd, o)
	if err != nil && errors.Is(err, sandbox.ErrGone) && !v.s.closed.Load() {
		err = v.s.explain(ctx, err)
	}
	return r, err
}

// user is who the view's files belong to (nil: the container's user).
func (v view) user() *userIDs {
	if !v.plugin && v.s.agentUser != nil {
		return v.s.agentUser
	}
	return v.s.user
}

// private reports whether a path lies in one of the plugin's private
// folders, seen from this view.
func (v view) private(full string) bool {
	return v.plugin && shell.InPrivate(v.s.private, full)
}

// files are the file operations of the plugin's private folders, through
// the plugin's shell.
func (v view) files() shell.Files { return shell.Files{Exec: v.Exec} }

// Exit codes of the file scripts and the warden.
const (
	exitNotFound = 3
	exitIsDir    = 4
)

// rootFiles runs the warden's root file operation args (put -user, get
// -engine, read -engine) in an exec of its own, where the pod has a warden
// (it isolates). They run as root in the container's own view, as the
// scripts below do, but find paths as the engine's archive API would:
// links followed where the private folders are not mounted, and nothing on
// the container's /proc, which leads into them (sandbox/warden). ok is
// false where there is no warden: the caller runs its script instead.
func (v view) rootFiles(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) (code int, msg string, ok bool, err error) {
	if v.s.agent == nil {
		return 0, "", false, nil
	}
	code, msg, err = v.s.runArgv(ctx, append([]string{shell.WardenPath}, args...), stdin, stdout)
	return code, msg, true, err
}

// untar makes a folder (as the view's user where it may, else as the
// container's) and extracts the tar stream on stdin into it. Arguments:
// the folder, then the command prefix that switches to the user.
const untar = `d=$1; shift
"$@" mkdir -p -- "$d" 2>/dev/null || mkdir -p -- "$d" || exit 1
exec tar -x -p -f - -C "$d"`

// head writes the first $2 bytes of a file (links followed) to stdout and
// its whole size to stderr as "size N". Anything but a regular file (a
// FIFO, a device) reads as empty, never waited on.
const head = `[ -e "$1" ] || exit 3
[ -d "$1" ] && exit 4
[ -f "$1" ] || { echo "size 0" >&2; exit 0; }
echo "size $(stat -L -c %s -- "$1")" >&2
exec head -c "$2" -- "$1"`

// pack writes a file or folder as a tar stream, named by its base name.
const pack = `cd -- "$1" 2>/dev/null || exit 3
[ -e "$2" ] || [ -L "$2" ] || exit 3
exec tar -c -f - -- "$2"`

// ids are the owner of the files the view writes: its user's, or root's
// (a container running as another user cannot chown, and keeps its own).
func (v view) ids() (int, int) {
	if u := v.user(); u != nil {
		return u.uid, u.gid
	}
	return 0, 0
}

// extract runs untar into dir with a (checked) archive on stdin, its
// entries owned by the view's user (archive.Chown): in an isolated pod,
// the warden's put -user.
func (v view) extract(ctx context.Context, dir string, data []byte) error {
	uid, gid := v.ids()
	code, msg, ok, err := v.rootFiles(ctx, []string{"put", "-user", fmt.Sprintf("%d:%d:", uid, gid), dir}, bytes.NewReader(data), nil)
	if ok {
		if err == nil {
			err = shell.StatusError(sandbox.ExecResult{ExitCode: code, Stderr: msg})
		}
		return err
	}
	args := []string{dir}
	if u := v.user(); u != nil {
		args = append(args, u.setpriv()...)
	}
	code, msg, err = v.s.run(ctx, untar, args, bytes.NewReader(data), nil)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("extract into %s: exit %d: %s", dir, code, msg)
	}
	return nil
}

// WriteFile writes data to p, creating parent folders.
func (v view) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := v.live(); err != nil {
		return err
	}
	full := v.s.abs(p)
	if mode == 0 {
		mode = 0o644
	}
	uid, gid := v.ids()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: path.Base(full), Mode: int64(mode.Perm()), Size: int64(len(data)),
		ModTime: time.Now(), Typeflag: tar.TypeReg, Uid: uid, Gid: gid}); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	tw.Write(data)
	tw.Close()
	var err error
	if v.private(full) {
		err = v.files().Put(ctx, path.Dir(full), buf.Bytes())
	} else {
		err = v.extract(ctx, path.Dir(full), buf.Bytes())
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// ReadFile reads the first limit bytes of a file (links followed) and its
// size.
func (v view) ReadFile(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	if err := v.live(); err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		limit = sandbox.DefaultReadLimit
	}
	full := v.s.abs(p)
	if v.private(full) {
		data, size, err := v.files().Read(ctx, full, limit)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", p, err)
		}
		return data, size, nil
	}
	out := &limitWriter{max: int(limit)}
	n := strconv.FormatInt(limit, 10)
	code, msg, ok, err := v.rootFiles(ctx, []string{"read", "-engine", full, n}, nil, out)
	if !ok {
		code, msg, err = v.s.run(ctx, head, []string{full, n}, nil, out)
	}
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("read %s: %w", p, err)
	case code == exitNotFound:
		return nil, 0, fmt.Errorf("read %s: %w", p, sandbox.ErrNotFound)
	case code == exitIsDir:
		return nil, 0, fmt.Errorf("read %s: is a directory", p)
	case code != 0:
		return nil, 0, fmt.Errorf("read %s: exit %d: %s", p, code, msg)
	}
	_, size, _ := shell.ReadResult(sandbox.ExecResult{Stdout: out.buf.String(), Stderr: msg})
	return out.buf.Bytes(), size, nil
}

// Upload checks the archive, then extracts it into dir.
func (v view) Upload(ctx context.Context, dir string, r io.Reader) error {
	if err := v.live(); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	if err := archive.Check(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("upload to %s: %w: %w", dir, sandbox.ErrUnsafeArchive, err)
	}
	full := v.s.abs(dir)
	if v.private(full) {
		// The warden extracts as the plugin's user.
		err = v.files().Put(ctx, full, data)
	} else {
		uid, gid := v.ids()
		if data, err = archive.Chown(data, uid, gid); err == nil {
			err = v.extract(ctx, full, data)
		}
	}
	if err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	return nil
}

// Download returns p (a file or folder) as a tar stream whose entries are
// named from p's base name. The stream is read while it is produced; a
// missing path is an error matching ErrNotFound.
func (v view) Download(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := v.live(); err != nil {
		return nil, err
	}
	full := v.s.abs(p)
	if v.private(full) {
		data, err := v.files().Get(ctx, full)
		if err != nil {
			return nil, fmt.Errorf("download %s: %w", p, err)
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	pr, pw := io.Pipe()
	dctx, cancel := context.WithCancel(ctx)
	go func() {
		code, msg, ok, err := v.rootFiles(dctx, []string{"get", "-engine", full}, nil, pw)
		if !ok {
			code, msg, err = v.s.run(dctx, pack, []string{path.Dir(full), path.Base(full)}, nil, pw)
		}
		switch {
		case err != nil:
		case code == exitNotFound:
			err = sandbox.ErrNotFound
		case code != 0:
			err = fmt.Errorf("tar: exit %d: %s", code, msg)
		}
		pw.CloseWithError(err)
	}()
	br := bufio.NewReaderSize(pr, 32<<10)
	// A tar stream is never empty: the first byte, or the error, tells
	// whether the path is there.
	if _, err := br.Peek(1); err != nil {
		cancel()
		pr.Close()
		return nil, fmt.Errorf("download %s: %w", p, err)
	}
	return &download{Reader: br, close: func() error { cancel(); return pr.Close() }}, nil
}

type download struct {
	io.Reader
	close func() error
}

func (d *download) Close() error { return d.close() }
