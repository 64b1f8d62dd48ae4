package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A local sandbox's processes are tracked by a cgroup (version 2) of its
// own where proctor may make one: its shell is cloned straight into it, so
// everything the sandbox starts is in it, also what leaves its process
// group with setsid, and Close kills them all with one write to
// cgroup.kill, whatever else runs on the host. Where no cgroup can be made
// (no cgroup2 mount, no write access to proctor's own cgroup, a kernel
// before 5.7), the sandbox falls back to the process groups its shell
// started (see Sandbox.Close).

// cgroupFile, in a sandbox's folder, names its cgroup, so that Prune, in
// another process, finds it.
const cgroupFile = "cgroup"

// cgroups is where this process makes sandboxes' cgroups: its own cgroup,
// the one place it may move processes into children of, when it can.
var cgroups struct {
	once   sync.Once
	parent string // "" when cgroups are not to be used
	mu     sync.Mutex
	off    bool // set when the kernel refused to clone into one
}

// cgroupParent returns the folder new cgroups go in, or "".
func cgroupParent() string {
	cgroups.once.Do(func() {
		dir, err := OwnCgroup()
		if err == nil {
			err = syscall.Access(dir, 2 /* W_OK */)
		}
		if err != nil {
			return
		}
		cgroups.parent = dir
	})
	cgroups.mu.Lock()
	defer cgroups.mu.Unlock()
	if cgroups.off {
		return ""
	}
	return cgroups.parent
}

// disableCgroups stops using cgroups in this process: the kernel would
// not clone into one.
func disableCgroups() {
	cgroups.mu.Lock()
	cgroups.off = true
	cgroups.mu.Unlock()
}

// OwnCgroup is the folder of this process's cgroup in the cgroup2
// hierarchy: its path from /proc/self/cgroup under the mount point of
// cgroup2 from /proc/self/mountinfo.
func OwnCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return "", errors.New("no cgroup2 hierarchy")
	}
	mount, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(own, root)
	if !ok {
		return "", fmt.Errorf("own cgroup %s is outside the mounted %s", own, root)
	}
	return filepath.Join(mount, rel), nil
}

// cgroup2Mount finds where the cgroup2 hierarchy is mounted and which of
// its folders the mount shows.
func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 1 || tail[0] != "cgroup2" {
			continue
		}
		return unescapeMount(fields[4]), unescapeMount(fields[3]), nil
	}
	return "", "", errors.New("no cgroup2 mount")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroup is one sandbox's cgroup.
type cgroup struct {
	dir string
	fd  *os.File // the folder, open for clone3's CLONE_INTO_CGROUP
}

// newCgroup makes the cgroup name under parent.
func newCgroup(parent, name string) (*cgroup, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// release closes the folder once the shell is in the cgroup.
func (c *cgroup) release() {
	if c.fd != nil {
		c.fd.Close()
		c.fd = nil
	}
}

// remove kills every process in the cgroup, waits until none is left,
// and removes it.
func (c *cgroup) remove(ctx context.Context) error {
	c.release()
	return removeCgroup(ctx, c.dir)
}

// removeCgroup kills the processes of the cgroup dir and removes it; one
// already gone is fine.
func removeCgroup(ctx context.Context, dir string) error {
	if err := killCgroup(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := awaitEmpty(ctx, dir); err != nil {
		return err
	}
	for delay := time.Millisecond; ; delay *= 2 {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		// EBUSY while the last process is still on its way out.
		if !errors.Is(err, syscall.EBUSY) || ctx.Err() != nil {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		sleep(ctx, delay)
	}
}

// killCgroup kills every process in the cgroup dir: cgroup.kill where the
// kernel has it (5.14), else freezing it and killing each process listed.
func killCgroup(dir string) error {
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, serr := os.Stat(dir); serr != nil {
		return serr
	}
	return killEach(dir)
}

// killEach kills the processes of a frozen cgroup one by one, until none
// is listed: frozen, none can fork meanwhile, and SIGKILL still reaches
// them.
func killEach(dir string) error {
	freeze := filepath.Join(dir, "cgroup.freeze")
	if err := os.WriteFile(freeze, []byte("1"), 0); err != nil {
		return err
	}
	defer os.WriteFile(freeze, []byte("0"), 0)
	for range 100 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("cgroup %s: processes keep appearing", dir)
}

// awaitEmpty waits until no process of the cgroup dir is alive.
func awaitEmpty(ctx context.Context, dir string) error {
	for delay := 500 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "populated 0") {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cgroup %s: processes still alive: %w", dir, ctx.Err())
		}
		sleep(ctx, delay)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// recordedCgroup is the cgroup a sandbox's folder names, when it is one
// proctor made for that folder: a cgroup2 folder named as the sandbox's
// folder. Anything else (the file was never written, or something in the
// sandbox rewrote it) gives "".
func recordedCgroup(root string) string {
	b, err := os.ReadFile(filepath.Join(root, cgroupFile))
	if err != nil {
		return ""
	}
	dir := filepath.Clean(strings.TrimSpace(string(b)))
	if !filepath.IsAbs(dir) || filepath.Base(dir) != filepath.Base(root) {
		return ""
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type != cgroup2Magic {
		return ""
	}
	return dir
}

// cgroup2Magic is the file system type of cgroup2 (CGROUP2_SUPER_MAGIC).
const cgroup2Magic = 0x63677270
