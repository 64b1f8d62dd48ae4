// Package oci pushes plugins to OCI registries and pulls them back, as
// artifacts of their own type: one layer holding the .wasm bytes, and the
// plugin's manifest (name, version, ABI, capabilities, sha256) as
// annotations, so a registry's UI and `oras manifest fetch` show what a
// plugin is without running it.
//
// Pulled plugins are kept in a cache by manifest digest and checked on
// every use: the layer's digest is verified while it is fetched, and the
// bytes must hash to the sha256 the annotations declare. A reference pinned
// by digest runs from the cache without reaching the registry, so a pinned
// run works with the registry down.
//
// Credentials come from Docker's config (~/.docker/config.json, or
// $DOCKER_CONFIG) and its credential helpers. Registries on the loopback
// interface are spoken to over plain HTTP, as Docker does.
//
// This is the only package that imports oras-go.
package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// Media and artifact types of a proctor plugin.
const (
	ArtifactType = "application/vnd.proctor.plugin.v1"
	LayerType    = "application/vnd.proctor.plugin.layer.v1.wasm"
)

// Annotation keys.
const (
	AnnTitle        = ocispec.AnnotationTitle
	AnnVersion      = ocispec.AnnotationVersion
	AnnDescription  = ocispec.AnnotationDescription
	AnnABI          = "dev.proctor.plugin.abi"
	AnnCapabilities = "dev.proctor.plugin.capabilities"
	AnnSHA256       = "dev.proctor.plugin.sha256"
)

// Scheme prefixes a plugin reference in a config.
const Scheme = "oci://"

// Caps on what a registry may make proctor fetch, checked against the
// sizes the registry declares before anything is read: fetching
// allocates the declared size up front.
const (
	maxManifest = 4 << 20   // a plugin's manifest is a few hundred bytes
	maxPlugin   = 256 << 20 // the plugin layer
)

// Meta describes a plugin for the annotations.
type Meta struct {
	Name         string
	Version      string
	Description  string
	ABI          int
	Capabilities []string
}

// Pulled is a plugin fetched (or found in the cache).
type Pulled struct {
	Ref    string // the reference as given, without the scheme
	Digest string // the manifest's digest: what a pin names
	SHA256 string // of Wasm
	// Wasm holds the bytes that were verified: load these, never the
	// file at Path again, which anyone with access to the cache can swap.
	Wasm      []byte
	Path      string // the cache entry's .wasm file, to show where it is
	Meta      Meta
	FromCache bool // served from the cache, without the registry
	// Refused says why the cache entry of the digest was not used: it
	// failed verification, and the registry's bytes replaced it.
	Refused error
}

// ErrTampered: the registry served bytes other than those it named.
var ErrTampered = errors.New("plugin bytes do not match their digest")

// ErrTooLarge: the registry declared a manifest or layer over its cap.
var ErrTooLarge = errors.New("over the size cap")

// ErrUnreachable: the registry did not answer.
var ErrUnreachable = errors.New("registry unreachable")

// Client pushes and pulls plugins; the zero value is not usable, see New.
type Client struct {
	cacheDir       string
	cred           auth.CredentialFunc
	credErr        error // why Docker's config could not be read
	requestTimeout time.Duration
	timeout        time.Duration
	retries        int
	log            *slog.Logger
	http           *http.Client
}

// option tunes a Client; the package's tests use them to keep a silent
// registry's wait short.
type option func(*Client)

// withRequestTimeout bounds each exchange with the registry: connecting,
// the TLS handshake, and the wait for an answer's headers (default 30s).
func withRequestTimeout(d time.Duration) option { return func(c *Client) { c.requestTimeout = d } }

// withTimeout bounds a whole Push or Pull, retries included (default 10m).
func withTimeout(d time.Duration) option { return func(c *Client) { c.timeout = d } }

// withRetries sets how many times a request that timed out or got a 5xx
// or 429 answer is tried again, with backoff (default 3).
func withRetries(n int) option { return func(c *Client) { c.retries = n } }

// withLogger receives the client's warnings (default slog.Default()).
func withLogger(l *slog.Logger) option { return func(c *Client) { c.log = l } }

// New returns a client caching pulled plugins under cacheDir. Docker's
// credentials are read when present; their absence is not an error, and
// a config that cannot be read is logged as a warning naming the file.
func New(cacheDir string, opts ...option) *Client {
	c := &Client{cacheDir: cacheDir, requestTimeout: 30 * time.Second, timeout: 10 * time.Minute, retries: 3, log: slog.Default()}
	for _, o := range opts {
		o(c)
	}
	if path, err := dockerConfig(); err != nil {
		c.credErr = err
	} else if store, err := credentials.NewStore(path, credentials.StoreOptions{}); err != nil {
		c.credErr = fmt.Errorf("%s: %w", path, err)
	} else {
		c.cred = credentials.Credential(store)
	}
	if c.credErr != nil {
		c.log.Warn("docker config unreadable: registries get no credentials", "err", c.credErr)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: c.requestTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = c.requestTimeout
	tr.ResponseHeaderTimeout = c.requestTimeout
	policy := &retry.GenericPolicy{Retryable: retry.DefaultPredicate, Backoff: retry.DefaultBackoff,
		MinWait: 200 * time.Millisecond, MaxWait: 3 * time.Second, MaxRetry: c.retries}
	c.http = &http.Client{Transport: &retry.Transport{Base: tr, Policy: func() retry.Policy { return policy }}}
	return c
}

// dockerConfig is the file Docker keeps credentials in, as Docker finds it.
func dockerConfig() (string, error) {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".docker")
	}
	return filepath.Join(dir, "config.json"), nil
}

// Strip removes the oci:// scheme.
func Strip(ref string) string { return strings.TrimPrefix(ref, Scheme) }

func (c *Client) repo(ref string) (*remote.Repository, registry.Reference, error) {
	r, err := registry.ParseReference(Strip(ref))
	if err != nil {
		return nil, r, fmt.Errorf("plugin reference %q: %w (want registry/repository:tag or @sha256:...)", ref, err)
	}
	repo, err := remote.NewRepository(r.Registry + "/" + r.Repository)
	if err != nil {
		return nil, r, err
	}
	repo.PlainHTTP = loopback(r.Registry)
	client := &auth.Client{Client: c.http, Cache: auth.NewCache(), Credential: c.cred}
	client.SetUserAgent("proctor")
	repo.Client = client
	return repo, r, nil
}

func loopback(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ErrCredentials: the registry wants credentials proctor does not have or
// that it refused.
var ErrCredentials = errors.New("the registry wants credentials")

// classify names the failures a user can act on: credentials, and a
// registry that cannot be reached, does not answer in time or fails on
// its side (5xx, or 429 after the retries). parent is the caller's
// context: when it is done (Ctrl-C), its error is returned as it is; ctx
// is the one with the client's deadline.
func (c *Client) classify(parent, ctx context.Context, registry string, err error) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("%w: %v", perr, err)
	}
	var re *errcode.ErrorResponse
	if errors.Is(err, auth.ErrBasicCredentialNotFound) || errors.As(err, &re) && re.StatusCode == http.StatusUnauthorized {
		msg := fmt.Sprintf("run `docker login %s` (Docker's config and credential helpers are read)", registry)
		if c.credErr != nil {
			msg += fmt.Sprintf("; Docker's config could not be read: %v", c.credErr)
		}
		return fmt.Errorf("%w: %s: %v", ErrCredentials, msg, err)
	}
	if errors.As(err, &re) && (re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests) {
		return fmt.Errorf("%w: %s answered HTTP %d, a failure on its side (retried up to %d times): %v", ErrUnreachable, registry, re.StatusCode, c.retries, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s: not done within %s: %v", ErrUnreachable, registry, c.timeout, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %s did not answer within %s: %v", ErrUnreachable, registry, c.requestTimeout, err)
	}
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, registry, err)
	}
	return err
}

// Push uploads wasm as ref (registry/repository:tag) and returns the
// manifest's digest.
func (c *Client) Push(ctx context.Context, ref string, wasm []byte, m Meta) (string, error) {
	repo, r, err := c.repo(ref)
	if err != nil {
		return "", err
	}
	if r.Reference == "" {
		return "", fmt.Errorf("plugin reference %q has no tag: push to registry/repository:tag", ref)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	sum := sha256.Sum256(wasm)
	layer := content.NewDescriptorFromBytes(LayerType, wasm)
	layer.Annotations = map[string]string{AnnTitle: m.Name + ".wasm"}
	if err := repo.Push(ctx, layer, bytes.NewReader(wasm)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return "", c.classify(parent, ctx, r.Registry, fmt.Errorf("push %s: %w", ref, err))
	}
	ann := map[string]string{
		AnnTitle: m.Name, AnnVersion: m.Version, AnnABI: strconv.Itoa(m.ABI),
		AnnCapabilities: strings.Join(m.Capabilities, ","), AnnSHA256: hex.EncodeToString(sum[:]),
	}
	if m.Description != "" {
		ann[AnnDescription] = m.Description
	}
	desc, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{
		Layers: []ocispec.Descriptor{layer}, ManifestAnnotations: ann,
	})
	if err != nil {
		return "", c.classify(parent, ctx, r.Registry, fmt.Errorf("push %s: %w", ref, err))
	}
	if err := repo.Tag(ctx, desc, r.Reference); err != nil {
		return "", c.classify(parent, ctx, r.Registry, fmt.Errorf("tag %s: %w", ref, err))
	}
	return desc.Digest.String(), nil
}

// entry is the cache folder of one manifest digest.
func (c *Client) entry(digest string) string {
	return filepath.Join(c.cacheDir, strings.ReplaceAll(digest, ":", "-"))
}

// Pull returns the plugin ref names, its bytes verified. A reference by
// digest is served from the cache when its entry passes verification; a
// tag is resolved at the registry every time. An entry that fails
// verification is never used: the registry's bytes replace it, and when
// the registry cannot be reached the error matches both ErrTampered and
// ErrUnreachable.
func (c *Client) Pull(ctx context.Context, ref string) (*Pulled, error) {
	repo, r, err := c.repo(ref)
	if err != nil {
		return nil, err
	}
	var refused error
	if d, err := r.Digest(); err == nil {
		p, err := c.cached(d.String())
		if err == nil {
			p.Ref = Strip(ref)
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			refused = err
		}
	}
	if r.Reference == "" {
		return nil, fmt.Errorf("plugin reference %q has neither a tag nor a digest", ref)
	}
	p, err := c.fetch(ctx, repo, r, ref)
	if err != nil {
		if refused != nil {
			return nil, fmt.Errorf("%w (and the cached copy was refused: %w)", err, refused)
		}
		return nil, err
	}
	p.Refused = refused
	return p, nil
}

// fetch pulls ref from the registry, verifies it and stores it in the cache.
func (c *Client) fetch(parent context.Context, repo *remote.Repository, r registry.Reference, ref string) (*Pulled, error) {
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	desc, err := repo.Resolve(ctx, r.Reference)
	if err != nil {
		return nil, c.classify(parent, ctx, r.Registry, fmt.Errorf("resolve %s: %w", ref, err))
	}
	if desc.Size <= 0 || desc.Size > maxManifest {
		return nil, fmt.Errorf("%s: the registry says the manifest is %d bytes: %w of %d MiB for a plugin manifest, so it is not fetched", ref, desc.Size, ErrTooLarge, maxManifest>>20)
	}
	raw, err := content.FetchAll(ctx, repo, desc)
	if err != nil {
		return nil, c.fetchErr(parent, ctx, r.Registry, ref, err)
	}
	man, layer, err := pluginLayer(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	wasm, err := content.FetchAll(ctx, repo.Blobs(), layer)
	if err != nil {
		return nil, c.fetchErr(parent, ctx, r.Registry, ref, err)
	}
	meta, sha, err := check(man.Annotations, wasm)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	p := &Pulled{Ref: Strip(ref), Digest: desc.Digest.String(), SHA256: sha, Wasm: wasm, Meta: meta}
	if err := c.store(p, raw, wasm); err != nil {
		return nil, fmt.Errorf("cache %s: %w", ref, err)
	}
	return p, nil
}

// pluginLayer reads a manifest from a registry and finds the plugin layer.
func pluginLayer(raw []byte) (ocispec.Manifest, ocispec.Descriptor, error) {
	var man ocispec.Manifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return man, ocispec.Descriptor{}, fmt.Errorf("the manifest is not an OCI image manifest: %v", err)
	}
	if man.ArtifactType != ArtifactType && man.Config.MediaType != ArtifactType {
		return man, ocispec.Descriptor{}, fmt.Errorf("not a proctor plugin (artifact type %q)", man.ArtifactType)
	}
	for _, l := range man.Layers {
		if l.MediaType == LayerType {
			if l.Size > maxPlugin || l.Size < 0 {
				return man, l, fmt.Errorf("the plugin layer is %d bytes: %w of %d MiB", l.Size, ErrTooLarge, maxPlugin>>20)
			}
			if err := l.Digest.Validate(); err != nil {
				return man, l, fmt.Errorf("the plugin layer's digest: %v", err)
			}
			return man, l, nil
		}
	}
	return man, ocispec.Descriptor{}, errors.New("no plugin layer")
}

func (c *Client) fetchErr(parent, ctx context.Context, registry, ref string, err error) error {
	if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) {
		return fmt.Errorf("%s: %w: %v", ref, ErrTampered, err)
	}
	return c.classify(parent, ctx, registry, fmt.Errorf("fetch %s: %w", ref, err))
}

// check reads the annotations and verifies the bytes against the sha256
// they declare.
func check(ann map[string]string, wasm []byte) (Meta, string, error) {
	sum := sha256.Sum256(wasm)
	sha := hex.EncodeToString(sum[:])
	if want := ann[AnnSHA256]; want != "" && !strings.EqualFold(want, sha) {
		return Meta{}, "", fmt.Errorf("%w: the bytes hash to %s, the manifest says %s", ErrTampered, sha, want)
	}
	abiV, _ := strconv.Atoi(ann[AnnABI])
	m := Meta{Name: ann[AnnTitle], Version: ann[AnnVersion], Description: ann[AnnDescription], ABI: abiV}
	if caps := ann[AnnCapabilities]; caps != "" {
		m.Capabilities = strings.Split(caps, ",")
	}
	return m, sha, nil
}

// store puts a pulled plugin in the cache: written in a temporary folder
// renamed into place, so an entry is whole or absent. An entry already
// there stays when it passes verification (another pull of the same
// digest); one that fails is replaced.
func (c *Client) store(p *Pulled, manifest, wasm []byte) error {
	dir := c.entry(p.Digest)
	if err := os.MkdirAll(c.cacheDir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(c.cacheDir, ".pull-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "manifest.json"), manifest, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "plugin.wasm"), wasm, 0o644); err != nil {
		return err
	}
	p.Path = filepath.Join(dir, "plugin.wasm")
	err = os.Rename(tmp, dir)
	if err == nil {
		return nil
	}
	if _, serr := os.Lstat(dir); serr != nil {
		return err // no entry in the way: the rename itself failed
	}
	if _, err := c.cached(p.Digest); err == nil {
		return nil
	}
	// Move the bad entry aside, then put ours in its place.
	stale, err := os.MkdirTemp(c.cacheDir, ".stale-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stale)
	if err := os.Rename(dir, filepath.Join(stale, "entry")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("replace the cache entry %s, which fails verification: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, cerr := c.cached(p.Digest); cerr == nil {
			return nil // another pull put a good one in meanwhile
		}
		return fmt.Errorf("replace the cache entry %s, which fails verification: %w", dir, err)
	}
	return nil
}

// cached returns the cache entry of a manifest digest, verified again:
// the manifest must hash to its digest and the bytes to their sha256.
func (c *Client) cached(digest string) (*Pulled, error) {
	dir := c.entry(digest)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	algo, hexd, _ := strings.Cut(digest, ":")
	sum := sha256.Sum256(raw)
	if algo != "sha256" || hex.EncodeToString(sum[:]) != hexd {
		return nil, fmt.Errorf("cache entry %s: %w", dir, ErrTampered)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return nil, err
	}
	wasm, err := os.ReadFile(filepath.Join(dir, "plugin.wasm"))
	if err != nil {
		return nil, err
	}
	meta, sha, err := check(man.Annotations, wasm)
	if err != nil {
		return nil, fmt.Errorf("cache entry %s: %w", dir, err)
	}
	if !slices.ContainsFunc(man.Layers, func(l ocispec.Descriptor) bool { return l.MediaType == LayerType && l.Digest.String() == "sha256:"+sha }) {
		return nil, fmt.Errorf("cache entry %s: %w: no layer of the manifest has the bytes' digest", dir, ErrTampered)
	}
	return &Pulled{Digest: digest, SHA256: sha, Wasm: wasm, Path: filepath.Join(dir, "plugin.wasm"), Meta: meta, FromCache: true}, nil
}
