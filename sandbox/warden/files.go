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
	"syscall"

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
	var own *archive.Owner
	if f.user != "" {
		cred, err := credential(f.user)
		if err != nil {
			return err
		}
		own = &archive.Owner{UID: int(cred.Uid), GID: int(cred.Gid)}
	}
	if err := mkdirOwned(dir, own); err != nil {
		return err
	}
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	if own != nil {
		err = archive.ExtractOwned(in, dir, *own)
	} else {
		err = archive.Extract(in, dir)
	}
	if errors.Is(err, archive.ErrUnsafe) {
		return exitCode{5, err}
	}
	return err
}

// mkdirOwned makes dir and its missing parents, those it makes owned by
// own when set.
func mkdirOwned(dir string, own *archive.Owner) error {
	if own == nil {
		return os.MkdirAll(dir, 0o755)
	}
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirOwned(parent, own); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return os.Lchown(dir, own.UID, own.GID)
}

// get writes a file or folder as a tar stream, named by its base name.
func get(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: warden get PATH")
	}
	p := filepath.Clean(args[0])
	if _, err := os.Lstat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return exitCode{3, err}
		}
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	tw := tar.NewWriter(w)
	if err := archive.Pack(tw, p, filepath.Dir(p)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return w.Flush()
}

// read writes at most n bytes of a file, following links as any reader
// would (with -nofollow, not a link as the path itself), and reports the
// file's size on stderr. It never blocks on opening: a FIFO or a device
// someone left at the path reads as empty, as in the engine's archive.
func read(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.rest) != 2 || f.argv != nil {
		return errors.New("usage: warden read [-nofollow] PATH N")
	}
	p := f.rest[0]
	n, err := strconv.ParseInt(f.rest[1], 10, 64)
	if err != nil || n < 0 {
		return errors.New("read: N must be a byte count")
	}
	flag := os.O_RDONLY | syscall.O_NONBLOCK
	if f.nofollow {
		flag |= syscall.O_NOFOLLOW
	}
	file, err := os.OpenFile(p, flag, 0)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return exitCode{3, err}
		case f.nofollow && errors.Is(err, syscall.ELOOP):
			return exitCode{6, fmt.Errorf("%s is a link", p)}
		}
		return err
	}
	defer file.Close()
	st, err := file.Stat()
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
	fmt.Fprintf(os.Stderr, "size %d\n", st.Size())
	_, err = io.Copy(os.Stdout, io.LimitReader(file, n))
	return err
}
