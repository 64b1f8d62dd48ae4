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
// would, and reports the file's size on stderr.
func read(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: warden read PATH N")
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || n < 0 {
		return errors.New("read: N must be a byte count")
	}
	f, err := os.Open(args[0])
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return exitCode{3, err}
		}
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return exitCode{4, fmt.Errorf("%s is a directory", args[0])}
	}
	fmt.Fprintf(os.Stderr, "size %d\n", st.Size())
	_, err = io.Copy(os.Stdout, io.LimitReader(f, n))
	return err
}
