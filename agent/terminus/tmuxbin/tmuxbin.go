// Package tmuxbin finds the static tmux that build.sh builds once per
// machine (`make tmux`): Debian bookworm's tmux, which Terminus-2 brings
// into sandboxes whose image has none.
package tmuxbin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

//go:embed build.sh
var recipe embed.FS

// ErrNotBuilt: the static tmux of this recipe has not been built on this
// machine.
var ErrNotBuilt = errors.New("the static tmux is not built: run `make tmux` once on this machine")

// Version is the tmux version the recipe builds (TMUX_VERSION in build.sh,
// without Debian's revision).
func Version() string {
	b, _ := recipe.ReadFile("build.sh")
	m := regexp.MustCompile(`(?m)^TMUX_VERSION=([^\s-]+)`).FindSubmatch(b)
	if m == nil {
		return "unknown"
	}
	return string(m[1])
}

// Key names what the recipe builds: the version and the first 12 hex
// digits of a sha256 over the recipe's files (name, NUL, bytes, NUL, in
// name order), as build.sh computes it.
func Key() string {
	names, _ := fs.Glob(recipe, "*")
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		if strings.HasSuffix(n, ".go") {
			continue
		}
		b, _ := recipe.ReadFile(n)
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	return Version() + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// Dir is the folder that holds the built tmux: $PROCTOR_TMUX_DIR if set,
// else <cache>/tmux/<Key>, where <cache> is $PROCTOR_CACHE_DIR or the
// user's cache folder + /proctor.
func Dir() string {
	if d := os.Getenv("PROCTOR_TMUX_DIR"); d != "" {
		return d
	}
	base := os.Getenv("PROCTOR_CACHE_DIR")
	if base == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(d, "proctor")
	}
	return filepath.Join(base, "tmux", Key())
}

// Find returns Dir when it holds a built tmux, else ErrNotBuilt. When a
// build is under way on this machine (`build.sh --background`, which `make
// test` starts), Find waits for it to end first.
func Find() (string, error) {
	d := Dir()
	if built(d) {
		return d, nil
	}
	if os.Getenv("PROCTOR_TMUX_DIR") == "" {
		waitBuild(filepath.Join(filepath.Dir(d), ".lock"))
	}
	if !built(d) {
		return "", ErrNotBuilt
	}
	return d, nil
}

func built(d string) bool {
	st, err := os.Stat(filepath.Join(d, "tmux"))
	return err == nil && st.Mode()&0o111 != 0
}

// Binary reads the built tmux.
func Binary() ([]byte, error) {
	d, err := Find()
	if err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(d, "tmux"))
}
