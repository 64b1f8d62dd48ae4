//go:build linux

package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox/archive"
)

// walk finds paths as the engine's view has them: links followed, none
// onto /proc (whose magic links lead into other processes' namespaces),
// folders made when asked.
func TestWalk(t *testing.T) {
	tmp := t.TempDir()
	os.MkdirAll(filepath.Join(tmp, "real"), 0o755)
	os.WriteFile(filepath.Join(tmp, "real", "f"), []byte("data"), 0o644)
	for name, target := range map[string]string{
		"rel":   "real",
		"abs":   filepath.Join(tmp, "real"),
		"chain": "rel/../abs",
		"loop":  "loop",
		"magic": "/proc/self/root",
		"env":   "/proc/self/environ",
		"up":    "../../../../../../../proc",
	} {
		if err := os.Symlink(target, filepath.Join(tmp, name)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string, followLast bool) (string, error) {
		f, err := walk(p, followLast, nil)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := os.ReadFile(fdPath(f))
		return string(b), err
	}
	for _, p := range []string{"rel/f", "abs/f", "chain/f", "real/../rel/f"} {
		if got, err := read(filepath.Join(tmp, p), true); err != nil || got != "data" {
			t.Errorf("%s: %q, %v", p, got, err)
		}
	}
	notFound := func(err error) bool {
		var c exitCode
		return errors.As(err, &c) && c.code == 3
	}
	for _, p := range []string{filepath.Join(tmp, "magic", tmp, "real/f"), filepath.Join(tmp, "env"), filepath.Join(tmp, "up/self/environ"), "/proc/self/environ", "/proc"} {
		if got, err := read(p, true); !notFound(err) {
			t.Errorf("%s: %q, %v; want not found (the container's /proc)", p, got, err)
		}
	}
	if _, err := read(filepath.Join(tmp, "loop/x"), true); !errors.Is(err, unix.ELOOP) {
		t.Errorf("a loop: %v, want ELOOP", err)
	}
	if _, err := read("relative/path", true); err == nil {
		t.Error("a relative path was walked")
	}
	f, err := walk(filepath.Join(tmp, "magic"), false, nil)
	if err != nil {
		t.Fatalf("a link as the last name, not followed: %v", err)
	}
	var st unix.Stat_t
	unix.Fstat(int(f.Fd()), &st)
	f.Close()
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("the last name was followed: mode %o", st.Mode)
	}
	own := archive.Owner{UID: os.Getuid(), GID: os.Getgid()}
	d, err := walk(filepath.Join(tmp, "rel/new/a/b"), true, &own)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, err := os.Stat(filepath.Join(tmp, "real/new/a/b")); err != nil || !fi.IsDir() {
		t.Errorf("folders made: %v %v", fi, err)
	}
	if _, err := walk(filepath.Join(tmp, "magic", tmp, "made"), true, &own); !notFound(err) {
		t.Errorf("folders made through /proc: %v", err)
	}
}
