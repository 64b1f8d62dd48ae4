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

// putOwned is put -user: the folder made and opened as the engine finds
// it (walk), then the archive extracted into the folder as opened,
// whatever is renamed on its path meanwhile.
func putOwned(in io.Reader, dir, user string) error {
	cred, err := credential(user)
	if err != nil {
		return err
	}
	own := archive.Owner{UID: int(cred.Uid), GID: int(cred.Gid)}
	d, err := walk(filepath.Clean(dir), true, &own)
	if err != nil {
		return err
	}
	defer d.Close()
	return archive.ExtractOwned(in, fdPath(d), own)
}

// get writes a file or folder as a tar stream, named by its base name; a
// link stays a link. With -engine, the folder holding it is found as the
// engine finds it (walk), and a proc file system in the tree is stored
// as an empty folder, as the engine's view has the container's /proc.
func get(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.rest) != 1 || f.argv != nil {
		return errors.New("usage: warden get [-engine] PATH")
	}
	p := filepath.Clean(f.rest[0])
	base := filepath.Dir(p)
	var skip func(*os.File) bool
	if f.engine {
		d, err := walk(base, true, nil)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return exitCode{3, err}
			}
			return err
		}
		defer d.Close()
		base = fdPath(d)
		p = filepath.Join(base, filepath.Base(p))
		skip = onProc
	}
	if _, err := os.Lstat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return exitCode{3, err}
		}
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	tw := tar.NewWriter(w)
	if err := archive.PackWithout(tw, p, base, skip); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return w.Flush()
}

// read writes at most n bytes of a file, following links as any reader
// would (with -engine, as the engine finds it: walk), and reports its size on
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
		return errors.New("usage: warden read [-engine] PATH N")
	}
	p := f.rest[0]
	n, err := strconv.ParseInt(f.rest[1], 10, 64)
	if err != nil || n < 0 {
		return errors.New("read: N must be a byte count")
	}
	var at *os.File
	if f.engine {
		at, err = walk(filepath.Clean(p), true, nil)
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
