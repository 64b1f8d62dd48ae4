package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/proctor-dev/proctor/sandbox"
)

// LabelLayer marks an image built from a layer (sandbox.Layer) with the
// layer's key; labelStage marks the build's stages that are removed after
// it.
const (
	LabelLayer = "proctor.layer"
	labelStage = "proctor.stage"
)

// layerTag is the image a layer over the image base (an id) is built
// into: a hash of both, so a new image or a new layer makes a new one.
func layerTag(base string, l *sandbox.Layer) string {
	h := sha256.Sum256([]byte(base + "\x00" + l.Key))
	return "proctor-layer:" + hex.EncodeToString(h[:])[:24]
}

// layered returns the image of layer l over base: the one built before
// when there is one, else built now, once for concurrent starts.
func (b *Backend) layered(ctx context.Context, base *image.InspectResponse, l *sandbox.Layer) (string, *image.InspectResponse, error) {
	tag := layerTag(base.ID, l)
	ii, err := b.cli.ImageInspect(ctx, tag)
	if err == nil {
		return tag, &ii, nil
	}
	if !client.IsErrNotFound(err) {
		return "", nil, engineError(err)
	}
	if _, err := b.once(ctx, tag, func(ctx context.Context) (string, error) { return b.buildLayer(ctx, base, tag, l) }); err != nil {
		return "", nil, err
	}
	if ii, err = b.cli.ImageInspect(ctx, tag); err != nil {
		return "", nil, engineError(err)
	}
	return tag, &ii, nil
}

// buildLayer builds l over baseImage into tag, then removes the
// build's stages it does not keep.
func (b *Backend) buildLayer(ctx context.Context, baseImage *image.InspectResponse, tag string, l *sandbox.Layer) (string, error) {
	if ok, err := b.imagePresent(ctx, tag); err != nil || ok {
		return tag, err
	}
	base := baseImage.ID
	name := l.Name + " over " + base
	bctx, err := l.Context(ctx, baseImage.Architecture)
	if err != nil {
		return "", &sandbox.ImageError{Image: name, Reason: "build context: " + err.Error()}
	}
	stage := tag[len("proctor-layer:"):]
	network := string(sandbox.NetworkNone)
	if l.Network != "" {
		network = string(l.Network)
	}
	b.log.Info("installing into an image, once", "layer", l.Name, "image", base, "tag", tag, "network", network)
	resp, err := b.cli.ImageBuild(ctx, bytes.NewReader(bctx), build.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		NetworkMode: network,
		BuildArgs:   map[string]*string{"BASE": &base, "STAGE": &stage},
		Labels:      map[string]string{sandbox.LabelManaged: "true", LabelLayer: l.Key},
		Version:     build.BuilderV1,
	})
	if err != nil {
		return "", &sandbox.ImageError{Image: name, Reason: "build: " + engineError(err).Error()}
	}
	defer resp.Body.Close()
	tail, err := readStream(resp.Body, nil)
	// The install stage's images are kept by the engine as its cache:
	// they hold what the final image copied, twice the disk.
	if _, perr := b.cli.ImagesPrune(context.WithoutCancel(ctx), filters.NewArgs(filters.Arg("label", labelStage+"="+stage))); perr != nil {
		b.log.Warn("remove the install stage of a layer", "tag", tag, "err", perr)
	}
	if err != nil {
		return "", &sandbox.ImageError{Image: name, Reason: "build failed: " + err.Error(), LogTail: tail}
	}
	return tag, nil
}

// BuildLayer builds the image of spec's layer over spec's image with the
// local engine (once, as Start does) and returns its tag: a layer made
// ahead of a run, which then starts from it without a network.
func (b *Backend) BuildLayer(ctx context.Context, spec sandbox.Spec) (string, error) {
	if spec.Layer == nil {
		return "", fmt.Errorf("the spec has no layer")
	}
	base, found, err := b.ensureImage(ctx, spec)
	if err != nil {
		return "", err
	}
	if found == nil {
		ii, err := b.cli.ImageInspect(ctx, base)
		if err != nil {
			return "", engineError(err)
		}
		found = &ii
	}
	tag, _, err := b.layered(ctx, found, spec.Layer)
	return tag, err
}

// HasLayer reports whether the image of spec's layer over spec's image
// (present locally) is built, without building anything.
func (b *Backend) HasLayer(ctx context.Context, spec sandbox.Spec) (bool, error) {
	if spec.Layer == nil || spec.Image == "" {
		return false, nil
	}
	ii, err := b.cli.ImageInspect(ctx, spec.Image)
	if client.IsErrNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, engineError(err)
	}
	return b.imagePresent(ctx, layerTag(ii.ID, spec.Layer))
}

// BuildPushLayer builds the image of spec's layer over spec's image with
// the local engine (once, as Start does) and pushes it to registry, for a
// backend whose sandboxes run elsewhere (Kubernetes). It returns the
// pushed reference pinned by digest.
func (b *Backend) BuildPushLayer(ctx context.Context, spec sandbox.Spec, reg string) (string, error) {
	tag, err := b.BuildLayer(ctx, spec)
	if err != nil {
		return "", err
	}
	ref := strings.TrimSuffix(reg, "/") + "/" + tag
	return b.once(ctx, "push\x00"+ref, func(ctx context.Context) (string, error) { return b.push(ctx, tag, ref) })
}
