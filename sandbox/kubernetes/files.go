package kubernetes

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/archive"
)

// Exit codes of the file scripts.
const (
	exitNotFound = 3
	exitIsDir    = 4
)

// untar makes a folder (as the sandbox's user where it may, else as the
// container's) and extracts the tar stream on stdin into it. Arguments:
// the folder, then the command prefix that switches to the user.
const untar = `d=$1; shift
"$@" mkdir -p -- "$d" 2>/dev/null || mkdir -p -- "$d" || exit 1
exec tar -x -p -f - -C "$d"`

// head writes the first $2 bytes of a file (links followed) to stdout and
// its whole size to stderr as "size N".
const head = `[ -e "$1" ] || exit 3
[ -d "$1" ] && exit 4
echo "size $(stat -L -c %s -- "$1")" >&2
exec head -c "$2" -- "$1"`

// packs writes a file or folder as a tar stream, named by its base name.
const pack = `cd -- "$1" 2>/dev/null || exit 3
[ -e "$2" ] || [ -L "$2" ] || exit 3
exec tar -c -f - -- "$2"`

// ids are the owner files written for the sandbox get: its user's, or
// root's (a container running as another user cannot chown, and keeps its
// own).
func (s *Sandbox) ids() (int, int) {
	if s.user == nil {
		return 0, 0
	}
	return s.user.uid, s.user.gid
}

func (s *Sandbox) asUser() []string {
	if s.user == nil {
		return nil
	}
	return s.user.setpriv()
}

// extract runs untar into dir with a (checked) archive on stdin.
func (s *Sandbox) extract(ctx context.Context, dir string, data []byte) error {
	code, msg, err := s.run(ctx, untar, append([]string{dir}, s.asUser()...), bytes.NewReader(data), nil)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("extract into %s: exit %d: %s", dir, code, msg)
	}
	return nil
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
	uid, gid := s.ids()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: path.Base(full), Mode: int64(mode.Perm()), Size: int64(len(data)),
		ModTime: time.Now(), Typeflag: tar.TypeReg, Uid: uid, Gid: gid}); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	tw.Write(data)
	tw.Close()
	if err := s.extract(ctx, path.Dir(full), buf.Bytes()); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// ReadFile reads the first limit bytes of a file (links followed) and its
// size.
func (s *Sandbox) ReadFile(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	if err := s.live(); err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		limit = sandbox.DefaultReadLimit
	}
	out := &limitWriter{max: int(limit)}
	code, msg, err := s.run(ctx, head, []string{s.abs(p), strconv.FormatInt(limit, 10)}, nil, out)
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
	return out.buf.Bytes(), statSize(msg, int64(out.buf.Len())), nil
}

// statSize reads the "size N" line of a read's stderr; at least got.
func statSize(stderr string, got int64) int64 {
	size := got
	for _, line := range strings.Split(stderr, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "size "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > size {
				size = n
			}
		}
	}
	return size
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
	uid, gid := s.ids()
	if data, err = archive.Chown(data, uid, gid); err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	if err := s.extract(ctx, s.abs(dir), data); err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	return nil
}

// Download returns p (a file or folder) as a tar stream whose entries are
// named from p's base name. The stream is read while it is produced; a
// missing path is an error matching ErrNotFound.
func (s *Sandbox) Download(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	full := s.abs(p)
	pr, pw := io.Pipe()
	dctx, cancel := context.WithCancel(ctx)
	go func() {
		code, msg, err := s.run(dctx, pack, []string{path.Dir(full), path.Base(full)}, nil, pw)
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
