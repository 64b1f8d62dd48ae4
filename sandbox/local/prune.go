package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pruneWait bounds how long a prune waits for the processes it found to
// end: a process the kernel does not let go of (one in uninterruptible
// I/O, one proctor may not signal) is named in its error instead.
const pruneWait = time.Minute

// Prune removes what killed runs left behind: the folders of local
// sandboxes (of one run when runID is set), their cgroups, and every
// process started in them, including those that left their process group
// (see endProcesses). It returns how many sandboxes it removed. The folder
// of a sandbox with a process it could not end stays, so that a later
// prune finds that process again, and the error names it.
func (Backend) Prune(ctx context.Context, runID string) (int, error) {
	pattern := prefix + "*"
	if runID != "" {
		pattern = prefix + safeLabel(runID) + "-*"
	}
	roots, err := filepath.Glob(filepath.Join(os.TempDir(), pattern))
	if err != nil {
		return 0, err
	}
	var errs []error
	var left []string
	for _, root := range roots {
		if st, err := os.Stat(filepath.Join(root, "state")); err != nil || !st.IsDir() {
			continue // not a sandbox's folder
		}
		if !ofRun(root, runID) {
			continue // another run's, whose id starts the same
		}
		if cg := recordedCgroup(root); cg != "" {
			if err := removeCgroup(ctx, cg); err != nil {
				errs = append(errs, err)
			}
		}
		left = append(left, root)
	}
	// Processes of sandboxes without a cgroup, or that left it.
	wctx, cancel := context.WithTimeout(ctx, pruneWait)
	defer cancel()
	kept, err := endProcesses(wctx, left)
	errs = append(errs, err)
	n := 0
	for _, root := range left {
		if kept[root] {
			continue
		}
		if err := os.RemoveAll(root); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ofRun reports whether the sandbox in root belongs to the run runID (to
// any run when it is empty). The folder's name holds the id only in part;
// the file runFile holds it whole, where a sandbox has one.
func ofRun(root, runID string) bool {
	if runID == "" {
		return true
	}
	b, err := os.ReadFile(filepath.Join(root, runFile))
	return err != nil || string(b) == runID
}

// endProcesses ends every process of the sandboxes' folders roots: each
// whose initial environment carries a root's marker, and each descendant
// of one, whatever its environment. One look at /proc is not enough on a
// busy host: a process forks or execs while it is read, and one in an
// exec shows no environment at all. So each process found is stopped at
// once (stopped, it neither forks nor execs, and its children keep it as
// their parent), /proc is read again until a whole pass finds no process
// it had not stopped and none in the middle of an exec, and only then are
// they all killed, and /proc read until none is alive.
//
// It returns the roots whose processes it could not end by ctx's deadline
// (all of them when it could not tell whose a process is) and an error
// that names those processes. A process that neither carries the marker
// nor has a live parent that does (one started with `env -i` whose parent
// has exited) is out of its reach: a sandbox's cgroup is what finds those.
func endProcesses(ctx context.Context, roots []string) (map[string]bool, error) {
	if len(roots) == 0 {
		return nil, nil
	}
	sc := newScanner(roots)
	found := map[proc]int{} // every process found, and its root
	killing := false
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		s, err := sc.scan(found)
		if err != nil {
			return keepAll(roots), fmt.Errorf("local sandboxes: find their processes: %w", err)
		}
		if len(s.ours) == 0 && len(s.unsure) == 0 {
			return nil, nil
		}
		fresh := 0
		for p, root := range s.ours {
			if _, seen := found[p]; !seen {
				found[p] = root
				fresh++
				signal(p, syscall.SIGSTOP)
			}
		}
		switch {
		case fresh > 0:
			killing = false // stop what they started first
			continue
		case !killing && len(s.unsure) == 0:
			// All are stopped: none can start another.
			killing = true
		}
		if killing {
			for p := range s.ours {
				signal(p, syscall.SIGKILL)
			}
		}
		if ctx.Err() != nil {
			return survivors(roots, s, ctx.Err())
		}
		sleep(ctx, delay)
	}
}

// survivors names what a prune could not end.
func survivors(roots []string, s scan, cause error) (map[string]bool, error) {
	kept := map[string]bool{}
	var errs []error
	if len(s.unsure) > 0 {
		kept = keepAll(roots)
		errs = append(errs, fmt.Errorf("local sandboxes: processes %v were in an exec each time they were read: it is unknown whether they are a sandbox's (%w)", s.unsure, cause))
	}
	byRoot := map[int][]int{}
	for p, root := range s.ours {
		byRoot[root] = append(byRoot[root], p.pid)
	}
	for root, pids := range byRoot {
		slices.Sort(pids)
		kept[roots[root]] = true
		errs = append(errs, fmt.Errorf("local sandbox %s: processes %v did not end (%w); end them, then run proctor sandbox prune again", roots[root], pids, cause))
	}
	return kept, errors.Join(errs...)
}

func keepAll(roots []string) map[string]bool {
	kept := make(map[string]bool, len(roots))
	for _, r := range roots {
		kept[r] = true
	}
	return kept
}

// A proc is one process: its id and its start time, which together never
// name another process, while an id alone is reused.
type proc struct {
	pid   int
	start uint64
}

// signal sends sig to p and to no other process: through a pidfd, opened
// before the start time is checked, so an id reused in between is never
// signalled.
func signal(p proc, sig syscall.Signal) {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, syscall.ENOSYS) { // before Linux 5.3
		if st, err := readStat(p.pid); err == nil && st.start == p.start {
			_ = syscall.Kill(p.pid, sig)
		}
		return
	}
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if st, err := readStat(p.pid); err == nil && st.start == p.start {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// A scan is one pass over /proc.
type scan struct {
	ours   map[proc]int // the roots' live processes, and the root of each
	unsure []int        // processes met in an exec each time they were read
}

// scanner reads /proc for the processes of a set of sandboxes' folders.
type scanner struct {
	markers [][]byte // the marker of each root, as it reads in an environ file
	self    int
	// cleared: processes once read outside an exec without a marker. An
	// exec does not give one the marker (only a process that knows the
	// sandbox's folder would pass it on), so meeting it in an exec later
	// leaves no doubt: other processes of a busy host that exec without
	// end do not hold a prune up.
	cleared map[proc]bool
}

func newScanner(roots []string) *scanner {
	sc := &scanner{self: os.Getpid(), cleared: map[proc]bool{}}
	for _, root := range roots {
		sc.markers = append(sc.markers, []byte("\x00"+markerVar+"="+root+"\x00"))
	}
	return sc
}

// scan reads every process once: those found before (by id and start
// time) and those whose environment carries a marker are the roots', and
// so is every live descendant of one.
func (sc *scanner) scan(found map[proc]int) (scan, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return scan{}, err
	}
	s := scan{ours: map[proc]int{}}
	stats := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sc.self {
			continue
		}
		st, root, unsure, ok := sc.examine(pid)
		if !ok {
			continue
		}
		stats[pid] = st
		if r, seen := found[st.proc]; seen {
			root = r
		}
		switch {
		case root >= 0:
			s.ours[st.proc] = root
		case !unsure:
			sc.cleared[st.proc] = true
		case !sc.cleared[st.proc]:
			s.unsure = append(s.unsure, pid)
		}
	}
	for grew := true; grew; {
		grew = false
		for _, st := range stats {
			if _, ok := s.ours[st.proc]; ok {
				continue
			}
			if parent, ok := stats[st.ppid]; ok {
				if root, ok := s.ours[parent.proc]; ok {
					s.ours[st.proc] = root
					grew = true
				}
			}
		}
	}
	s.unsure = slices.DeleteFunc(s.unsure, func(pid int) bool {
		_, ok := s.ours[stats[pid].proc]
		return ok
	})
	return s, nil
}

// examine reads process pid: its stat, and the root whose marker its
// environment carries (-1: none). ok is false for a process that is gone,
// dead, a kernel thread or not proctor's to read. unsure: each read met it
// in an exec, between its old environment and its new one.
func (sc *scanner) examine(pid int) (st procStat, root int, unsure, ok bool) {
	for range 3 {
		var err error
		if st, err = readStat(pid); err != nil || st.dead() {
			return st, -1, false, false
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			return st, -1, false, false
		}
		env = append([]byte{0}, env...)
		for i, m := range sc.markers {
			if bytes.Contains(env, m) {
				return st, i, false, true
			}
		}
		if st.inExec() {
			continue
		}
		// The environment read is this image's unless an exec came
		// between: the image's addresses then differ.
		if after, err := readStat(pid); err != nil || after.image == st.image {
			return st, -1, false, err == nil
		}
	}
	return st, -1, true, true
}

// procStat is what a prune reads of a process in /proc/PID/stat.
type procStat struct {
	proc
	ppid    int
	state   byte
	kthread bool
	// startcode, startstack, env_start, env_end: each exec changes them.
	image    [4]uint64
	hasImage bool // before Linux 3.5, stat lacks them
}

// pfKthread is PF_KTHREAD, the flag of a kernel thread.
const pfKthread = 0x00200000

// dead: a zombie, or a kernel thread, which has no environment.
func (s procStat) dead() bool { return s.state == 'Z' || s.state == 'X' || s.kthread }

// inExec: the kernel has given the process its new memory but not yet its
// environment, so its environ file reads empty or in part: env_end is set
// after the environment's last string, start_code after that. Only where
// its environ file could be read: stat shows the addresses of no process
// proctor may not read.
func (s procStat) inExec() bool { return s.hasImage && (s.image[0] == 0 || s.image[3] == 0) }

// readStat reads /proc/PID/stat (proc(5)).
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	field := func(n int) uint64 { // proc(5) numbers fields from 1; f[0] is the 3rd
		if n-3 >= len(f) {
			return 0
		}
		v, _ := strconv.ParseUint(f[n-3], 10, 64)
		return v
	}
	if len(f) < 20 || f[0] == "" {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return procStat{
		proc:     proc{pid: pid, start: field(22)},
		ppid:     int(field(4)),
		state:    f[0][0],
		kthread:  field(9)&pfKthread != 0,
		image:    [4]uint64{field(26), field(28), field(50), field(51)},
		hasImage: len(f) >= 49,
	}, nil
}
