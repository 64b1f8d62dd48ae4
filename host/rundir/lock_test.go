package rundir

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// writeLock puts a lock file for li into dir, as another process would.
func writeLock(t *testing.T, dir, name string, li LockInfo) {
	t.Helper()
	os.MkdirAll(filepath.Join(dir, LocksDir), 0o755)
	b, _ := json.Marshal(li)
	if err := os.WriteFile(filepath.Join(dir, LocksDir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLockExclusiveAndShared(t *testing.T) {
	dir := t.TempDir()
	w, err := LockExclusive(dir, "eval")
	if err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := LockExclusive(dir, "process"); !errors.As(err, &held) || held.Holder.PID != os.Getpid() || held.Holder.Command != "eval" {
		t.Fatalf("second writer: %v, want a HeldError naming the first", err)
	}
	r, err := LockShared(dir, "report")
	if err != nil {
		t.Fatalf("a reader beside the writer: %v", err)
	}
	if got, ok := Writer(dir); !ok || got.Command != "eval" {
		t.Fatalf("Writer = %v, %v", got, ok)
	}
	w.Unlock()
	if _, ok := Writer(dir); ok {
		t.Fatal("a released writer's lock is still seen")
	}
	w2, err := LockExclusive(dir, "eval")
	if err != nil {
		t.Fatalf("a writer beside a reader: %v", err)
	}
	w2.Unlock()
	r.Unlock()
	if _, err := os.Stat(filepath.Join(dir, LocksDir)); !os.IsNotExist(err) {
		t.Fatalf("locks/ left behind: %v", err)
	}
}

// TestStaleLocks: a writer's lock is taken over when its pid is not
// running, when the pid now belongs to a later process, or when another
// host's lock was not refreshed for StaleAfter; a live one on another
// host is not.
func TestStaleLocks(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	me := self("eval", true)
	for _, tc := range []struct {
		name  string
		li    LockInfo
		age   time.Duration
		stale bool
	}{
		{"dead pid", LockInfo{Exclusive: true, PID: gone.Process.Pid, Host: host}, 0, true},
		{"reused pid", LockInfo{Exclusive: true, PID: me.PID, Host: host, ProcStart: me.ProcStart + 1}, 0, me.ProcStart != 0},
		{"live pid", LockInfo{Exclusive: true, PID: me.PID, Host: host, ProcStart: me.ProcStart}, 0, false},
		{"other host, refreshed", LockInfo{Exclusive: true, PID: 1, Host: host + "-other"}, time.Minute, false},
		{"other host, silent", LockInfo{Exclusive: true, PID: 1, Host: host + "-other"}, StaleAfter + time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.li.Command = "eval"
			writeLock(t, dir, "exclusive-x.json", tc.li)
			old := time.Now().Add(-tc.age)
			os.Chtimes(filepath.Join(dir, LocksDir, "exclusive-x.json"), old, old)
			l, err := LockExclusive(dir, "eval")
			if tc.stale {
				if err != nil || len(l.TakenOver) != 1 || l.TakenOver[0].PID != tc.li.PID {
					t.Fatalf("stale lock not taken over: %v %+v", err, l)
				}
				l.Unlock()
				return
			}
			var held *HeldError
			if !errors.As(err, &held) {
				t.Fatalf("live lock of %+v: got %v, want a HeldError", tc.li, err)
			}
		})
	}
}

// TestBadLockFile: a writer refuses a lock file it cannot read, naming it;
// a reader goes on.
func TestBadLockFile(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, LocksDir), 0o755)
	os.WriteFile(filepath.Join(dir, LocksDir, "exclusive-bad.json"), []byte("{not json"), 0o644)
	var bad *BadLockError
	if _, err := LockExclusive(dir, "eval"); !errors.As(err, &bad) || filepath.Base(bad.Path) != "exclusive-bad.json" {
		t.Fatalf("got %v, want a BadLockError naming the file", err)
	}
	r, err := LockShared(dir, "report")
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	r.Unlock()
}

func TestProcStart(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	a, ok := procStart(os.Getpid())
	if !ok || a == 0 {
		t.Fatalf("procStart(self) = %d, %v", a, ok)
	}
	if b, _ := procStart(os.Getpid()); b != a {
		t.Fatalf("procStart changed: %d then %d", a, b)
	}
}
