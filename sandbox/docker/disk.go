package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/proctor-dev/proctor/sandbox"
)

// How a container's disk use is held to its limit. The engine's quota
// (--storage-opt size) works only for overlay2 on xfs with pquota and a few
// other drivers; elsewhere a watchdog measures what the container wrote and
// stops the agent once it is over: its walk of the container's upper
// layer on this host when proctor can read it, else the engine's own
// measure, which is slower.
const (
	DiskQuota    = "engine quota (--storage-opt size)"
	DiskUpperDir = "watchdog: proctor measures the container's upper layer every 2s"
	DiskInspect  = "watchdog: the engine measures the container every 30s"
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

// diskWatch polls a container's disk use until stop is closed.
type diskWatch struct {
	limitMiB int64
	over     atomic.Pointer[error]
	stop     chan struct{}
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

// watchDisk starts the watchdog of a sandbox whose engine has no quota.
func (s *Sandbox) watchDisk(limitMiB int64) {
	w := &diskWatch{limitMiB: limitMiB, stop: make(chan struct{})}
	s.disk = w
	ctx := context.Background()
	var upper string
	if st, err := s.b.cli.ContainerInspect(ctx, s.id); err == nil && st.GraphDriver.Name == "overlay2" {
		if d := st.GraphDriver.Data["UpperDir"]; d != "" {
			if _, err := os.Stat(d); err == nil {
				upper = d
			}
		}
	}
	every := 2 * time.Second
	if upper == "" {
		every = 30 * time.Second
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			used, err := s.diskUsed(ctx, upper)
			if err != nil {
				continue
			}
			if used > limitMiB<<20 {
				err := fmt.Errorf("the sandbox wrote %d MiB, over its disk limit of %d MiB: %w", used>>20, limitMiB, sandbox.ErrLimit)
				w.over.Store(&err)
				if s.agent != nil {
					sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					s.agent.stop(sctx)
					cancel()
				}
				return
			}
		}
	}()
}

// diskUsed is what the container wrote: the blocks of its upper layer, or
// the engine's SizeRw.
func (s *Sandbox) diskUsed(ctx context.Context, upper string) (int64, error) {
	if upper != "" {
		return blocksUnder(upper)
	}
	ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, _, err := s.b.cli.ContainerInspectWithRaw(ictx, s.id, true)
	if err != nil {
		return 0, err
	}
	if st.SizeRw == nil {
		return 0, errors.New("no size")
	}
	return *st.SizeRw, nil
}

// blocksUnder sums the disk blocks of the files under dir (a sparse file
// counts for what it holds, a hard link once).
func blocksUnder(dir string) (int64, error) {
	var total int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}
