package plugin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
)

// TestLoaderReadsAndPins: a relative path is found from BaseDir and its
// bytes hashed; a pin other than the bytes' sha256 is the user's mistake
// and nothing is loaded; the right pin (with or without "sha256:") loads
// the plugin with where it came from; a missing file says what to give.
func TestLoaderReadsAndPins(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := os.ReadFile(wasmtest.Build(t, "./plugins/example"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "example.wasm"), b, 0o644)
	sum := sha256.Sum256(b)
	want := hex.EncodeToString(sum[:])
	l := plugin.Loader{BaseDir: dir, OCICache: t.TempDir()}

	f, err := l.Read(ctx, "example.wasm")
	if err != nil || f.SHA256 != want || f.Source != "file:"+filepath.Join(dir, "example.wasm") {
		t.Fatalf("Read: %+v, %v", f, err)
	}
	rt, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	_, err = l.Load(ctx, rt, "example.wasm", strings.Repeat("0", 64))
	var u *fault.Usage
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "but the config pins") || u.Hint == "" {
		t.Errorf("wrong pin: %v, want a usage fault with a hint", err)
	}
	p, err := l.Load(ctx, rt, "example.wasm", "sha256:"+strings.ToUpper(want))
	if err != nil || p.SHA256() != want || p.Manifest().Name != "example" || p.Source != f.Source {
		t.Fatalf("Load with the right pin: %v", err)
	}
	_, err = l.Read(ctx, "missing.wasm")
	if !errors.As(err, &u) || !strings.Contains(u.Hint, "bundled name") {
		t.Errorf("missing file: %v", err)
	}
}
