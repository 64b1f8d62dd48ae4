package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/oci/ocitest"
	"github.com/proctor-dev/proctor/internal/poll"
)

var meta = Meta{Name: "toolstats", Version: "1.2.3", ABI: 1, Capabilities: []string{"host.info", "model.complete"}, Description: "d"}

func TestPushPullByTagAndDigest(t *testing.T) {
	reg := ocitest.Start(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	c := New(t.TempDir())
	ctx := context.Background()
	wasm := bytes.Repeat([]byte("\x00asm plugin bytes "), 1000)
	ref := "oci://" + reg.Addr + "/team/toolstats:1.2.3"
	digest, err := c.Push(ctx, ref, wasm, meta)
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("push: %v %q", err, digest)
	}
	p, err := c.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p.Path)
	if !bytes.Equal(got, wasm) || !bytes.Equal(p.Wasm, wasm) || p.Digest != digest || p.FromCache || p.Meta.Name != "toolstats" || p.Meta.Version != "1.2.3" ||
		p.Meta.ABI != 1 || strings.Join(p.Meta.Capabilities, ",") != "host.info,model.complete" || len(p.SHA256) != 64 {
		t.Fatalf("pulled %+v", p)
	}
	// By digest: the second time from the cache.
	byDigest := reg.Addr + "/team/toolstats@" + digest
	p2, err := New(t.TempDir()).Pull(ctx, byDigest)
	if err != nil || p2.FromCache || p2.SHA256 != p.SHA256 {
		t.Fatalf("by digest: %v %+v", err, p2)
	}
	p3, err := c.Pull(ctx, byDigest)
	if err != nil || !p3.FromCache {
		t.Fatalf("by digest, cached: %v %+v", err, p3)
	}

	// Registry down: a digest pin runs from the cache, a tag says why not.
	reg.Stop()
	if p4, err := c.Pull(ctx, byDigest); err != nil || !p4.FromCache {
		t.Fatalf("pinned pull with the registry down: %v", err)
	}
	if _, err := c.Pull(ctx, ref); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("tag pull with the registry down: %v", err)
	}
}

func TestTamperedBlobRefused(t *testing.T) {
	reg := ocitest.Start(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	c := New(t.TempDir())
	ctx := context.Background()
	wasm := bytes.Repeat([]byte("honest bytes "), 500)
	ref := reg.Addr + "/team/p:1"
	if _, err := c.Push(ctx, ref, wasm, meta); err != nil {
		t.Fatal(err)
	}
	evil := bytes.Clone(wasm)
	evil[10] ^= 0xff
	sum := sha256Hex(wasm)
	if err := os.WriteFile(reg.Blob("sha256:"+sum), evil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.Pull(ctx, ref)
	if !errors.Is(err, ErrTampered) {
		t.Fatalf("tampered blob: %v", err)
	}
}

// TestCacheTamperingRefused swaps the cached bytes of a plugin: with the
// registry up, pulls by digest and by tag return the registry's verified
// bytes and repair the entry; with it down, the pull fails as tampered.
func TestCacheTamperingRefused(t *testing.T) {
	reg := ocitest.Start(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	c := New(t.TempDir())
	ctx := context.Background()
	wasm := []byte("cached plugin")
	tag := reg.Addr + "/team/p:1"
	digest, err := c.Push(ctx, tag, wasm, meta)
	if err != nil {
		t.Fatal(err)
	}
	byDigest := reg.Addr + "/team/p@" + digest
	p, err := c.Pull(ctx, byDigest)
	if err != nil {
		t.Fatal(err)
	}
	swap := func(file string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(filepath.Dir(p.Path), file), []byte("swapped "+file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ ref, file string }{{byDigest, "plugin.wasm"}, {tag, "plugin.wasm"}, {byDigest, "manifest.json"}} {
		ref := tc.ref
		swap(tc.file)
		got, err := c.Pull(ctx, ref)
		if err != nil {
			t.Fatalf("pull %s with a swapped %s and the registry up: %v", ref, tc.file, err)
		}
		if !bytes.Equal(got.Wasm, wasm) || got.SHA256 != sha256Hex(wasm) || got.FromCache {
			t.Fatalf("pull %s returned %q (from cache: %v), want the registry's verified bytes", ref, got.Wasm, got.FromCache)
		}
		if ref == byDigest && !errors.Is(got.Refused, ErrTampered) {
			t.Errorf("pull %s: the refused entry is not reported: %v", ref, got.Refused)
		}
		if b, _ := os.ReadFile(p.Path); !bytes.Equal(b, wasm) {
			t.Errorf("pull %s left the swapped entry in the cache: %q", ref, b)
		}
		if again, err := c.Pull(ctx, byDigest); err != nil || !again.FromCache || !bytes.Equal(again.Wasm, wasm) {
			t.Errorf("the repaired entry is not used: %v %+v", err, again)
		}
	}

	swap("plugin.wasm")
	reg.Stop()
	_, err = c.Pull(ctx, byDigest)
	if !errors.Is(err, ErrTampered) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a swapped entry with the registry down: %v, want tampered and unreachable", err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestBadReferences(t *testing.T) {
	c := New(t.TempDir())
	ctx := context.Background()
	for _, ref := range []string{"oci://", "oci://no-repo", "oci://127.0.0.1:1/a/b@sha256:nothex"} {
		if _, err := c.Pull(ctx, ref); err == nil {
			t.Errorf("%q accepted", ref)
		}
	}
	if _, err := c.Push(ctx, "127.0.0.1:1/a/b", []byte("x"), meta); err == nil || !strings.Contains(err.Error(), "no tag") {
		t.Errorf("push without tag: %v", err)
	}
}

// BenchmarkPull: a 4 MiB plugin from the registry on 127.0.0.1 (fresh
// cache each time), and from the cache by digest.
func BenchmarkPull(b *testing.B) {
	reg := ocitest.Start(b)
	b.Setenv("DOCKER_CONFIG", b.TempDir())
	ctx := context.Background()
	wasm := bytes.Repeat([]byte("0123456789abcdef"), 256<<10)
	digest, err := New(b.TempDir()).Push(ctx, reg.Addr+"/bench/p:1", wasm, meta)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("registry", func(b *testing.B) {
		for b.Loop() {
			if _, err := New(b.TempDir()).Pull(ctx, reg.Addr+"/bench/p:1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := New(b.TempDir())
		ref := reg.Addr + "/bench/p@" + digest
		c.Pull(ctx, ref)
		for b.Loop() {
			if p, err := c.Pull(ctx, ref); err != nil || !p.FromCache {
				b.Fatal(err)
			}
		}
	})
}

// TestDockerCredentials: a registry that wants a password refuses an
// anonymous push with a clear error, and takes the credentials of
// Docker's config.json.
func TestDockerCredentials(t *testing.T) {
	reg := ocitest.StartWithAuth(t, "team", "s3cret-pass")
	cfgDir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfgDir)
	ctx := context.Background()
	ref := reg.Addr + "/team/p:1"
	_, err := New(t.TempDir()).Push(ctx, ref, []byte("plugin"), meta)
	if !errors.Is(err, ErrCredentials) || !strings.Contains(err.Error(), "docker login "+reg.Addr) {
		t.Fatalf("anonymous push: %v", err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte("team:s3cret-pass"))
	os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"auths":{"`+reg.Addr+`":{"auth":"`+auth+`"}}}`), 0o600)
	c := New(t.TempDir())
	if _, err := c.Push(ctx, ref, []byte("plugin"), meta); err != nil {
		t.Fatalf("push with Docker's credentials: %v", err)
	}
	os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"auths":{"`+reg.Addr+`":{"auth":"`+base64.StdEncoding.EncodeToString([]byte("team:wrong"))+`"}}}`), 0o600)
	if _, err := New(t.TempDir()).Pull(ctx, ref); !errors.Is(err, ErrCredentials) {
		t.Fatalf("pull with a wrong password: %v", err)
	}
	os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"auths":{"`+reg.Addr+`":{"auth":"`+auth+`"}}}`), 0o600)
	if p, err := c.Pull(ctx, ref); err != nil || p.Meta.Name != "toolstats" {
		t.Fatalf("pull with Docker's credentials: %v", err)
	}

	// A credential helper (credsStore), as `docker login` sets up with a
	// keychain: docker-credential-NAME get reads the host on stdin.
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "docker-credential-proctortest"), []byte("#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread host\nprintf '{\"ServerURL\":\"%s\",\"Username\":\"team\",\"Secret\":\"s3cret-pass\"}' \"$host\"\n"), 0o755)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"credsStore":"proctortest"}`), 0o600)
	if _, err := New(t.TempDir()).Pull(ctx, ref); err != nil {
		t.Fatalf("pull through a credential helper: %v", err)
	}
}

// TestLyingRegistryRefused: a registry that declares a huge manifest or
// plugin layer is refused before anything is fetched (fetching allocates
// the declared size up front: 16 TiB would kill proctor).
func TestLyingRegistryRefused(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	layer := `{"mediaType":"` + LayerType + `","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1099511627776}`
	honest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"` + ArtifactType +
		`","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[` + layer + `]}`)
	for _, tc := range []struct {
		name string
		size int64 // the manifest size the registry declares
	}{
		{"manifest of 16 TiB", 16 << 40},
		{"manifest of 5 MiB", 5 << 20},
		{"layer of 1 TiB", int64(len(honest))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var gets []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v2/" {
					return
				}
				if r.Method == http.MethodGet {
					mu.Lock()
					gets = append(gets, r.URL.Path)
					mu.Unlock()
				}
				if !strings.Contains(r.URL.Path, "/manifests/") {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
				w.Header().Set("Docker-Content-Digest", "sha256:"+sha256Hex(honest))
				w.Header().Set("Content-Length", strconv.FormatInt(tc.size, 10))
				if r.Method == http.MethodGet && tc.size == int64(len(honest)) {
					w.Write(honest)
				}
			}))
			defer srv.Close()
			_, err := New(t.TempDir()).Pull(context.Background(), strings.TrimPrefix(srv.URL, "http://")+"/team/p:1")
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("pull: %v, want ErrTooLarge", err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, g := range gets {
				if tc.size != int64(len(honest)) || strings.Contains(g, "/blobs/") {
					t.Errorf("fetched %s although the declared size is over the cap", g)
				}
			}
		})
	}
}

// silentRegistry accepts connections on 127.0.0.1 and never answers; each
// accepted connection is announced on the channel.
func silentRegistry(t *testing.T) (string, <-chan struct{}) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 16)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String(), accepted
}

// within runs f and fails the test if it has not returned by the test's
// deadline: a guard against hanging forever, not a measure of speed.
func within(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-poll.After(t):
		t.Fatal("hung: no answer")
		return nil
	}
}

// TestSilentRegistry: a registry that accepts the connection and never
// answers is given up on with an error naming it, for pulls and pushes; a
// Ctrl-C meanwhile is an interruption, not an unreachable registry.
func TestSilentRegistry(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	addr, accepted := silentRegistry(t)
	c := New(t.TempDir(), withRequestTimeout(50*time.Millisecond), withRetries(0))
	ctx := context.Background()
	err := within(t, func() error { _, err := c.Pull(ctx, addr+"/team/p:1"); return err })
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr+" did not answer within 50ms") {
		t.Errorf("pull from a silent registry: %v", err)
	}
	err = within(t, func() error { _, err := c.Push(ctx, addr+"/team/p:1", []byte("x"), meta); return err })
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("push to a silent registry: %v", err)
	}

	// The whole pull has its own deadline, whatever each request's.
	c = New(t.TempDir(), withTimeout(50*time.Millisecond), withRetries(0))
	err = within(t, func() error { _, err := c.Pull(ctx, addr+"/team/p:1"); return err })
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "not done within 50ms") {
		t.Errorf("pull past its deadline: %v", err)
	}

	for len(accepted) > 0 {
		<-accepted
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { <-accepted; cancel() }()
	err = within(t, func() error { _, err := New(t.TempDir()).Pull(cctx, addr+"/team/p:1"); return err })
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Errorf("pull cancelled by the caller: %v", err)
	}
}

// TestRegistryServerError: a registry that answers 5xx is retried a
// bounded number of times, then reported as failing on its side (the
// unreachable class: try again later), not as a bad reference.
func TestRegistryServerError(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	var mu sync.Mutex
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"errors":[{"code":"UNAVAILABLE","message":"down for maintenance"}]}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, err := New(t.TempDir(), withRetries(1)).Pull(context.Background(), addr+"/team/p:1")
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("pull from a failing registry: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 2 {
		t.Errorf("%d requests, want 2 (one retry)", requests)
	}
}

// TestMalformedDockerConfig: a config.json that cannot be read is said,
// naming the file, instead of silently dropping every credential.
func TestMalformedDockerConfig(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", dir)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{not json"), 0o600)
	var buf bytes.Buffer
	New(t.TempDir(), withLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), filepath.Join(dir, "config.json")) {
		t.Errorf("no warning naming the file: %q", buf.String())
	}
}

func FuzzPluginLayer(f *testing.F) {
	f.Add([]byte(`{"schemaVersion":2,"artifactType":"application/vnd.proctor.plugin.v1","layers":[{"mediaType":"application/vnd.proctor.plugin.layer.v1.wasm","digest":"sha256:` + strings.Repeat("a", 64) + `","size":3}]}`))
	f.Add([]byte(`{"layers":[{"mediaType":"application/vnd.proctor.plugin.layer.v1.wasm","size":-1}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, l, err := pluginLayer(raw)
		if err == nil && (l.Size < 0 || l.Size > maxPlugin || l.Digest.Validate() != nil) {
			t.Fatalf("accepted layer %+v", l)
		}
	})
}
