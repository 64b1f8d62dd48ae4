//go:build linux

package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepTree makes under dir a chain of levels folders named name, and a
// file of size bytes at its bottom, by file descriptor (its path is longer
// than any path call takes).
func deepTree(t testing.TB, dir string, levels int, name string, size int64) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range levels {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = sub
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(f)
	if err := unix.Fallocate(f, 0, 0, size); size > 0 && err != nil {
		t.Fatal(err)
	}
}

// TestMeasureDeepPaths: a file under a path longer than PATH_MAX counts
// (the walk by path skipped it: 601 MB went by under a 100 MB limit).
func TestMeasureDeepPaths(t *testing.T) {
	dir := t.TempDir()
	deepTree(t, dir, 20, strings.Repeat("d", 250), 8<<20)
	u, over, err := measure(dir, 1<<40, 1<<40)
	if err != nil || over || u.blocks < 8<<20 || u.inodes != 22 {
		t.Fatalf("%+v over %v: %v", u, over, err)
	}
	if _, over, err := measure(dir, 4<<20, 1<<40); err != nil || !over {
		t.Fatalf("over 4 MiB: %v %v", over, err)
	}
}

// TestMeasureTooDeep: a tree deeper than the walk goes is an error, which
// the watchdog counts as over the limit.
func TestMeasureTooDeep(t *testing.T) {
	dir := t.TempDir()
	deepTree(t, dir, maxWalkDepth+5, "d", 0)
	if _, _, err := measure(dir, 1<<40, 1<<40); err == nil || !strings.Contains(err.Error(), "folders nested over 512 deep") {
		t.Fatalf("got %v", err)
	}
}

// TestMeasureInodes: the walk stops once over the inode limit; a hard link
// counts once for its blocks.
func TestMeasureInodes(t *testing.T) {
	dir := t.TempDir()
	for i := range 300 {
		os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte("x"), 0o644)
	}
	if _, over, err := measure(dir, 1<<40, 100); err != nil || !over {
		t.Fatalf("300 files under a limit of 100: over %v, %v", over, err)
	}
	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, make([]byte, 1<<20), 0o644)
	for i := range 5 {
		os.Link(big, big+fmt.Sprint(i))
	}
	u, _, err := measure(filepath.Dir(big), 1<<40, 1<<40)
	if err != nil || u.blocks > 2<<20 || u.inodes != 7 {
		t.Fatalf("hard links: %+v %v", u, err)
	}
}

// manyFiles makes n empty files under dir, a thousand to a folder.
func manyFiles(b testing.TB, dir string, n int) {
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprint(i/1000))
		if i%1000 == 0 {
			os.Mkdir(sub, 0o755)
		}
		f, err := os.Create(filepath.Join(sub, fmt.Sprint(i)))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkDiskWalk100k is the watchdog's walk of 100,000 empty files: its
// CPU time a walk, and the share of a core the watchdog then takes, which
// waits diskCPUShare times a walk's CPU (at least diskTick) between walks.
// go test -run '^$' -bench DiskWalk100k -count 5 ./sandbox/docker/
func BenchmarkDiskWalk100k(b *testing.B) {
	dir := b.TempDir()
	manyFiles(b, dir, 100_000)
	var cpu, n int64
	for b.Loop() {
		u, _, c, err := timedMeasure(dir, 1<<40, 1<<40)
		cpu += int64(c)
		n++
		if err != nil || u.inodes != 100_000+100+1 {
			b.Fatalf("%+v %v", u, err)
		}
	}
	per := float64(cpu) / float64(n)
	b.ReportMetric(per/1e6, "cpu-ms/walk")
	b.ReportMetric(100*per/max(float64(diskTick), diskCPUShare*per), "core-%")
}
