package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/internal/poll"
)

// lockRun writes dir/run.toml: n tasks of the example plugin on the local
// backend (no Docker), each solved by a replay agent that runs command.
func lockRun(t *testing.T, dir string, n int, command string) string {
	t.Helper()
	script, _ := json.Marshal(map[string]any{"turns": []any{map[string]any{"tool_calls": []any{
		map[string]any{"name": "terminal", "arguments": map[string]any{"command": command}}}}}})
	if err := os.WriteFile(filepath.Join(dir, "script.json"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for i := range n {
		tasks = append(tasks, fmt.Sprintf(`{id = "t%d", text = "x"}`, i))
	}
	path := filepath.Join(dir, "run.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[run]
concurrency = %d
[agent]
kind = "replay"
script = "script.json"
[sandbox]
backend = "local"
[env]
plugin = %q
[env.config]
image = "none"
tasks = [%s]
`, n, wasmtest.Build(t, "./plugins/example"), strings.Join(tasks, ", "))), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSecondEvalIsRefused runs two real proctor processes on one run
// directory: the second eval is refused, naming the first one's pid, while
// a report reads the run in progress; the run the first one writes stays
// whole. A lock left by a process that is gone is taken over.
func TestSecondEvalIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	dir := t.TempDir()
	bin := buildProctor(t)
	// The first eval's rollouts wait for the test to let them finish, so
	// that it holds the lock while the second eval and the report run.
	release := filepath.Join(dir, "release")
	cfg := lockRun(t, dir, 3, "until [ -e "+release+" ]; do sleep 0.05; done; printf x > answer.txt")
	out := filepath.Join(dir, "out")

	first := exec.Command(bin, "eval", cfg, "--out", out)
	var firstErr strings.Builder
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	poll.Until(t, "the first eval's lock", func() bool { _, ok := rundir.Writer(out); return ok })

	second := exec.Command(bin, "eval", cfg, "--out", out)
	b, err := second.CombinedOutput()
	if code := second.ProcessState.ExitCode(); code != exitUsage {
		t.Fatalf("second eval: exit %d (%v), want %d\n%s", code, err, exitUsage, b)
	}
	pid := first.Process.Pid
	for _, want := range []string{
		fmt.Sprintf("proctor: error: run directory %s is in use: proctor eval (pid %d on ", out, pid),
		fmt.Sprintf("proctor: hint: wait for it to finish or stop it (kill %d)", pid),
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("second eval's output lacks %q:\n%s", want, b)
		}
	}

	// A reader is not refused, and says the run is still being written.
	rep := exec.Command(bin, "report", out)
	b, err = rep.CombinedOutput()
	if err != nil || !strings.Contains(string(b), fmt.Sprintf("proctor: note: proctor eval (pid %d on ", pid)) {
		t.Errorf("report during the run: %v\n%s", err, b)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first eval: %v\n%s", err, firstErr.String())
	}
	checkResults(t, out, 3)
	if _, err := os.Stat(filepath.Join(out, rundir.LocksDir)); !os.IsNotExist(err) {
		t.Errorf("the lock folder stays after the run: %v", err)
	}

	// A writer's lock whose process is gone is taken over.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	os.MkdirAll(filepath.Join(out, rundir.LocksDir), 0o755)
	stale, _ := json.Marshal(map[string]any{"exclusive": true, "command": "eval", "pid": gone.Process.Pid, "host": host, "time": time.Now()})
	os.WriteFile(filepath.Join(out, rundir.LocksDir, "exclusive-stale.json"), stale, 0o644)
	b, err = exec.Command(bin, "eval", cfg, "--out", out).CombinedOutput()
	if err != nil || !strings.Contains(string(b), fmt.Sprintf("proctor: note: took over the lock of proctor eval (pid %d on %s), which is no longer running", gone.Process.Pid, host)) {
		t.Fatalf("eval over a stale lock: %v\n%s", err, b)
	}
	checkResults(t, out, 3)
}

// checkResults checks that results.jsonl holds n whole records, one per
// identity.
func checkResults(t *testing.T, dir string, n int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, rundir.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r rundir.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.RolloutID == "" {
			t.Fatalf("results.jsonl holds %q (%v)", sc.Text(), err)
		}
		if seen[r.RolloutID] {
			t.Errorf("%s recorded twice", r.RolloutID)
		}
		seen[r.RolloutID] = true
	}
	if len(seen) != n {
		t.Errorf("%d rollouts recorded, want %d", len(seen), n)
	}
}
