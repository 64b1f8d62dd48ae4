package tmuxbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/internal/poll"
)

// TestKeyMatchesBuildScript: Go and build.sh name the same folder.
func TestKeyMatchesBuildScript(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PROCTOR_CACHE_DIR", dir)
	t.Setenv("PROCTOR_TMUX_DIR", "")
	out, err := exec.Command("bash", "build.sh", "--print-dir").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), Dir(); got != want || !strings.HasPrefix(want, filepath.Join(dir, "tmux", Version()+"-")) {
		t.Fatalf("build.sh: %s, Go: %s", got, want)
	}
	if Version() != "3.3a" {
		t.Errorf("version %q", Version())
	}
	if _, err := Find(); err != ErrNotBuilt {
		t.Errorf("Find in an empty cache: %v", err)
	}
}

// TestFindWaitsForBuild: a test suite that starts the build in the
// background (`make test`) finds tmux once that build ends, not
// ErrNotBuilt while it runs.
func TestFindWaitsForBuild(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PROCTOR_CACHE_DIR", dir)
	t.Setenv("PROCTOR_TMUX_DIR", "")
	lock := filepath.Join(dir, "tmux", ".lock")
	if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	type found struct {
		dir string
		err error
	}
	done := make(chan found, 1)
	go func() {
		d, err := Find()
		done <- found{d, err}
	}()
	// Find is blocked on the lock once /proc/locks lists a waiter on its
	// inode ("N: -> FLOCK ADVISORY READ PID MAJ:MIN:INODE 0 EOF").
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	inode := fmt.Sprintf(":%d ", st.Ino)
	poll.Until(t, "Find to wait on the build's lock", func() bool {
		b, _ := os.ReadFile("/proc/locks")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "-> FLOCK") && strings.Contains(l, inode) {
				return true
			}
		}
		return false
	})
	if err := os.MkdirAll(Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(Dir(), "tmux"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	got := <-done
	if got.err != nil || got.dir != Dir() {
		t.Fatalf("Find after the build: %q, %v", got.dir, got.err)
	}
}
