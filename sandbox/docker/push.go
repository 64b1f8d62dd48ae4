package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"

	"github.com/proctor-dev/proctor/sandbox"
)

// BuildPush builds spec's context with the local engine (once per content,
// as Start does) and pushes it to registry (host[:port][/path]), for a
// backend whose sandboxes run elsewhere (Kubernetes). It returns the
// pushed reference pinned by digest. Concurrent calls for one context
// share the build and the push.
func (b *Backend) BuildPush(ctx context.Context, spec sandbox.Spec, reg string) (string, error) {
	if len(spec.BuildContext) == 0 {
		return "", &sandbox.ImageError{Image: spec.Image, Reason: "no build context to build"}
	}
	spec.ForceBuild = false // a content-hash tag already built is this build
	tag, err := b.buildOnce(ctx, spec)
	if err != nil {
		return "", err
	}
	ref := strings.TrimSuffix(reg, "/") + "/" + tag
	return b.once(ctx, "push\x00"+ref, func(ctx context.Context) (string, error) { return b.push(ctx, tag, ref) })
}

func (b *Backend) push(ctx context.Context, tag, ref string) (string, error) {
	if err := b.cli.ImageTag(ctx, tag, ref); err != nil {
		return "", &sandbox.ImageError{Image: ref, Reason: "tag for push: " + engineError(err).Error()}
	}
	// The registry's name is needed only for the push: untag it after,
	// leaving the image under its content tag.
	defer b.cli.ImageRemove(context.WithoutCancel(ctx), ref, image.RemoveOptions{})
	b.log.Info("pushing image", "image", ref)
	rc, err := b.cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: registryAuth(ref)})
	if err != nil {
		return "", &sandbox.ImageError{Image: ref, Reason: "push: " + engineError(err).Error()}
	}
	defer rc.Close()
	digest, err := pushDigest(rc)
	if err != nil {
		return "", &sandbox.ImageError{Image: ref, Reason: "push: " + err.Error()}
	}
	return ref + "@" + digest, nil
}

// pushDigest reads the engine's push progress stream and returns the
// digest of the pushed manifest (the "aux" message), or the stream's
// error.
func pushDigest(r io.Reader) (string, error) {
	dec := json.NewDecoder(io.LimitReader(r, 64<<20))
	digest := ""
	for {
		var m struct {
			Error string `json:"error"`
			Aux   struct {
				Digest string `json:"Digest"`
			} `json:"aux"`
		}
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("read progress: %w", err)
		}
		if m.Error != "" {
			return "", errors.New(m.Error)
		}
		if strings.HasPrefix(m.Aux.Digest, "sha256:") && len(m.Aux.Digest) == len("sha256:")+64 {
			digest = m.Aux.Digest
		}
	}
	if digest == "" {
		return "", errors.New("the engine reported no digest")
	}
	return digest, nil
}

// registryAuth is the credential the Docker CLI stored for ref's registry
// (`docker login` without a credential helper), encoded for the engine;
// empty (anonymous) when there is none.
func registryAuth(ref string) string {
	host, _, _ := strings.Cut(ref, "/")
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".docker")
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return ""
	}
	var cfg struct {
		Auths map[string]struct {
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		return ""
	}
	a, ok := cfg.Auths[host]
	if !ok {
		a, ok = cfg.Auths["https://"+host]
	}
	if !ok || a.Auth == "" {
		return ""
	}
	dec, err := base64.StdEncoding.DecodeString(a.Auth)
	if err != nil {
		return ""
	}
	user, pass, ok := strings.Cut(string(dec), ":")
	if !ok {
		return ""
	}
	s, err := registry.EncodeAuthConfig(registry.AuthConfig{Username: user, Password: pass, ServerAddress: host})
	if err != nil {
		return ""
	}
	return s
}
