//go:build linux

package main

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox/archive"
)

// File operations for folders only the plugin's namespace sees (the
// engine's archive API works on the container's own mounts, not on ours).

// put extracts a tar stream from stdin into a folder, with the same checks
// as every other upload. With -user (run as root), what it writes, and
// the folders it makes, are owned by that user's uid and gid, with the
// archive's modes exactly, as the engine's archive API writes them.
func put(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.rest) != 1 || f.argv != nil {
		return errors.New("usage: warden put [-user U] DIR")
	}
	dir := f.rest[0]
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	if f.user == "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		err = archive.Extract(in, dir)
	} else {
		err = putOwned(in, dir, f.user)
	}
	if errors.Is(err, archive.ErrUnsafe) {
		return exitCode{5, err}
	}
	return err
}

// putOwned is put -user: the folder made and opened from / without a
// /proc link on the way, then the archive extracted into the folder as
// opened, whatever is renamed on its path meanwhile.
func putOwned(in io.Reader, dir, user string) error {
	cred, err := credential(user)
	if err != nil {
		return err
	}
	own := archive.Owner{UID: int(cred.Uid), GID: int(cred.Gid)}
	d, err := mkdirOwned(dir, own)
	if err != nil {
		return err
	}
	defer d.Close()
	return archive.ExtractOwned(in, fdPath(d), own)
}

// The commands the host runs as root in the container's own mount
// namespace (put -user, get -nomagic, read -nomagic) refuse every magic
// link on their way: there, /proc/PID/root, cwd and fd lead into the
// namespaces of other processes, the plugin's private folders included,
// where the engine's archive API (which resolves paths in the image's
// root, whose /proc is empty) finds nothing. A path through one is not
// found.

// openResolved opens p as openat(2) would, relative to dirfd, but refuses
// magic links anywhere on the path.
func openResolved(dirfd int, p string, flags int) (*os.File, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(dirfd, p, &how)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err == unix.ENOSYS:
			return nil, exitCode{7, errors.New("this kernel has no openat2 (Linux 5.6): paths cannot be opened without following /proc links")}
		case err == unix.ELOOP:
			return nil, exitCode{3, fmt.Errorf("%s: not found in the container's own view (a /proc link, or too many links, on the way)", p)}
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		return os.NewFile(uintptr(fd), p), nil
	}
}

// fdPath names an open file by its descriptor, for calls that take a path.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// mkdirOwned makes dir and its missing parents, those it makes owned by
// own, one name at a time from /, and returns dir opened (O_PATH).
func mkdirOwned(dir string, own archive.Owner) (*os.File, error) {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%s is not an absolute path", dir)
	}
	d, err := openResolved(unix.AT_FDCWD, "/", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	for _, name := range strings.Split(dir, "/")[1:] {
		if name == "" {
			continue
		}
		err := unix.Mkdirat(int(d.Fd()), name, 0o755)
		made := err == nil
		if err != nil && err != unix.EEXIST {
			d.Close()
			return nil, &fs.PathError{Op: "mkdir", Path: dir, Err: err}
		}
		next, err := openResolved(int(d.Fd()), name, unix.O_PATH|unix.O_DIRECTORY)
		d.Close()
		if err != nil {
			return nil, err
		}
		d = next
		if made {
			if err := unix.Fchownat(int(d.Fd()), "", own.UID, own.GID, unix.AT_EMPTY_PATH); err != nil {
				d.Close()
				return nil, &fs.PathError{Op: "chown", Path: dir, Err: err}
			}
		}
	}
	return d, nil
}

// get writes a file or folder as a tar stream, named by its base name; a
// link stays a link. With -nomagic, the folder holding it is opened
// without a /proc link on the way.
func get(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.rest) != 1 || f.argv != nil {
		return errors.New("usage: warden get [-nomagic] PATH")
	}
	p := filepath.Clean(f.rest[0])
	base := filepath.Dir(p)
	if f.nomagic {
		d, err := openResolved(unix.AT_FDCWD, base, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return exitCode{3, err}
			}
			return err
		}
		defer d.Close()
		base = fdPath(d)
		p = filepath.Join(base, filepath.Base(p))
	}
	if _, err := os.Lstat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return exitCode{3, err}
		}
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	tw := tar.NewWriter(w)
	if err := archive.Pack(tw, p, base); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return w.Flush()
}

// read writes at most n bytes of a file, following links as any reader
// would (with -nomagic, no /proc link), and reports the file's size on
// stderr. It opens the path without reading it first (O_PATH), so nothing
// left at the path makes it wait: a FIFO or a device reads as empty, as in
// the engine's archive; a regular file is then opened for reading as any
// reader opens it.
func read(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.rest) != 2 || f.argv != nil {
		return errors.New("usage: warden read [-nomagic] PATH N")
	}
	p := f.rest[0]
	n, err := strconv.ParseInt(f.rest[1], 10, 64)
	if err != nil || n < 0 {
		return errors.New("read: N must be a byte count")
	}
	var at *os.File
	if f.nomagic {
		at, err = openResolved(unix.AT_FDCWD, p, unix.O_PATH)
	} else {
		at, err = os.OpenFile(p, unix.O_PATH, 0)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return exitCode{3, err}
		}
		return err
	}
	defer at.Close()
	st, err := at.Stat()
	if err != nil {
		return err
	}
	switch {
	case st.IsDir():
		return exitCode{4, fmt.Errorf("%s is a directory", p)}
	case !st.Mode().IsRegular():
		fmt.Fprintln(os.Stderr, "size 0")
		return nil
	}
	file, err := os.Open(fdPath(at))
	if err != nil {
		return err
	}
	defer file.Close()
	if st, err = file.Stat(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "size %d\n", st.Size())
	_, err = io.Copy(os.Stdout, io.LimitReader(file, n))
	return err
}
