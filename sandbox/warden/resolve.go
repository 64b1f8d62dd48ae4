//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox/archive"
)

// The host's root file operations (put -user, get -engine, read -engine)
// run as root in the container's own mount namespace and find paths as
// the engine's archive API finds them: links are followed in that
// namespace, where the plugin's private folders are not mounted, and
// nothing is found on the container's /proc, which the engine sees empty.
// There, /proc/PID/root, cwd and fd lead into the namespaces of the
// plugin's processes, the private folders included, and /proc/PID/environ
// says what they run with. Each step of a walk opens one name relative to
// the folder the step before opened, so nothing renamed meanwhile leads it
// elsewhere.

// maxLinks is how many links a walk follows, as the kernel does.
const maxLinks = 40

// walk opens p, an absolute path, as O_PATH, one name at a time from /.
// Links are followed (the last name's only with followLast), never onto
// the container's /proc. With own set, missing folders are made, owned by
// own.
func walk(p string, followLast bool, own *archive.Owner) (*os.File, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%s is not an absolute path", p)
	}
	cur, err := openAt(unix.AT_FDCWD, "/")
	if err != nil {
		return nil, err
	}
	fail := func(op string, err error) (*os.File, error) {
		cur.Close()
		return nil, &fs.PathError{Op: op, Path: p, Err: err}
	}
	names := strings.Split(p, "/")
	links := 0
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		if name == "" || name == "." {
			continue
		}
		next, err := openAt(int(cur.Fd()), name)
		made := false
		if errors.Is(err, unix.ENOENT) && own != nil {
			if err = unix.Mkdirat(int(cur.Fd()), name, 0o755); err == nil || err == unix.EEXIST {
				made = err == nil
				next, err = openAt(int(cur.Fd()), name)
			}
		}
		if err != nil {
			return fail("open", unwrapPath(err))
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(next.Fd()), &st); err != nil {
			next.Close()
			return fail("stat", err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK && (len(names) > 0 || followLast) {
			target, err := readlink(next)
			next.Close()
			switch {
			case made:
				return fail("mkdir", errors.New("the folder just made was replaced by a link"))
			case err != nil:
				return fail("readlink", err)
			case links == maxLinks:
				return fail("open", unix.ELOOP)
			}
			links++
			if filepath.IsAbs(target) {
				cur.Close()
				if cur, err = openAt(unix.AT_FDCWD, "/"); err != nil {
					return nil, err
				}
			}
			names = append(strings.Split(target, "/"), names...)
			continue
		}
		if onProc(next) {
			next.Close()
			cur.Close()
			return nil, exitCode{3, fmt.Errorf("%s: not found in the container's own view (its /proc is empty there)", p)}
		}
		if made {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				next.Close()
				return fail("mkdir", errors.New("the folder just made was replaced"))
			}
			if err := unix.Fchownat(int(next.Fd()), "", own.UID, own.GID, unix.AT_EMPTY_PATH); err != nil {
				next.Close()
				return fail("chown", err)
			}
		}
		cur.Close()
		cur = next
	}
	return cur, nil
}

// openAt opens name in the folder dirfd as O_PATH, a link as the link.
func openAt(dirfd int, name string) (*os.File, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readlink reads the link f was opened as (O_PATH|O_NOFOLLOW).
func readlink(f *os.File) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(f.Fd()), "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// onProc reports whether f lies on a proc file system: the container's
// /proc, or one mounted elsewhere.
func onProc(f *os.File) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(int(f.Fd()), &st) != nil || st.Type == unix.PROC_SUPER_MAGIC
}

// fdPath names an open file by its descriptor, for calls that take a path.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }
