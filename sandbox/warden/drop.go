//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Go program has several threads before main runs, and capabilities,
// no_new_privs and the uids belong to each thread: a drop on the calling
// thread alone leaves the others holding what was dropped, and a process
// that can trace one thread can write code into the memory they all share.
// So every drop below is made on all threads at once (the runtime's
// AllThreadsSyscall; the warden is built without cgo, where it works), and
// threads made later are copies of a thread that dropped.

// capState is what capget and capset exchange; it lives outside any
// goroutine's stack, which may move, because every thread of the process
// reads it during AllThreadsSyscall.
var capState struct {
	hdr  unix.CapUserHeader
	data [2]unix.CapUserData
}

// dropAdmin removes CAP_SYS_ADMIN from the bounding, inheritable,
// permitted and effective sets of every thread, for good, under
// no_new_privs: no exec can get it back. The warden's shells run
// the image's programs, which the agent may have replaced; with the
// capability they could remount the warden's folder writable, or
// reach the host's kernel interfaces no sandbox should touch.
func dropAdmin() error {
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN); err != nil {
		return fmt.Errorf("drop CAP_SYS_ADMIN from the bounding set: %w", err)
	}
	capState.hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&capState.hdr, &capState.data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	bit := uint32(1) << (unix.CAP_SYS_ADMIN % 32)
	d := &capState.data[unix.CAP_SYS_ADMIN/32]
	d.Effective &^= bit
	d.Permitted &^= bit
	d.Inheritable &^= bit
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&capState.hdr)), uintptr(unsafe.Pointer(&capState.data[0]))); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// become makes every thread run as cred's user, groups and gid first (the
// runtime's Setgroups, Setgid and Setuid change all threads); leaving
// root clears the permitted and effective capabilities.
func become(cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	groups := make([]int, len(cred.Groups))
	for i, g := range cred.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(cred.Gid)); err != nil {
		return fmt.Errorf("setgid %d: %w", cred.Gid, err)
	}
	if err := syscall.Setuid(int(cred.Uid)); err != nil {
		return fmt.Errorf("setuid %d: %w", cred.Uid, err)
	}
	return nil
}

// allThreads makes a system call of up to three arguments on every thread.
func allThreads(trap uintptr, args ...uintptr) error {
	var a [3]uintptr
	copy(a[:], args)
	if _, _, e := syscall.AllThreadsSyscall(trap, a[0], a[1], a[2]); e != 0 {
		return e
	}
	return nil
}

// privateChain makes the folders on the path to the private folder d, d
// included, and returns them outermost first. Each must be a folder: the
// plugin's namespace finds its private folder by that path, so a link on
// it, which the agent could point elsewhere, is refused.
func privateChain(d string) ([]string, error) {
	var chain []string
	for p := filepath.Clean(d); p != "/" && p != "."; p = filepath.Dir(p) {
		chain = append(chain, p)
	}
	slices.Reverse(chain)
	for _, p := range chain {
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if err = os.Mkdir(p, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
				st, err = os.Lstat(p)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("private folder %s: %w", d, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("private folder %s: %s is not a folder but a %s: the task's image must not have one there", d, p, typeName(st.Mode()))
		}
	}
	return chain, nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "link"
	case m.IsRegular():
		return "file"
	}
	return "special file"
}

// pin makes each private folder, and every folder on its path, a mount
// point of the caller's mount namespace (a bind of itself), before the
// agent's first command. The kernel detaches a mount whose mount point is
// renamed or removed from a namespace where it is not one: were the
// agent free to rename /logs/verifier (or /logs) away and put a folder of
// its own in its place, the plugin's private tmpfs there would be gone
// from the plugin's namespace, and the verifier would read and run what
// the agent left. A mount point of the caller's own namespace cannot be
// renamed, removed or replaced (EBUSY), and the agent, without
// CAP_SYS_ADMIN, cannot unmount it: the verifier's folders keep the
// identity the plugin's namespace gave them, whatever the agent's
// processes do while the tests run.
func pin(dirs []string) error {
	pinned := map[string]bool{}
	for _, d := range dirs {
		chain, err := privateChain(d)
		if err != nil {
			return err
		}
		for _, p := range chain {
			if pinned[p] {
				continue
			}
			pinned[p] = true
			if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("pin %s: %w", p, err)
			}
		}
	}
	return nil
}

// ignoreSignals ignores every signal that could end a Go process sent by
// another (the runtime turns a SIGSEGV, SIGABRT or SIGSYS sent with kill
// into a crash), leaving those the runtime and the reaping need: an
// init must not end because its namespace asked it to.
func ignoreSignals() {
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF, 32, 33:
			continue
		}
		signal.Ignore(s)
	}
}
