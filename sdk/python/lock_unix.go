//go:build unix

package python

import (
	"os"
	"path/filepath"
	"syscall"
)

// buildLock is the lock runtime/build.sh holds while it builds a runtime
// in <cache>/python: the folder above the runtime's.
func buildLock(dir string) (*os.File, error) {
	return os.Open(filepath.Join(filepath.Dir(dir), ".lock"))
}

// Building reports whether a build of runtimes in the cache folder of dir
// (RuntimeDir when empty) is under way on this machine, and where it logs
// when it runs in the background (make python-runtime-background).
func Building(dir string) (log string, ok bool) {
	if dir == "" {
		dir = RuntimeDir()
	}
	f, err := buildLock(dir)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) == nil {
		return "", false
	}
	return filepath.Join(filepath.Dir(dir), "build.log"), true
}

// waitBuild waits for a build under way in the cache folder of dir to end.
func waitBuild(dir string) {
	f, err := buildLock(dir)
	if err != nil {
		return
	}
	defer f.Close()
	syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
}
