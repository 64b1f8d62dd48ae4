package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/archive"
)

// buildJob is one image build (or push) that concurrent starts share. It
// runs on a context of its own that ends when the build does or when every
// caller waiting for it has given up, so one caller's cancellation does
// not fail the others.
type buildJob struct {
	done    chan struct{}
	image   string
	err     error
	waiters int                // callers waiting for it, under Backend.mu
	cancel  context.CancelFunc // ends the build
}

// ensureImage returns an image reference that exists locally: the spec's
// image, pulled when allowed, or built from the spec's context; and the
// image's inspection where finding it took one (nil otherwise), so a start
// asks the engine once.
func (b *Backend) ensureImage(ctx context.Context, spec sandbox.Spec) (string, *image.InspectResponse, error) {
	if spec.Image != "" && !spec.ForceBuild {
		ii, err := b.cli.ImageInspect(ctx, spec.Image)
		switch {
		case err == nil:
			return spec.Image, &ii, nil
		case !client.IsErrNotFound(err):
			return "", nil, engineError(err)
		}
		if spec.Pull {
			if err := b.pull(ctx, spec.Image); err == nil {
				return spec.Image, nil, nil
			} else if len(spec.BuildContext) == 0 {
				if spec.BuildHint != "" {
					err = fmt.Errorf("%w; %s", err, spec.BuildHint)
				}
				return "", nil, err
			}
		}
		if len(spec.BuildContext) == 0 {
			return "", nil, &sandbox.ImageError{Image: spec.Image, Reason: notFoundReason(spec)}
		}
	}
	if len(spec.BuildContext) == 0 {
		return "", nil, &sandbox.ImageError{Image: spec.Image, Reason: "force_build is set but there is no build context"}
	}
	ref, err := b.buildOnce(ctx, spec)
	return ref, nil, err
}

// notFoundReason says why an image the engine lacks cannot be had, and
// what would give it: the task's own Dockerfile when the spec says there is
// one, pulling, or building it by hand.
func notFoundReason(spec sandbox.Spec) string {
	how := "build it, or allow pulling ([sandbox] pull = true)"
	if spec.Pull {
		how = "build it"
	}
	if spec.BuildHint != "" {
		return "not found locally, and the spec builds nothing: " + spec.BuildHint + "; or " + how
	}
	return "not found locally and no build context; " + how
}

// buildOnce builds a context at most once at a time: concurrent starts with
// the same context (and Dockerfile) wait for the same build, and a built
// image is reused by its content-hash tag.
func (b *Backend) buildOnce(ctx context.Context, spec sandbox.Spec) (string, error) {
	h := sha256.New()
	h.Write(spec.BuildContext)
	io.WriteString(h, "\x00"+spec.Dockerfile+"\x00"+string(buildNetwork(spec)))
	tag := "proctor-build:" + hex.EncodeToString(h.Sum(nil))[:24]

	return b.once(ctx, tag, func(ctx context.Context) (string, error) { return b.buildImage(ctx, spec, tag) })
}

// once runs do for key at most once at a time: concurrent callers with the
// same key wait for the same result, and a success is kept for later
// callers. do runs on a context of its own (see buildJob): one caller's
// cancellation fails only that caller, and do is cancelled when the last
// waiting caller gives up. A failure is forgotten: it may succeed later (a
// cancelled one certainly).
func (b *Backend) once(ctx context.Context, key string, do func(ctx context.Context) (string, error)) (string, error) {
	b.mu.Lock()
	bd, ok := b.builds[key]
	if !ok {
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		bd = &buildJob{done: make(chan struct{}), cancel: cancel}
		b.builds[key] = bd
		go func() {
			image, err := do(bctx)
			cancel()
			b.mu.Lock()
			bd.image, bd.err = image, err
			if err != nil && b.builds[key] == bd {
				delete(b.builds, key)
			}
			b.mu.Unlock()
			close(bd.done)
		}()
	}
	bd.waiters++
	b.mu.Unlock()

	select {
	case <-bd.done:
		b.mu.Lock()
		bd.waiters--
		b.mu.Unlock()
		return bd.image, bd.err
	case <-ctx.Done():
		b.mu.Lock()
		bd.waiters--
		if bd.waiters == 0 {
			// The last caller is gone: no one wants the result now, and a
			// caller coming later starts anew.
			bd.cancel()
			if b.builds[key] == bd {
				delete(b.builds, key)
			}
		}
		b.mu.Unlock()
		return "", ctx.Err()
	}
}

func (b *Backend) buildImage(ctx context.Context, spec sandbox.Spec, tag string) (string, error) {
	if ok, err := b.imagePresent(ctx, tag); err != nil {
		return "", err
	} else if ok && !spec.ForceBuild {
		return tag, nil
	}
	name := spec.Image
	if name == "" {
		name = tag
	}
	if err := archive.Check(bytes.NewReader(spec.BuildContext)); err != nil {
		return "", &sandbox.ImageError{Image: name, Reason: "build context: " + err.Error()}
	}
	network := string(buildNetwork(spec))
	b.log.Info("building image", "image", name, "tag", tag, "network", network)
	resp, err := b.cli.ImageBuild(ctx, bytes.NewReader(spec.BuildContext), build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  spec.Dockerfile,
		Remove:      true,
		ForceRemove: true,
		NetworkMode: network,
		Labels:      map[string]string{sandbox.LabelManaged: "true"},
		Version:     build.BuilderV1,
	})
	if err != nil {
		return "", &sandbox.ImageError{Image: name, Reason: "build: " + engineError(err).Error()}
	}
	defer resp.Body.Close()
	tail, err := readStream(resp.Body, nil)
	if err != nil {
		return "", &sandbox.ImageError{Image: name, Reason: "build failed: " + err.Error(), LogTail: tail}
	}
	return tag, nil
}

// buildNetwork is the network a build of spec's image gets: BuildNetwork,
// else the sandbox's own.
func buildNetwork(spec sandbox.Spec) sandbox.Network {
	n := spec.BuildNetwork
	if n == "" {
		n = spec.Network
	}
	switch n {
	case sandbox.NetworkHost, sandbox.NetworkDefault:
		return n
	}
	return sandbox.NetworkNone
}

// readStream reads the engine's JSON message stream of a build or pull,
// keeping the last lines for errors and reporting progress lines.
func readStream(r io.Reader, progress func(string)) (string, error) {
	const keep = 40
	var lines []string
	add := func(s string) {
		for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
			if strings.TrimSpace(l) == "" {
				continue
			}
			lines = append(lines, l)
			if len(lines) > keep {
				lines = lines[1:]
			}
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m struct {
			Stream   string `json:"stream"`
			Status   string `json:"status"`
			Progress string `json:"progress"`
			ID       string `json:"id"`
			Error    string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			add(sc.Text())
			continue
		}
		if m.Error != "" {
			add(m.Error)
			return strings.Join(lines, "\n"), fmt.Errorf("%s", m.Error)
		}
		if m.Stream != "" {
			add(m.Stream)
		}
		if m.Status != "" && progress != nil {
			progress(strings.TrimSpace(m.ID + " " + m.Status + " " + m.Progress))
		}
	}
	return strings.Join(lines, "\n"), sc.Err()
}

// pull pulls ref, retrying with backoff on rate limits and server errors.
func (b *Backend) pull(ctx context.Context, ref string) error {
	backoff := 2 * time.Second
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			b.log.Warn("pull failed, retrying", "image", ref, "attempt", attempt, "err", last)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			}
			backoff *= 2
		}
		rc, err := b.cli.ImagePull(ctx, ref, image.PullOptions{})
		if err == nil {
			_, err = readStream(rc, func(s string) { b.log.Debug("pull", "image", ref, "progress", s) })
			rc.Close()
			if err == nil {
				return nil
			}
		}
		last = engineError(err)
		if !retryablePull(err) {
			break
		}
	}
	return &sandbox.ImageError{Image: ref, Reason: "pull: " + last.Error()}
}

func retryablePull(err error) bool {
	if err == nil {
		return false
	}
	if client.IsErrConnectionFailed(err) {
		return false
	}
	s := strings.ToLower(err.Error())
	for _, k := range []string{"429", "toomanyrequests", "too many requests", "500", "502", "503", "504", "timeout", "connection reset", "eof"} {
		if strings.Contains(s, k) {
			return true
		}
	}
	return false
}
