package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// TestWardenFolderChecked: the folder every sandbox binds (the warden, in
// the user's cache) is read-only from both of a sandbox's shells, also
// after a remount is tried, and checked against its digest before every
// start, not once per process: a changed folder fails the start with an
// error that names the file and says what to do, and matches
// sandbox.ErrTampered (which ends the run); once removed, the next start
// writes it again.
func TestWardenFolderChecked(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	b := newBackend(t)
	ctx := context.Background()
	spec := sandbox.Spec{Image: sandboxtest.BaseImage(), Workdir: "/app", Private: sandboxtest.Private,
		Labels: map[string]string{sandbox.LabelRun: "test-TestWardenFolderChecked"}}
	sb := start(t, b, spec)
	for _, side := range []sandbox.Sandbox{sb.Agent(), sb} {
		sandboxtest.CheckWardenSealed(t, side)
	}
	b.wardens.mu.Lock()
	var dir string
	for _, d := range b.wardens.dirs {
		dir = d
	}
	b.wardens.mu.Unlock()
	if dir == "" {
		t.Fatal("no warden folder bound")
	}
	warden := filepath.Join(dir, "warden")
	// What the sandbox tried left the folder as it was: the next start
	// checks it.
	sb.Close(ctx)
	start(t, b, spec).Close(ctx)

	orig, err := os.ReadFile(warden)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func() error
		file   string
	}{
		{"appended", func() error { return os.WriteFile(warden, append(append([]byte{}, orig...), 0), 0o755) }, warden},
		{"same size", func() error {
			b := append([]byte{}, orig...)
			b[len(b)/2] ^= 0xff
			return os.WriteFile(warden, b, 0o755)
		}, warden},
		{"mode", func() error { return os.Chmod(warden, 0o777) }, warden},
		{"link", func() error {
			if err := os.Remove(warden); err != nil {
				return err
			}
			return os.Symlink("/bin/true", warden)
		}, warden},
		{"extra file", func() error { return os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644) }, dir},
		{"file in the state folder", func() error { return os.WriteFile(filepath.Join(dir, "plugin", "x"), nil, 0o644) }, filepath.Join(dir, "plugin")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.change(); err != nil {
				t.Fatal(err)
			}
			sb, err := b.Start(ctx, spec)
			if err == nil {
				sb.Close(ctx)
				t.Fatal("a sandbox started from a changed warden folder")
			}
			if !errors.Is(err, sandbox.ErrTampered) || !strings.Contains(err.Error(), c.file+" ") || !strings.Contains(err.Error(), "remove the folder") {
				t.Errorf("the error: %v", err)
			}
			// Removed, as the error says: the next start writes it again.
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			start(t, b, spec).Close(ctx)
		})
	}
}

// BenchmarkWardenCheck is what checking the warden's folder costs each
// start (checkWardenDir: its listing, the warden's SHA-256): ns/op is
// wall time, cpu-ms/op the CPU time this process spent (user and system),
// which the machine's load does not inflate. Run with -benchtime 200x
// -count 5.
func BenchmarkWardenCheck(b *testing.B) {
	b.Setenv("XDG_CACHE_HOME", b.TempDir())
	warden, err := shell.Warden("amd64")
	if err != nil {
		b.Fatal(err)
	}
	var w wardenDirs
	if _, ok, err := w.mount(warden); !ok || err != nil {
		b.Fatalf("write the folder: %v %v", ok, err)
	}
	cpu0 := cpuTime()
	for b.Loop() {
		if _, _, err := w.mount(warden); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(len(warden))/(1<<20), "warden-MiB")
}

// cpuTime is the CPU time this process has spent, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
