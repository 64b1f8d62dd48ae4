//go:build linux

package scale

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox/local"
)

// usage is what one proctor process cost, as the kernel counted it. A
// figure the kernel could not give is left unmeasured (ok false), and the
// table says so instead of printing a guess.
type usage struct {
	self, children time.Duration // proctor's own CPU; its reaped descendants' (the sandboxes')
	selfOK         bool
	cgroup         time.Duration // everything in the run's cgroup: proctor, sandboxes, orphans
	cgroupOK       bool
	peakRSS        int64 // bytes
}

// clockTick is the unit of the CPU times in /proc/PID/stat: USER_HZ,
// 100 on every Linux the kernel's ABI allows.
const clockTick = 10 * time.Millisecond

// runCounted runs cmd in a cgroup of its own when this process may make
// one (so that every process of the run, proctor, its sandboxes and
// whatever they leave behind, is counted), and reads its CPU times while
// it is a zombie: proctor's own apart from its children's.
func runCounted(cmd *exec.Cmd) (usage, error) {
	var u usage
	cg, cgErr := newRunCgroup()
	if cgErr == nil {
		defer cg.remove()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.fd.Fd())}
	}
	if err := cmd.Start(); err != nil {
		return u, err
	}
	// Wait for the exit without reaping: the zombie's stat still holds
	// its times, its own and its reaped children's apart.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	u.self, u.children, u.selfOK = zombieTimes(cmd.Process.Pid)
	err := cmd.Wait()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.peakRSS = ru.Maxrss * 1024
	}
	if cgErr == nil {
		u.cgroup, u.cgroupOK = cg.usage()
	}
	return u, err
}

// zombieTimes reads a dead, unreaped process's CPU time and its reaped
// children's from /proc/PID/stat.
func zombieTimes(pid int) (self, children time.Duration, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (field 3 is the state).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, false
	}
	var t [4]int64 // utime, stime, cutime, cstime: fields 14 to 17
	for k := range t {
		if t[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return time.Duration(t[0]+t[1]) * clockTick, time.Duration(t[2]+t[3]) * clockTick, true
}

// runCgroup is a cgroup (v2) made for one run, under this process's own.
type runCgroup struct {
	dir string
	fd  *os.File
}

func newRunCgroup() (*runCgroup, error) {
	own, err := local.OwnCgroup()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(own, fmt.Sprintf("proctor-bench-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &runCgroup{dir: dir, fd: fd}, nil
}

// usage is the CPU time of every process that ran in the cgroup or in
// one of its children, also those removed since.
func (c *runCgroup) usage() (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * time.Microsecond, err == nil
		}
	}
	return 0, false
}

// remove removes the cgroup, once whatever the run left in it is gone.
func (c *runCgroup) remove() {
	c.fd.Close()
	for range 100 {
		if err := os.Remove(c.dir); err == nil || !errors.Is(err, syscall.EBUSY) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadAvg is the machine's load average over the last minute.
func loadAvg() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}
