package docker

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/proctor-dev/proctor/sandbox"
)

// How a container's disk use is held to its limits. The engine's quota
// (--storage-opt size) holds bytes, and works only for overlay2 on xfs with
// pquota and a few other drivers; elsewhere a watchdog measures what the
// container wrote and stops the agent once it is over: its walk of the
// container's upper layer on this host when proctor can read it (bytes and
// inodes; with a quota, inodes only), else the engine's own measure, which
// is slower and counts bytes only.
const (
	DiskQuota    = "engine quota (--storage-opt size); proctor counts inodes in the container's upper layer"
	DiskUpperDir = "watchdog: proctor counts the container's upper layer, bytes and inodes, with at most 1% of a core"
	DiskInspect  = "watchdog: the engine measures the container every 30s (bytes; inodes are not limited)"
)

// storage-opt support, learned from the first container that asked.
const (
	quotaUnknown int32 = iota
	quotaYes
	quotaNo
)

// quotaRefused reports whether a create failed because the storage driver
// has no quota.
func quotaRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "storage-opt")
}

// DiskLimit says how this engine holds containers to their disk limit,
// probing it with a container made from image (created, never started).
func (b *Backend) DiskLimit(ctx context.Context, image string) (string, error) {
	if b.quota.Load() == quotaUnknown {
		c, err := b.cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"true"}, Labels: map[string]string{sandbox.LabelManaged: "true"}},
			&container.HostConfig{NetworkMode: "none", StorageOpt: map[string]string{"size": "1G"}}, nil, nil, "")
		switch {
		case quotaRefused(err):
			b.quota.Store(quotaNo)
		case err != nil:
			return "", engineError(err)
		default:
			b.quota.Store(quotaYes)
			b.removeContainer(ctx, c.ID)
		}
	}
	if b.quota.Load() == quotaYes {
		return DiskQuota, nil
	}
	info, err := b.cli.Info(ctx)
	if err == nil && info.Driver == "overlay2" && info.DockerRootDir != "" {
		if _, err := os.ReadDir(filepath.Join(info.DockerRootDir, "overlay2")); err == nil {
			return DiskUpperDir, nil
		}
	}
	return DiskInspect, nil
}

// The watchdog's pace. It checks the file system every diskTick (one
// statfs) and walks the upper layer when the last walk is diskCPUShare
// times its own CPU time ago, half a percent of a core whatever the tree
// holds (well within 1% with what else a window catches), or sooner (at
// most every diskTick) when the file system grew by more than the sandbox
// had left under a limit since its last walk.
const (
	diskTick     = 2 * time.Second
	diskCPUShare = 200
	inspectEvery = 30 * time.Second
)

// diskWatch polls a container's disk use until stop is closed.
type diskWatch struct {
	limitBytes, limitInodes int64 // math.MaxInt64: not the watchdog's to hold
	over                    atomic.Pointer[error]
	stop                    chan struct{}
}

// exceeded returns the limit error once the sandbox went over.
func (w *diskWatch) exceeded() error {
	if w == nil {
		return nil
	}
	if p := w.over.Load(); p != nil {
		return *p
	}
	return nil
}

// watchDisk starts the watchdog of a sandbox: its disk limit (limitMiB)
// when the engine has no quota (bytes), and its inode limit.
func (s *Sandbox) watchDisk(limitMiB, inodes int64, bytes bool) {
	w := &diskWatch{limitBytes: limitMiB << 20, limitInodes: inodes, stop: make(chan struct{})}
	if !bytes {
		w.limitBytes = math.MaxInt64
	}
	s.disk = w
	ctx := context.Background()
	upper := ""
	if st, err := s.b.cli.ContainerInspect(ctx, s.id); err == nil && st.GraphDriver.Name == "overlay2" {
		if d := st.GraphDriver.Data["UpperDir"]; d != "" {
			if _, err := os.Stat(d); err == nil {
				upper = d
			}
		}
	}
	switch {
	case upper != "":
		go s.walkUpper(w, upper)
	case bytes:
		// The engine's measure counts bytes only: the inode limit is not
		// held (proctor doctor says so).
		go s.inspectSize(w)
	default:
		s.disk = nil
	}
}

// fire records err as the sandbox's limit error and stops the agent.
func (s *Sandbox) fire(w *diskWatch, err error) {
	w.over.Store(&err)
	if s.agent != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.agent.stop(sctx)
		cancel()
	}
}

// walkUpper holds the sandbox to its limits by walking its upper layer.
func (s *Sandbox) walkUpper(w *diskWatch, upper string) {
	t := time.NewTicker(diskTick)
	defer t.Stop()
	var last usage
	var lastFS [2]int64
	var next time.Time
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			fb, fi, ferr := fsUse(upper)
			grew := ferr == nil && (fb-lastFS[0] > w.limitBytes-last.blocks || fi-lastFS[1] > w.limitInodes-last.inodes)
			if now.Before(next) && !grew {
				continue
			}
			u, over, cost, err := timedMeasure(upper, w.limitBytes, w.limitInodes)
			next = time.Now().Add(max(diskTick, diskCPUShare*cost))
			if err != nil && s.closed.Load() {
				return
			}
			if err := w.check(u, over, err); err != nil {
				s.fire(w, err)
				return
			}
			last, lastFS = u, [2]int64{fb, fi}
		}
	}
}

// timedMeasure is measure, and the CPU time it took: the goroutine is
// locked to its thread meanwhile, so that the thread's time is the walk's.
func timedMeasure(dir string, maxBytes, maxInodes int64) (u usage, over bool, cpu time.Duration, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	u, over, err = measure(dir, maxBytes, maxInodes)
	return u, over, threadCPU() - start, err
}

// check says why u is over a limit (nil when it is not). A walk that
// failed counts as over: what it could not count may be anything.
func (w *diskWatch) check(u usage, over bool, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("the watchdog could not count what the sandbox wrote (%v), which counts as over its disk limit: %w", err, sandbox.ErrLimit)
	case !over:
		return nil
	case u.inodes > w.limitInodes:
		return fmt.Errorf("the sandbox made over %d files, folders and links, its limit: %w", w.limitInodes, sandbox.ErrLimit)
	}
	return fmt.Errorf("the sandbox wrote over %d MiB, over its disk limit of %d MiB: %w", u.blocks>>20, w.limitBytes>>20, sandbox.ErrLimit)
}

// inspectSize holds the sandbox to its disk limit by asking the engine
// what it wrote. An engine that measured once and then cannot (a path it
// cannot walk) counts as over.
func (s *Sandbox) inspectSize(w *diskWatch) {
	t := time.NewTicker(inspectEvery)
	defer t.Stop()
	measured := false
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		st, _, err := s.b.cli.ContainerInspectWithRaw(ictx, s.id, true)
		cancel()
		switch {
		case err != nil:
			continue // the engine is busy or gone: the next tick asks again
		case st.SizeRw == nil && measured && !s.closed.Load():
			s.fire(w, fmt.Errorf("the engine could not measure what the sandbox wrote, which counts as over its disk limit: %w", sandbox.ErrLimit))
			return
		case st.SizeRw == nil:
			continue
		}
		measured = true
		if *st.SizeRw > w.limitBytes {
			s.fire(w, fmt.Errorf("the sandbox wrote %d MiB, over its disk limit of %d MiB: %w", *st.SizeRw>>20, w.limitBytes>>20, sandbox.ErrLimit))
			return
		}
	}
}
