// Package wasmtest builds plugins from source for tests, so every test that
// loads a plugin runs real wasm compiled by the test run itself.
package wasmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// makeRoot makes the test process's folder once; mu is held.
func makeRoot() error {
	if dir != "" {
		return nil
	}
	d, err := os.MkdirTemp("", "proctor-wasmtest-")
	if err != nil {
		return err
	}
	dir = d
	return nil
}

// TempDir returns a new folder that lives as long as the test process,
// for what tests share across tests (a compile cache, a built binary),
// where t.TempDir would remove it after the first. Run removes it.
func TempDir(prefix string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if err := makeRoot(); err != nil {
		return "", err
	}
	return os.MkdirTemp(dir, prefix)
}

// Run runs the tests and then removes what Build and TempDir wrote,
// which no test's cleanup can; without it every test process would leave
// its plugins (tens of MB) in the system's temporary folder. A TestMain
// ends with os.Exit(wasmtest.Run(m)).
func Run(m interface{ Run() int }) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "wasmtest: %v\n", err)
		}
		dir, built = "", map[string]string{}
	}
	return code
}

// Flags are the go build flags of make plugins, which plugin new's
// Makefile uses too: no symbol table (the wasm name section) and no paths
// of the build machine. Panics still name their functions and lines.
var Flags = []string{"-trimpath", "-ldflags=-s -w"}

// Build compiles the main package pkg (an import path, or a path relative
// to the module root such as "./plugins/example") to wasm with Flags, once
// per test process, and returns the file's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	return BuildWith(t, pkg, Flags...)
}

// BuildWith is Build with other go build flags than Flags.
func BuildWith(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := strings.Join(append([]string{pkg}, flags...), " ")
	if p, ok := built[key]; ok {
		return p
	}
	if err := makeRoot(); err != nil {
		t.Fatal(err)
	}
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("find module root: %v", err)
	}
	// One folder per build: the file keeps the package's name.
	sub := filepath.Join(dir, fmt.Sprint(len(built)))
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(sub, strings.NewReplacer("/", "_", ".", "_").Replace(pkg)+".wasm")
	args := append([]string{"build", "-buildmode=c-shared"}, flags...)
	cmd := exec.Command("go", append(args, "-o", out, pkg)...)
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s to wasm: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out
}
