package docker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/oci/ocitest"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// BuildPush builds once and pushes once for concurrent callers, and the
// reference it returns is in the registry by digest.
func TestBuildPush(t *testing.T) {
	b := newBackend(t)
	reg := ocitest.Start(t)
	ctxTar := buildContext(t, "FROM "+sandboxtest.BaseImage()+"\nRUN echo "+time.Now().Format(time.RFC3339Nano)+" > /stamp\n")
	refs := make([]string, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range refs {
		wg.Go(func() {
			refs[i], errs[i] = b.BuildPush(context.Background(), sandbox.Spec{BuildContext: ctxTar}, reg.Addr+"/proctor")
		})
	}
	wg.Wait()
	for i := range refs {
		if errs[i] != nil || refs[i] != refs[0] {
			t.Fatalf("pushes: %q %v", refs, errs)
		}
	}
	name, digest, ok := strings.Cut(refs[0], "@")
	repo, tag, _ := strings.Cut(strings.TrimPrefix(name, reg.Addr+"/"), ":")
	if !ok || !strings.HasPrefix(name, reg.Addr+"/proctor/proctor-build:") || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("reference %q", refs[0])
	}
	req, _ := http.NewRequest(http.MethodHead, "http://"+reg.Addr+"/v2/"+repo+"/manifests/"+digest, nil)
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("manifest %s of %s (tag %s) not in the registry: %v %v", digest, repo, tag, resp, err)
	}
	resp.Body.Close()
	if b, err := exec.Command("docker", "image", "inspect", name).CombinedOutput(); err == nil {
		t.Errorf("the registry's tag %s stays in the engine: %s", name, b)
	}

	// A registry that is not there is an ImageError naming the image.
	_, err = b.BuildPush(context.Background(), sandbox.Spec{BuildContext: ctxTar}, "127.0.0.1:9/proctor")
	var ie *sandbox.ImageError
	if !errors.As(err, &ie) || !strings.Contains(ie.Image, "127.0.0.1:9/proctor/") {
		t.Fatalf("push to a dead registry: %v", err)
	}
}

func TestPushDigest(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	got, err := pushDigest(strings.NewReader(`{"status":"The push refers to repository [x]"}
{"status":"Pushed","id":"abc"}
{"status":"latest: digest: ` + d + ` size: 528"}
{"progressDetail":{},"aux":{"Tag":"latest","Digest":"` + d + `","Size":528}}
`))
	if err != nil || got != d {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := pushDigest(strings.NewReader(`{"errorDetail":{"message":"denied"},"error":"denied: requested access to the resource is denied"}`)); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("error message: %v", err)
	}
	if _, err := pushDigest(strings.NewReader(`{"status":"Pushed"}`)); err == nil {
		t.Fatal("a stream without a digest passed")
	}
}

func FuzzPushDigest(f *testing.F) {
	f.Add(`{"aux":{"Digest":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}`)
	f.Add(`{"error":"x"}`)
	f.Add(`{"status":"a"}{"status":"b"}`)
	f.Fuzz(func(t *testing.T, in string) {
		d, err := pushDigest(strings.NewReader(in))
		if err == nil && (len(d) != 71 || !strings.HasPrefix(d, "sha256:")) {
			t.Fatalf("digest %q", d)
		}
	})
}

func TestRegistryAuth(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", dir)
	if a := registryAuth("reg.example:5000/x/y:1"); a != "" {
		t.Fatalf("no config file: %q", a)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths":{"reg.example:5000":{"auth":"dXNlcjpwYXNz"}}}`), 0o600)
	if a := registryAuth("reg.example:5000/x/y:1"); a == "" {
		t.Fatal("the stored login was not used")
	}
	if a := registryAuth("other.example/x:1"); a != "" {
		t.Fatalf("another registry's login was used: %q", a)
	}
}
