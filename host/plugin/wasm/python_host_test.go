package wasm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/python"
)

// The tests in python_*test.go run Python plugins built from source by the test
// run, under the real host. They need the runtime (make python-runtime):
// without it they skip, or fail when PROCTOR_REQUIRE_PYTHON=1 (CI).

var runtimeOnce = sync.OnceValues(func() (*python.Runtime, error) { return python.LoadRuntime("") })

func requireRuntime(t testing.TB) *python.Runtime {
	t.Helper()
	rt, err := runtimeOnce()
	if errors.Is(err, python.ErrNoRuntime) && os.Getenv("PROCTOR_REQUIRE_PYTHON") != "1" {
		t.Skipf("%v: run make python-runtime (PROCTOR_REQUIRE_PYTHON=1 makes this a failure)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// repoRoot is the module's folder.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

var (
	builtMu sync.Mutex
	built   = map[string][]byte{}
)

// buildPlugin builds the Python plugin at src (relative to the module
// root, or absolute) once per test process.
func buildPlugin(t testing.TB, src string) []byte {
	t.Helper()
	rt := requireRuntime(t)
	if !filepath.IsAbs(src) {
		src = filepath.Join(repoRoot(t), src)
	}
	builtMu.Lock()
	defer builtMu.Unlock()
	if b, ok := built[src]; ok {
		return b
	}
	b, err := python.Build(rt, src, python.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b = withImage(t, b)
	built[src] = b
	return b
}

// withImage adds the memory image, as proctor plugin build does.
func withImage(t testing.TB, b []byte) []byte {
	t.Helper()
	ctx := context.Background()
	r := newRuntime(t, wasm.Config{})
	p, err := r.Load(ctx, "build", b)
	if err != nil {
		t.Fatal(err)
	}
	image, err := p.Snapshot(ctx, python.InitHook)
	if err != nil {
		t.Fatal(err)
	}
	return python.WithImage(b, image)
}

var sharedCache = sync.OnceValue(func() string {
	d, err := wasmtest.TempDir("python-cache-")
	if err != nil {
		panic(err)
	}
	return d
})

func newRuntime(t testing.TB, cfg wasm.Config) *wasm.Runtime {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = sharedCache()
	}
	r, err := wasm.NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func loadPython(t testing.TB, r *wasm.Runtime, src string) *wasm.Plugin {
	t.Helper()
	p, err := r.Load(context.Background(), filepath.Base(strings.TrimSuffix(src, "/")), buildPlugin(t, src))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Grant(append(p.Manifest().Capabilities, p.Manifest().OptionalCapabilities...)); err != nil {
		t.Fatal(err)
	}
	return p
}
