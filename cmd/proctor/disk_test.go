package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
)

// TestFullDisk runs into a run directory on a tiny tmpfs: the run stops
// with a clear error naming the file, and results.jsonl holds only whole
// lines.
func TestFullDisk(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	var tasks []string
	for i := range 40 {
		tasks = append(tasks, fmt.Sprintf(`{id = "task-with-a-long-name-%02d", text = "%s"}`, i, strings.Repeat("x", 200)))
	}
	cfg := localRun(t, filepath.Join(t.TempDir(), "run.toml"), wasmtest.Build(t, "./plugins/example"), "concurrency = 2", "oracle", strings.Join(tasks, ", "))
	var stdout, stderr bytes.Buffer
	code := run([]string{"eval", cfg, "--out", filepath.Join(mnt, "run")}, &stdout, &stderr)
	if code != exitInfra || !strings.Contains(stderr.String(), "no space left on device") || !strings.Contains(stderr.String(), "results.jsonl") && !strings.Contains(stderr.String(), "manifest.json") {
		t.Fatalf("exit %d, want %d with a clear error:\n%s", code, exitInfra, stderr.String())
	}
	t.Logf("stderr: %s", lastLines(stderr.String(), 3))
	b, err := os.ReadFile(filepath.Join(mnt, "run", "results.jsonl"))
	if err != nil {
		t.Skip("nothing written before the disk filled")
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line != "" && !json.Valid([]byte(line)) {
			t.Fatalf("line %d is torn: %q", i+1, line)
		}
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
