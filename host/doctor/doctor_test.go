package doctor

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCacheCheckIsTheRunsCache: doctor checks the cache folder runs use.
// With PROCTOR_CACHE_DIR set, that is the folder itself: doctor checked
// (and made) a proctor folder inside it instead.
func TestCacheCheckIsTheRunsCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	t.Setenv("PROCTOR_CACHE_DIR", dir)
	c := cacheCheck()
	if !c.OK || c.Info != dir {
		t.Fatalf("cache check %+v, want ok for %s", c, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "proctor")); err == nil {
		t.Errorf("doctor made %s/proctor, a folder no run uses", dir)
	}
}

// TestCacheCheckFails: a cache folder that cannot be made fails, with the
// hint.
func TestCacheCheckFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROCTOR_CACHE_DIR", filepath.Join(file, "cache"))
	if c := cacheCheck(); c.OK || c.Hint == "" {
		t.Errorf("cache check under a file: %+v", c)
	}
}

func TestDiskCheck(t *testing.T) {
	if c := diskCheck("disk", t.TempDir(), 1); !c.OK {
		t.Errorf("1 byte wanted: %+v", c)
	}
	if c := diskCheck("disk", t.TempDir(), 1<<62); c.OK || c.Hint == "" {
		t.Errorf("4 EiB wanted: %+v", c)
	}
	if c := diskCheck("disk", filepath.Join(t.TempDir(), "none"), 1); c.OK {
		t.Errorf("a missing folder: %+v", c)
	}
}
