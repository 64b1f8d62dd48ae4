package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/bundled"
	"github.com/proctor-dev/proctor/host/plugin/oci/ocitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestOCIPlugins pushes the tb2 plugin to a real registry on 127.0.0.1,
// runs it by tag and by digest, records the digest in the run manifest,
// keeps a digest-pinned run working with the registry down, and refuses a
// sha256 pin that does not match.
func TestOCIPlugins(t *testing.T) {
	sandboxtest.RequireDocker(t)
	reg := ocitest.Start(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("PROCTOR_CACHE_DIR", t.TempDir())
	root, _ := filepath.Abs("../..")
	wasmPath := wasmtest.Build(t, "./plugins/tb2")
	proctor := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	tag := "oci://" + reg.Addr + "/team/tb2:v1"
	code, out, errOut := proctor("plugin", "push", wasmPath, tag)
	if code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	digest := regexp.MustCompile(`digest  (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if digest == nil || !strings.Contains(out, `pin     plugin = "oci://`+reg.Addr+"/team/tb2@"+digest[1]+`"`) {
		t.Fatalf("push output:\n%s", out)
	}
	pinned := "oci://" + reg.Addr + "/team/tb2@" + digest[1]

	code, out, _ = proctor("plugin", "inspect", tag)
	if code != 0 || !strings.Contains(out, "source        oci:"+reg.Addr+"/team/tb2:v1@"+digest[1]) || !strings.Contains(out, "name          tb2") {
		t.Fatalf("inspect: exit %d\n%s", code, out)
	}

	eval := func(ref, outDir string, extra ...string) (int, string) {
		args := append([]string{"eval", filepath.Join(root, "examples/quickstart.toml"),
			"--set", "env.plugin=" + ref, "--set", `env.config.tasks=["hello-file"]`,
			"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"), "--out", outDir}, extra...)
		code, out, errOut := proctor(args...)
		return code, out + errOut
	}
	dir := t.TempDir()
	if code, out := eval(tag, filepath.Join(dir, "bytag")); code != 0 {
		t.Fatalf("eval by tag: exit %d\n%s", code, out)
	}
	var man rundir.Manifest
	b, _ := os.ReadFile(filepath.Join(dir, "bytag", rundir.ManifestFile))
	json.Unmarshal(b, &man)
	if man.Plugin.Digest != digest[1] || !strings.HasPrefix(man.Plugin.Source, "oci:") || man.Plugin.Name != "tb2" {
		t.Fatalf("manifest plugin: %+v", man.Plugin)
	}

	// A sha256 pin that does not match refuses to run.
	if code, out := eval(pinned, filepath.Join(dir, "badpin"), "--set", "env.sha256="+strings.Repeat("0", 64)); code != exitUsage || !strings.Contains(out, "pins") {
		t.Fatalf("wrong sha256 pin: exit %d\n%s", code, out)
	}

	// Registry down: the digest pin runs from the cache; a tag cannot.
	reg.Stop()
	if code, out := eval(pinned, filepath.Join(dir, "cached")); code != 0 {
		t.Fatalf("pinned eval with the registry down: exit %d\n%s", code, out)
	}
	code, out = eval(tag, filepath.Join(dir, "down"))
	if code != exitInfra || !strings.Contains(out, "registry unreachable") || !strings.Contains(out, "pin the plugin by digest") {
		t.Fatalf("tag eval with the registry down: exit %d\n%s", code, out)
	}
}

// TestRegistryFailureExitCode: a registry failing on its side (HTTP 503)
// is an unavailable dependency (exit 3) with a hint to try again, not a
// bad reference (exit 2).
func TestRegistryFailureExitCode(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("PROCTOR_CACHE_DIR", t.TempDir())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/p:1"
	for _, args := range [][]string{{"plugin", "pull", ref}, {"plugin", "inspect", "oci://" + ref}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != exitInfra || !strings.Contains(stderr.String(), "HTTP 503") || !strings.Contains(stderr.String(), "try again") {
			t.Errorf("%v: exit %d, want %d\n%s", args, code, exitInfra, stderr.String())
		}
	}
}

// withCustomSection returns a plugin's bytes with a custom section added:
// the same plugin to the runtime, other bytes (another sha256) to a pin.
func withCustomSection(wasm []byte, payload string) []byte {
	leb := func(n int) []byte {
		var b []byte
		for {
			c := byte(n & 0x7f)
			n >>= 7
			if n != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	name := "proctor-test"
	body := append(append(leb(len(name)), name...), payload...)
	return append(append(append(bytes.Clone(wasm), 0), leb(len(body))...), body...)
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestPluginPushPull: push takes a bundled name as well as a file; pull
// verifies and describes a plugin from its annotations without running
// it; a tag that moved under a sha256 pin is refused. Needs the registry,
// not Docker.
func TestPluginPushPull(t *testing.T) {
	reg := ocitest.Start(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("PROCTOR_CACHE_DIR", t.TempDir())
	proctor := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	// A bundled plugin by its name, not a path in the working directory.
	if !slices.Contains(bundled.Names(), "tb2") {
		if os.Getenv("PROCTOR_REQUIRE_DOCKER") == "1" {
			t.Fatal("the bundled tb2 plugin is not built: run make plugins")
		}
		t.Log("skipping the bundled push: run make plugins first")
	} else if code, out, errOut := proctor("plugin", "push", "tb2", reg.Addr+"/team/tb2:v1"); code != 0 || !strings.Contains(out, "pushed  tb2 ") {
		t.Fatalf("push tb2: exit %d\n%s%s", code, out, errOut)
	}

	loud := wasmtest.Build(t, "./cmd/proctor/testdata/plugins/loud")
	code, out, errOut := proctor("plugin", "push", loud, "oci://"+reg.Addr+"/team/loud:v1")
	if code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = proctor("--log-level", "debug", "plugin", "pull", reg.Addr+"/team/loud:v1")
	if code != 0 {
		t.Fatalf("pull: exit %d\n%s%s", code, out, errOut)
	}
	m := regexp.MustCompile(`digest  (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "pulled  loud 0.0.1\n") || !strings.Contains(out, "caps    (none)\n") || !strings.Contains(out, "sha256  "+sha256File(t, loud)+"\n") ||
		!strings.Contains(out, "source  oci:"+reg.Addr+"/team/loud:v1@"+m[1]+"\n") ||
		!strings.Contains(out, `pin     plugin = "oci://`+reg.Addr+"/team/loud@"+m[1]+`"`) {
		t.Fatalf("pull output:\n%s", out)
	}
	if strings.Contains(errOut, "loud:") {
		t.Errorf("pull ran the plugin:\n%s", errOut)
	}
	code, out, _ = proctor("plugin", "pull", "oci://"+reg.Addr+"/team/loud@"+m[1])
	if code != 0 || !strings.Contains(out, "(cached)") {
		t.Errorf("pull by digest: exit %d\n%s", code, out)
	}

	// A tag that moved under a sha256 pin is refused.
	dir := t.TempDir()
	example := wasmtest.Build(t, "./plugins/example")
	cfg := filepath.Join(dir, "run.toml")
	os.WriteFile(cfg, []byte("[agent]\nkind = \"oracle\"\n[env]\nplugin = \"x\"\n[env.config]\ntasks = [{ id = \"t\", text = \"x\" }]\n"), 0o644)
	tag := "oci://" + reg.Addr + "/team/example:stable"
	tasks := func() (int, string) {
		code, out, errOut := proctor("tasks", cfg, "--set", "env.plugin="+tag, "--set", "env.sha256="+sha256File(t, example))
		return code, out + errOut
	}
	if code, out, errOut := proctor("plugin", "push", example, tag); code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	if code, out := tasks(); code != 0 {
		t.Fatalf("pinned tag: exit %d\n%s", code, out)
	}
	moved := filepath.Join(dir, "example-2.wasm")
	b, _ := os.ReadFile(example)
	os.WriteFile(moved, withCustomSection(b, "rebuilt"), 0o644)
	if code, out, errOut := proctor("plugin", "push", moved, tag); code != 0 {
		t.Fatalf("push the moved tag: exit %d\n%s%s", code, out, errOut)
	}
	if code, out := tasks(); code != exitUsage || !strings.Contains(out, "has sha256 "+sha256File(t, moved)+", but the config pins "+sha256File(t, example)) {
		t.Fatalf("the moved tag under a pin: exit %d\n%s", code, out)
	}
}
