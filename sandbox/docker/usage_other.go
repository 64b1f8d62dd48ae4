//go:build !linux

package docker

import (
	"errors"
	"time"
)

// usage is what a container wrote; counted on Linux only, where proctor
// can read the engine's upper layers.
type usage struct{ blocks, inodes int64 }

func measure(string, int64, int64) (usage, bool, error) {
	return usage{}, false, errors.ErrUnsupported
}

func fsUse(string) (int64, int64, error) { return 0, 0, errors.ErrUnsupported }

func threadCPU() time.Duration { return 0 }
