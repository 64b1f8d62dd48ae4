package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
)

// TestResumeRefusesOtherPlugins: a run resumed with other plugin bytes
// than its manifest recorded (a rebuilt environment, a moved tag, another
// reward plugin under the same name) is refused with a usage error naming
// the plugin and both sha256s, and nothing is run or rewritten; the same
// bytes resume. Local backend: no Docker.
func TestResumeRefusesOtherPlugins(t *testing.T) {
	t.Setenv("PROCTOR_CACHE_DIR", t.TempDir())
	dir := t.TempDir()
	copyWith := func(src, name, section string) string {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if section != "" {
			b = withCustomSection(b, section)
		}
		path := filepath.Join(dir, name)
		os.WriteFile(path, b, 0o644)
		return path
	}
	example := copyWith(wasmtest.Build(t, "./plugins/example"), "example.wasm", "")
	rebuilt := copyWith(example, "example-rebuilt.wasm", "rebuilt")
	stats := copyWith(wasmtest.Build(t, "./plugins/toolstats"), "toolstats.wasm", "")
	statsRebuilt := copyWith(stats, "toolstats-rebuilt.wasm", "rebuilt")
	config := func(env, reward string) string {
		return localRun(t, filepath.Join(dir, "run.toml"), env, "attempts = 2", "oracle", `{ id = "greet", text = "hello" }`,
			fmt.Sprintf("[[reward]]\nplugin = %q\nname = \"stats\"", reward))
	}
	out := filepath.Join(dir, "run")
	eval := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"eval", "--out", out}, args...), &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	if code, o := eval(config(example, stats), "--set", "run.attempts=1"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, o)
	}
	manifest, _ := os.ReadFile(filepath.Join(out, rundir.ManifestFile))
	lines := countLines(filepath.Join(out, rundir.ResultsFile))

	for _, tc := range []struct{ name, env, reward, want string }{
		{"env", rebuilt, stats, `the [env] plugin example has sha256 ` + sha256File(t, rebuilt) + `, but the run recorded sha256 ` + sha256File(t, example)},
		{"reward", example, statsRebuilt, `the [[reward]] plugin "stats" has sha256 ` + sha256File(t, statsRebuilt) + `, but the run recorded sha256 ` + sha256File(t, stats)},
	} {
		code, o := eval(config(tc.env, tc.reward))
		if code != exitUsage || !strings.Contains(o, tc.want) || !strings.Contains(o, "write to a new --out") {
			t.Errorf("resume with another %s plugin: exit %d, want %d and %q\n%s", tc.name, code, exitUsage, tc.want, o)
		}
		if n := countLines(filepath.Join(out, rundir.ResultsFile)); n != lines {
			t.Errorf("resume with another %s plugin ran rollouts: %d lines, want %d", tc.name, n, lines)
		}
		if b, _ := os.ReadFile(filepath.Join(out, rundir.ManifestFile)); !bytes.Equal(b, manifest) {
			t.Errorf("resume with another %s plugin rewrote the manifest", tc.name)
		}
	}

	// The recorded bytes resume, and run what is missing.
	if code, o := eval(config(example, stats)); code != 0 {
		t.Fatalf("resume with the same plugins: exit %d\n%s", code, o)
	}
	var man rundir.Manifest
	b, _ := os.ReadFile(filepath.Join(out, rundir.ManifestFile))
	json.Unmarshal(b, &man)
	if n := countLines(filepath.Join(out, rundir.ResultsFile)); n != 2 || man.Plugin.SHA256 != sha256File(t, example) || len(man.ResumedAt) != 1 {
		t.Errorf("after the resume: %d results, manifest %+v", n, man)
	}
}
