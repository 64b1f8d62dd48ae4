package docker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// usage counts what a container wrote: the disk blocks and the entries
// (files, folders, links) under its upper layer. It walks by file
// descriptor, each name opened relative to its folder's descriptor, so
// no path is ever built and no path length can hide a file; a folder it
// cannot open or an entry it cannot stat is an error (the watchdog counts
// it as over the limit), except an entry that vanished meanwhile. It stops
// as soon as either count is over its limit.
type usage struct {
	blocks, inodes      int64 // bytes in blocks, entries
	maxBytes, maxInodes int64 // stop once over either
	seen                map[uint64]bool
	buf                 []byte
}

// maxWalkDepth bounds how deep the walk goes: it holds a descriptor per
// level. A tree deeper than this is one it cannot count.
const maxWalkDepth = 512

// errOver stops a walk once a count is over its limit.
var errOver = errors.New("over the limit")

// measure walks dir; over says a count went past its limit (the walk
// stopped there).
func measure(dir string, maxBytes, maxInodes int64) (u usage, over bool, err error) {
	u = usage{maxBytes: maxBytes, maxInodes: maxInodes, seen: map[uint64]bool{}, buf: make([]byte, 64<<10)}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return u, false, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return u, false, err
	}
	u.blocks, u.inodes = st.Blocks*512, 1
	err = u.dir(fd, 1)
	if errors.Is(err, errOver) {
		return u, true, nil
	}
	return u, false, err
}

// dir counts the entries of the folder open at fd, then walks its
// subfolders.
func (u *usage) dir(fd, depth int) error {
	if depth > maxWalkDepth {
		return fmt.Errorf("folders nested over %d deep", maxWalkDepth)
	}
	var subdirs []string
	for {
		n, err := unix.Getdents(fd, u.buf)
		if err != nil {
			return fmt.Errorf("read a folder: %w", err)
		}
		if n == 0 {
			break
		}
		for b := u.buf[:n]; len(b) > 0; {
			name, typ, rest, ok := dirent(b)
			if !ok {
				return errors.New("a folder's entries do not parse")
			}
			b = rest
			if name == "." || name == ".." {
				continue
			}
			dir, err := u.entry(fd, name, typ)
			if err != nil {
				return err
			}
			if dir {
				subdirs = append(subdirs, name)
			}
		}
	}
	for _, name := range subdirs {
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
			continue // gone, or swapped for a file or a link: counted as it was
		}
		if err != nil {
			return fmt.Errorf("open a folder: %w", err)
		}
		err = u.dir(sub, depth+1)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// entry counts one entry of the folder at fd; dir says it is a folder to
// walk.
func (u *usage) entry(fd int, name string, typ uint8) (dir bool, err error) {
	u.inodes++
	if u.inodes > u.maxInodes {
		return false, errOver
	}
	switch typ {
	case unix.DT_CHR, unix.DT_BLK, unix.DT_FIFO, unix.DT_SOCK:
		return false, nil // an inode without data blocks (an overlay whiteout, say)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			u.inodes--
			return false, nil
		}
		return false, fmt.Errorf("stat an entry: %w", err)
	}
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if u.seen[st.Ino] {
			return false, nil
		}
		u.seen[st.Ino] = true
	}
	u.blocks += st.Blocks * 512
	if u.blocks > u.maxBytes {
		return false, errOver
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}

// dirent parses the first linux_dirent64 of b: its name and type, and
// what follows it.
func dirent(b []byte) (name string, typ uint8, rest []byte, ok bool) {
	const nameOff = 19 // ino 8, off 8, reclen 2, type 1
	if len(b) < nameOff {
		return "", 0, nil, false
	}
	reclen := int(binary.NativeEndian.Uint16(b[16:18]))
	if reclen < nameOff || reclen > len(b) {
		return "", 0, nil, false
	}
	n := nameOff
	for n < reclen && b[n] != 0 {
		n++
	}
	return string(b[nameOff:n]), b[18], b[reclen:], true
}

// fsUse is what the file system holding dir has in use, in bytes and
// inodes: one statfs, which tells the watchdog when a walk is worth it.
func fsUse(dir string) (bytes, inodes int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Files - st.Ffree), nil
}

// threadCPU is the CPU time the calling thread has used (the watchdog's
// goroutine is locked to its thread).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
