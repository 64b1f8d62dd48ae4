//go:build unix

package tmuxbin

import (
	"os"
	"syscall"
)

// waitBuild waits for a build that holds the lock file (build.sh holds it
// exclusively for as long as it builds) to end. No lock file: no build.
func waitBuild(lock string) {
	f, err := os.Open(lock)
	if err != nil {
		return
	}
	defer f.Close()
	syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
}
