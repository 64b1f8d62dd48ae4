package rundir

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LocksDir is the folder of a run directory that holds its lock files.
const LocksDir = "locks"

// A run directory has one writer (proctor eval, process) and any number of
// readers (report, view, export). Each holder of a lock keeps a small file
// in locks/ that names it: the command, its pid, its host, when it took the
// lock. The model is restic's: a holder first writes its own file, then
// lists the others; of two writers that start together, at least one sees
// the other and refuses (both may; neither writes).
//
// Unlike restic's exclusive lock, a writer's does not shut readers out: a
// writer only appends whole lines to results.jsonl and replaces other files
// whole, so a reader sees the run as far as it got (proctor view follows a
// live run). An exclusive lock shuts out the other writers; shared locks
// say who reads, so a reader can tell that the run is still being written.
//
// A lock is stale, and taken over, when its process is gone: on this host,
// when its pid is not running, or runs another program than the one that
// took the lock (a pid reused, told by the process's start time); on
// another host (a shared file system), when its file was not refreshed for
// StaleAfter. A holder refreshes its file every RefreshEvery.
const (
	RefreshEvery = 5 * time.Minute
	StaleAfter   = 30 * time.Minute
)

// maxLockFile bounds the read of a lock file: it is a few hundred bytes.
const maxLockFile = 64 << 10

// LockInfo is what a lock file says of its holder.
type LockInfo struct {
	Exclusive bool      `json:"exclusive"`
	Command   string    `json:"command"` // "eval", "report", ...
	PID       int       `json:"pid"`
	Host      string    `json:"host"`
	User      string    `json:"user,omitempty"`
	Time      time.Time `json:"time"` // when the lock was taken
	// ProcStart is the holder's start time in clock ticks since boot
	// (/proc/PID/stat), to tell its pid from the same pid reused; 0 where
	// proctor cannot read it.
	ProcStart uint64 `json:"proc_start,omitempty"`

	file    string    // the lock file's path, for messages
	touched time.Time // the file's modification time: its last refresh
}

// String names the holder for people: "proctor eval (pid 42 on host)".
func (li LockInfo) String() string {
	return fmt.Sprintf("proctor %s (pid %d on %s)", li.Command, li.PID, li.Host)
}

// File is the path of the holder's lock file.
func (li LockInfo) File() string { return li.file }

// HeldError is a lock refused because another process holds one that
// conflicts with it.
type HeldError struct {
	Dir    string
	Holder LockInfo
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("run directory %s is in use: %s has been writing to it since %s",
		e.Dir, e.Holder, e.Holder.Time.Local().Format("2006-01-02 15:04:05"))
}

// Lock is a lock on a run directory this process holds.
type Lock struct {
	dir  string
	path string // "" when held without a file (a read-only directory)
	info LockInfo
	// TakenOver are the stale locks removed to take this one.
	TakenOver []LockInfo

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// LockExclusive takes the writer's lock on the run directory dir (which
// must exist) for command; a *HeldError when another process writes to it.
func LockExclusive(dir, command string) (*Lock, error) { return lock(dir, command, true) }

// LockShared takes a reader's lock on dir for command. It never waits for
// the writer and is never refused by it; in a directory this process
// cannot write, the reader goes on without a lock file.
func LockShared(dir, command string) (*Lock, error) { return lock(dir, command, false) }

func lock(dir, command string, exclusive bool) (*Lock, error) {
	l := &Lock{dir: dir, info: self(command, exclusive), stop: make(chan struct{})}
	locks := filepath.Join(dir, LocksDir)
	if err := os.Mkdir(locks, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if !exclusive && readOnly(err) {
			return l, nil
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	// Stale locks first, so a crashed writer's lock does not stop us. A
	// reader is not stopped by a lock file it cannot read either.
	others, err := Locks(dir)
	if err != nil && exclusive {
		return nil, err
	}
	for _, o := range others {
		if o.Stale() {
			if err := os.Remove(o.file); err == nil || errors.Is(err, fs.ErrNotExist) {
				l.TakenOver = append(l.TakenOver, o)
			}
		}
	}
	if exclusive {
		if h, ok := liveWriter(others, ""); ok {
			return nil, &HeldError{Dir: dir, Holder: h}
		}
	}
	if err := l.write(); err != nil {
		if !exclusive && readOnly(err) {
			return l, nil
		}
		return nil, err
	}
	if exclusive {
		// Another writer may have written its file between our listing
		// and our write: look again, now that ours is there.
		others, err := Locks(dir)
		if err == nil {
			if h, ok := liveWriter(others, l.path); ok {
				err = &HeldError{Dir: dir, Holder: h}
			}
		}
		if err != nil {
			os.Remove(l.path)
			return nil, err
		}
	}
	l.wg.Add(1)
	go l.refresh()
	return l, nil
}

// liveWriter returns the first exclusive lock of others that is not stale
// and not the file mine.
func liveWriter(others []LockInfo, mine string) (LockInfo, bool) {
	for _, o := range others {
		if o.Exclusive && o.file != mine && !o.Stale() {
			return o, true
		}
	}
	return LockInfo{}, false
}

func readOnly(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// self describes this process as a lock holder.
func self(command string, exclusive bool) LockInfo {
	li := LockInfo{Exclusive: exclusive, Command: command, PID: os.Getpid(), Time: time.Now().UTC()}
	li.Host, _ = os.Hostname()
	if u, err := user.Current(); err == nil {
		li.User = u.Username
	}
	li.ProcStart, _ = procStart(li.PID)
	return li
}

// write writes the lock file whole: under a temporary name, then renamed,
// so no one reads half of it.
func (l *Lock) write() error {
	var id [6]byte
	rand.Read(id[:])
	kind := "shared"
	if l.info.Exclusive {
		kind = "exclusive"
	}
	path := filepath.Join(l.dir, LocksDir, fmt.Sprintf("%s-%d-%s.json", kind, l.info.PID, hex.EncodeToString(id[:])))
	b, _ := json.Marshal(l.info)
	if err := WriteFileAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("lock %s: %w", l.dir, err)
	}
	l.path = path
	return nil
}

// refresh touches the lock file every RefreshEvery, so other hosts do not
// take it for stale.
func (l *Lock) refresh() {
	defer l.wg.Done()
	t := time.NewTicker(RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			now := time.Now()
			os.Chtimes(l.path, now, now)
		}
	}
}

// Unlock removes the lock file; it may be called more than once.
func (l *Lock) Unlock() error {
	if l == nil {
		return nil
	}
	var err error
	l.once.Do(func() {
		close(l.stop)
		l.wg.Wait()
		if l.path != "" {
			if err = os.Remove(l.path); errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
			os.Remove(filepath.Join(l.dir, LocksDir)) // only when empty
		}
	})
	return err
}

// Locks lists the locks held on the run directory dir. A lock file that
// cannot be read as one is an error naming it: whether it stands for a
// live writer is unknown.
func Locks(dir string) ([]LockInfo, error) {
	locks := filepath.Join(dir, LocksDir)
	entries, err := os.ReadDir(locks)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	var out []LockInfo
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".json") {
			continue // a temporary file of a lock being written
		}
		path := filepath.Join(locks, e.Name())
		li, err := readLock(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, &BadLockError{Path: path, Err: err}
		}
		out = append(out, li)
	}
	return out, nil
}

// BadLockError is a lock file that cannot be read as one.
type BadLockError struct {
	Path string
	Err  error
}

func (e *BadLockError) Error() string {
	return fmt.Sprintf("lock file %s cannot be read: %v", e.Path, e.Err)
}

func (e *BadLockError) Unwrap() error { return e.Err }

func readLock(path string) (LockInfo, error) {
	var li LockInfo
	f, err := os.Open(path)
	if err != nil {
		return li, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return li, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxLockFile+1))
	if err != nil {
		return li, err
	}
	if len(b) > maxLockFile {
		return li, fmt.Errorf("over %d bytes: not a lock file", maxLockFile)
	}
	if err := json.Unmarshal(b, &li); err != nil {
		return li, err
	}
	if li.PID <= 0 {
		return li, errors.New("it names no pid")
	}
	li.file, li.touched = path, fi.ModTime()
	return li, nil
}

// Stale reports whether the lock's holder is gone: on this host, its pid
// is not running or belongs to a later process; on another, its file was
// not refreshed for StaleAfter.
func (li LockInfo) Stale() bool {
	host, err := os.Hostname()
	if err != nil || host != li.Host {
		return time.Since(li.touched) > StaleAfter
	}
	if !running(li.PID) {
		return true
	}
	if li.ProcStart != 0 {
		if start, ok := procStart(li.PID); ok && start != li.ProcStart {
			return true // the pid was reused
		}
	}
	return false
}

// running reports whether a process with pid exists (signal 0 is sent to
// no one; EPERM means it exists under another user).
func running(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// procStart reads a process's start time in clock ticks since boot, field
// 22 of /proc/PID/stat (Linux).
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	return v, err == nil
}

// Writer returns the process that holds the writer's lock on dir, if one
// does and it is not stale.
func Writer(dir string) (LockInfo, bool) {
	others, _ := Locks(dir)
	return liveWriter(others, "")
}
