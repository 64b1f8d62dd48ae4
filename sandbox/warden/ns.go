//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// plugin runs the plugin's shell in a mount namespace of its own where the
// private folders are fresh tmpfs mounts no other namespace sees.
func plugin(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.argv) == 0 {
		return errors.New("plugin: no command")
	}
	cred, err := credential(f.user)
	if err != nil {
		return err
	}
	// Namespaces and mounts belong to the thread that makes them; the
	// command is forked from that same thread.
	runtime.LockOSThread()
	if err := seal(); err != nil {
		return err
	}
	for _, d := range f.private {
		if _, err := privateChain(d); err != nil {
			return err
		}
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w (the sandbox needs CAP_SYS_ADMIN in its bounding set)", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	for _, d := range f.private {
		if err := mountTmpfs(d, f.size, cred); err != nil {
			return err
		}
	}
	// The shell runs the image's programs, the tests among them, which
	// the agent may have replaced: it gets no CAP_SYS_ADMIN, and neither
	// does this process, which stays root (and traceable by root) so that
	// Seal's `warden remount -ns TID` may join the namespace this thread
	// holds for as long as the shell lives.
	if err := dropAdmin(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "@@PROCTOR NS %d\n", unix.Gettid())
	return run(f.argv, cred)
}

// seal makes Dir read-only in the caller's mount namespace, so nothing in
// the sandbox can replace the warden that later commands run as root.
func seal() error {
	if _, err := os.Stat(Dir); err != nil {
		return nil
	}
	if err := unix.Mount(Dir, Dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("seal %s: %w", Dir, err)
	}
	if err := unix.Mount("", Dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("seal %s read-only: %w", Dir, err)
	}
	return nil
}

// mountTmpfs mounts an empty tmpfs owned by the user the shell runs as.
func mountTmpfs(dir string, sizeMiB int64, cred *syscall.Credential) error {
	opts := "mode=0755"
	if sizeMiB > 0 {
		opts += fmt.Sprintf(",size=%dm", sizeMiB)
	}
	if cred != nil {
		opts += fmt.Sprintf(",uid=%d,gid=%d", cred.Uid, cred.Gid)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount private tmpfs on %s: %w", dir, err)
	}
	return nil
}

// remount gives each folder a fresh empty tmpfs: whatever was mounted there
// in this namespace is detached first.
func remount(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	cred, err := credential(f.user)
	if err != nil {
		return err
	}
	if f.ns != 0 {
		// Join the plugin's mount namespace. A Go thread shares its
		// file-system context with the others, which setns refuses for
		// mount namespaces, so this thread gets a context of its own.
		runtime.LockOSThread()
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", f.ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the namespace of %d: %w", f.ns, err)
		}
		defer unix.Close(fd)
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare fs: %w", err)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("join the namespace of %d: %w", f.ns, err)
		}
	}
	for _, d := range f.rest {
		if err := unix.Unmount(d, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := mountTmpfs(d, f.size, cred); err != nil {
			return err
		}
	}
	return nil
}

// run forks argv from the calling (locked) thread, passes on the standard
// streams and exits with its status.
func run(argv []string, cred *syscall.Credential) error {
	path, err := lookPath(argv[0])
	if err != nil {
		return err
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Credential: cred},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	// The child shares this process's memory until it execs, so its
	// switch to another user made this process undumpable too, and with
	// it its namespaces unreachable even for root. Undo that.
	unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	os.Exit(status(ws))
	return nil
}

func status(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// lookPath finds a command the way a shell would, without os/exec's
// dependence on the current directory.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH", name)
}

// agent starts the agent's namespace init and says its pid before the
// agent's shell runs.
func agent(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.argv) == 0 {
		return errors.New("agent: no command")
	}
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	initArgs := append([]string{self, "agent-init"}, args...)
	pid, err := syscall.ForkExec(self, initArgs, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2, r.Fd()},
		Sys:   &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS},
	})
	r.Close()
	if err != nil {
		return fmt.Errorf("start the agent's namespaces: %w (the sandbox needs CAP_SYS_ADMIN in its bounding set)", err)
	}
	// From here this process only waits, in the container's namespaces,
	// where the plugin's shell (the image's programs) sees it: it keeps
	// nothing it no longer needs, and cannot be traced.
	if err := dropAdmin(); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return err
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	fmt.Fprintf(os.Stdout, "@@PROCTOR NS %d\n", pid)
	w.Write([]byte{1})
	w.Close()
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	os.Exit(status(ws))
	return nil
}

// agentInit is PID 1 of the agent's namespace: it sets up the agent's view,
// drops CAP_SYS_ADMIN, starts the shell and reaps orphans until the shell
// and every process left behind are gone.
func agentInit(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	sync := os.NewFile(3, "sync")
	var b [1]byte
	sync.Read(b[:])
	sync.Close()

	runtime.LockOSThread()
	// An init ignores what it does not handle; the agent can still end
	// its own shell, never the init that keeps its services alive.
	ignoreSignals()
	cred, err := credential(f.user)
	if err != nil {
		return err
	}
	if err := agentView(f.private); err != nil {
		return err
	}
	// The init is in the agent's reach (its PID 1): before the agent's
	// first command it holds exactly what the agent's shell will, on
	// every thread, and cannot be traced (not dumpable).
	if err := dropAdmin(); err != nil {
		return err
	}
	if err := become(cred); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	path, err := lookPath(f.argv[0])
	if err != nil {
		return err
	}
	shell, err := syscall.ForkExec(path, f.argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", f.argv[0], err)
	}
	code := 0
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// ECHILD: the shell and everything it left behind are gone.
			os.Exit(code)
		}
		if pid == shell {
			code = status(ws)
		}
	}
}

// agentView makes the agent's mount namespace: its own mounts, the
// warden's folder sealed, the private folders' paths pinned (pin) and a
// /proc of its PID namespace.
func agentView(private []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := seal(); err != nil {
		return err
	}
	if err := pin(private); err != nil {
		return err
	}
	return newProc()
}

// The /proc paths a container engine hides or makes read-only (Docker's
// defaults); the new /proc hides them as well as whatever else the old one
// hid.
var (
	maskedProc   = []string{"asound", "acpi", "interrupts", "kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "scsi"}
	readonlyProc = []string{"bus", "fs", "irq", "sys", "sysrq-trigger"}
)

// newProc mounts a procfs for the new PID namespace over /proc, so the
// agent's ps and kill see its own processes by the numbers they have, and
// masks it as the container's /proc was masked.
func newProc() error {
	masked, readonly := procMounts()
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, p := range readonly {
		full := "/proc/" + p
		if _, err := os.Lstat(full); err != nil {
			continue
		}
		if err := unix.Mount(full, full, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", full, err)
		}
		if err := unix.Mount("", full, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", full, err)
		}
	}
	for _, p := range masked {
		full := "/proc/" + p
		st, err := os.Lstat(full)
		if err != nil {
			continue
		}
		if st.IsDir() {
			err = unix.Mount("tmpfs", full, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
		} else {
			err = unix.Mount("/dev/null", full, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", full, err)
		}
	}
	return nil
}

// procMounts lists the paths under /proc to mask and to make read-only: the
// engine defaults plus what the current mount table shows (a bind of a
// file or folder that is not procfs hides it; a procfs bind was made
// read-only).
func procMounts() (masked, readonly []string) {
	seen := map[string]bool{}
	add := func(list *[]string, p string) {
		if !seen[p] {
			seen[p] = true
			*list = append(*list, p)
		}
	}
	for _, p := range readonlyProc {
		add(&readonly, p)
	}
	for _, p := range maskedProc {
		add(&masked, p)
	}
	fh, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return masked, readonly
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		mp := unescape(f[4])
		rel, ok := strings.CutPrefix(mp, "/proc/")
		if !ok || rel == "" {
			continue
		}
		sep := 6
		for sep < len(f) && f[sep] != "-" {
			sep++
		}
		if sep+1 >= len(f) {
			continue
		}
		if f[sep+1] == "proc" {
			add(&readonly, rel)
		} else {
			add(&masked, rel)
		}
	}
	return masked, readonly
}

// unescape decodes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// killGroup kills a process group of the agent's namespace. Group ids
// there are the namespace's own; /proc/PID/status gives each process's
// group in every namespace it is in (NSpgid) and its parent (PPid), and
// anyone may read it, whoever owns the process (the namespace links under
// /proc/PID/ns would need CAP_SYS_PTRACE for another user's processes). A
// process is in the namespace when its parents lead to the namespace's
// init, which every process there descends from (orphans are its own).
func killGroup(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: warden kill NSINIT PGID")
	}
	initPid, err1 := strconv.Atoi(args[0])
	pgid, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || initPid < 2 || pgid < 2 {
		return errors.New("kill: want two process ids above 1")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", initPid)); err != nil {
		return fmt.Errorf("agent namespace init %d: %w", initPid, err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	procs := map[int]procStatus{}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if st, ok := readStatus(pid); ok {
				procs[pid] = st
			}
		}
	}
	killed := map[int]bool{}
	for pid, st := range procs {
		if pid == initPid || st.innerPgid != pgid || killed[st.outerPgid] || st.outerPgid < 2 || !descends(procs, pid, initPid) {
			continue
		}
		killed[st.outerPgid] = true
		_ = syscall.Kill(-st.outerPgid, syscall.SIGKILL)
	}
	return nil
}

// procStatus is what killGroup needs of /proc/PID/status.
type procStatus struct {
	ppid                 int
	outerPgid, innerPgid int
}

// readStatus reads a process's parent and its group as the outermost and
// the innermost PID namespaces number it.
func readStatus(pid int) (procStatus, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStatus{}, false
	}
	var st procStatus
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "PPid:"); ok {
			st.ppid, _ = strconv.Atoi(strings.TrimSpace(rest))
			found++
		}
		if rest, ok := strings.CutPrefix(line, "NSpgid:"); ok {
			f := strings.Fields(rest)
			if len(f) < 2 {
				return procStatus{}, false // not in a namespace below ours
			}
			o, e1 := strconv.Atoi(f[0])
			i, e2 := strconv.Atoi(f[len(f)-1])
			if e1 != nil || e2 != nil {
				return procStatus{}, false
			}
			st.outerPgid, st.innerPgid = o, i
			found++
		}
	}
	return st, found == 2
}

// descends reports whether pid's parents lead to ancestor.
func descends(procs map[int]procStatus, pid, ancestor int) bool {
	for range 4096 {
		st, ok := procs[pid]
		if !ok || st.ppid < 1 {
			return false
		}
		if st.ppid == ancestor {
			return true
		}
		pid = st.ppid
	}
	return false
}
