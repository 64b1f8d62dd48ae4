package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// maxAttackRSS is the most memory proctor may hold in an attack on its
// reads (docs/security.md quotes the measured figures).
const maxAttackRSS = 300 << 20

// peakRSS runs the real binary with args in dir and returns its peak
// resident set size and what it printed.
func peakRSS(t *testing.T, dir string, args ...string) (int64, string) {
	t.Helper()
	cmd := exec.Command(buildProctor(t), args...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		t.Skip("no rusage on this system")
	}
	return ru.Maxrss << 10, string(out) // Maxrss is in KiB on Linux
}

// TestAttackPeakRSS runs proctor against two attacks on its reads: a model
// endpoint that answers with 1 GiB, and a Terminal-Bench dataset row whose
// environment holds a 1 GiB sparse file (1.4 MB gzipped). Each is refused
// (a model error; the row cannot run) and proctor's peak memory stays
// under maxAttackRSS: it took 5.9 GB and 5.5 GB once.
func TestAttackPeakRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	t.Run("huge model answer", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`)
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			fmt.Fprint(w, `"}}]}`)
		}))
		defer srv.Close()
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "run.toml"), []byte(fmt.Sprintf(`
[model]
base_url = %q
name = "m"
[agent]
kind = "llm"
[sandbox]
backend = "local"
[env]
plugin = %q
[env.config]
image = "none"
tasks = [{ id = "t", text = "x" }]
`, srv.URL+"/v1", wasmtest.Build(t, "./plugins/example"))), 0o644)
		rss, out := peakRSS(t, dir, "eval", "run.toml", "--out", "out")
		if !strings.Contains(out, "model response too large") {
			t.Fatalf("the answer was not refused:\n%s", out)
		}
		t.Logf("peak RSS %d MiB", rss>>20)
		if rss > maxAttackRSS {
			t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, maxAttackRSS>>20)
		}
	})
	t.Run("sparse file in a dataset row", func(t *testing.T) {
		sandboxtest.RequireDocker(t)
		dir := t.TempDir()
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "huge.bin", Mode: 0o644, Size: 1 << 30, Typeflag: tar.TypeReg})
		zeros := make([]byte, 1<<20)
		for range 1024 {
			tw.Write(zeros)
		}
		tw.Close()
		zw.Close()
		row, _ := json.Marshal(map[string]any{"task_name": "sparse", "instruction": "x", "test_sh": "true",
			"environment_tar": base64.StdEncoding.EncodeToString(buf.Bytes()), "agent_timeout_sec": 60, "test_timeout_sec": 60})
		os.WriteFile(filepath.Join(dir, "rows.jsonl"), append(row, '\n'), 0o644)
		os.WriteFile(filepath.Join(dir, "run.toml"), []byte(fmt.Sprintf(`
[agent]
kind = "oracle"
[env]
plugin = %q
[env.config]
dataset = "rows.jsonl"
`, wasmtest.Build(t, "./plugins/tb2"))), 0o644)
		rss, out := peakRSS(t, dir, "eval", "run.toml", "--out", "out")
		if !strings.Contains(out, "environment_tar: archive holds over 64 MiB once decompressed") {
			t.Fatalf("the row was not refused:\n%s", out)
		}
		t.Logf("peak RSS %d MiB", rss>>20)
		if rss > maxAttackRSS {
			t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, maxAttackRSS>>20)
		}
	})
}
