// Package plugin finds plugins and loads them: a bundled plugin by its
// short name, an oci:// reference (pulled, verified, cached) or a .wasm
// file by path, hashed and checked against a sha256 pin before anything of
// it runs.
//
// Its subpackages are the plugin runtime and the ways plugins travel: wasm
// (wazero: load, compile cache, capabilities, one instance per rollout, host
// functions), oci (push and pull as OCI artifacts) and bundled (the plugins
// embedded in the binary).
package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin/bundled"
	"github.com/proctor-dev/proctor/host/plugin/oci"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
)

// Loader finds plugins by reference.
type Loader struct {
	// BaseDir is where relative paths start (a config file's folder); ""
	// is the current directory.
	BaseDir string
	// OCICache is the folder pulled plugins are kept in.
	OCICache string
}

// File is a plugin's bytes and where they came from, read without running
// anything.
type File struct {
	Wasm   []byte
	SHA256 string
	// Source says where the bytes came from: "bundled:NAME", "file:PATH",
	// or "oci:REPOSITORY@DIGEST", with " (cached)" when pulled from the
	// cache.
	Source string
	Digest string      // the OCI manifest digest, for oci:// plugins
	Pulled *oci.Pulled // for oci:// plugins
}

// Read reads a bundled plugin by short name, an oci:// reference (pulled,
// verified) or a .wasm file by path, and hashes the bytes.
func (l Loader) Read(ctx context.Context, ref string) (*File, error) {
	var f *File
	var err error
	switch {
	case strings.HasPrefix(ref, oci.Scheme):
		f, err = l.pull(ctx, ref)
	case bundled.IsName(ref):
		b, lerr := bundled.Lookup(ref)
		if lerr != nil {
			return nil, &fault.Usage{Err: fmt.Errorf("plugin %s: %w", ref, lerr)}
		}
		f = &File{Wasm: b, Source: "bundled:" + ref}
	default:
		path := ref
		if !filepath.IsAbs(path) && l.BaseDir != "" {
			path = filepath.Join(l.BaseDir, path)
		}
		b, rerr := os.ReadFile(path)
		if rerr != nil {
			return nil, &fault.Usage{Err: fmt.Errorf("plugin %s: %w", ref, rerr), Hint: "give a bundled name (" + strings.Join(bundled.Known, ", ") + ") or the path of a .wasm file"}
		}
		f = &File{Wasm: b, Source: "file:" + path}
	}
	if err != nil {
		return nil, err
	}
	if f.Pulled != nil {
		f.SHA256 = f.Pulled.SHA256 // Pull hashed these very bytes to verify them
	} else {
		sum := sha256.Sum256(f.Wasm)
		f.SHA256 = hex.EncodeToString(sum[:])
	}
	return f, nil
}

// pull pulls an oci:// plugin and verifies it.
func (l Loader) pull(ctx context.Context, ref string) (*File, error) {
	pulled, err := oci.New(l.OCICache).Pull(ctx, ref)
	switch {
	case errors.Is(err, oci.ErrUnreachable) && errors.Is(err, oci.ErrTampered):
		return nil, &fault.Infra{Err: fmt.Errorf("plugin %s: %w", ref, err), Hint: "the cached copy was altered and is never run: bring the registry back to pull the plugin again"}
	case errors.Is(err, oci.ErrUnreachable):
		return nil, &fault.Infra{Err: fmt.Errorf("plugin %s: %w", ref, err), Hint: "check that the registry is up and try again, or pin the plugin by digest (oci://registry/repo@sha256:...) to run from the cache"}
	case err != nil:
		return nil, &fault.Usage{Err: fmt.Errorf("plugin %s: %w", ref, err), Hint: "check the reference; a plugin whose bytes do not match its digest is never run"}
	}
	if pulled.Refused != nil {
		slog.Warn("cached plugin failed verification; the registry's copy replaced it", "plugin", ref, "err", pulled.Refused)
	}
	r := oci.Strip(ref)
	if base, _, ok := strings.Cut(r, "@"); ok {
		r = base
	}
	f := &File{Wasm: pulled.Wasm, Pulled: pulled} // the verified bytes, not the cache file again
	f.Source, f.Digest = "oci:"+r+"@"+pulled.Digest, pulled.Digest
	if pulled.FromCache {
		f.Source += " (cached)"
	}
	return f, nil
}

// Loaded is a plugin loaded on a runtime, with where it came from.
type Loaded struct {
	*wasm.Plugin
	Source string // as File's
	Digest string // the OCI manifest digest, for oci:// plugins
}

// Load reads a plugin (see Read) and loads it on rt. A sha256 pin is
// compared with the bytes before anything of the plugin runs: other bytes
// are never compiled, initialised or asked to describe themselves.
func (l Loader) Load(ctx context.Context, rt *wasm.Runtime, ref, pin string) (*Loaded, error) {
	f, err := l.Read(ctx, ref)
	if err != nil {
		return nil, err
	}
	if pin != "" && !strings.EqualFold(strings.TrimPrefix(pin, "sha256:"), f.SHA256) {
		return nil, &fault.Usage{Err: fmt.Errorf("plugin %s has sha256 %s, but the config pins %s", ref, f.SHA256, pin), Hint: "refusing to run other bytes than pinned: update the pin only if you trust the new plugin"}
	}
	p, err := rt.Load(ctx, ref, f.Wasm)
	if err != nil {
		return nil, &fault.Infra{Err: err}
	}
	return &Loaded{Plugin: p, Source: f.Source, Digest: f.Digest}, nil
}
