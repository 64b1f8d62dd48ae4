package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestEngineRestart restarts the Docker daemon in the middle of a run: the
// rollouts it breaks become infra_error, the run finishes, and every
// (task, attempt) is recorded exactly once. It stops the shared engine, so
// it runs only when asked (PROCTOR_TEST_ENGINE_RESTART=1, a step of its own
// in .ci/run, after the other tests).
func TestEngineRestart(t *testing.T) {
	if os.Getenv("PROCTOR_TEST_ENGINE_RESTART") != "1" {
		t.Skip("restarts the shared Docker engine: set PROCTOR_TEST_ENGINE_RESTART=1")
	}
	sandboxtest.RequireDocker(t)
	root, _ := filepath.Abs("../..")
	dir := t.TempDir()
	bin := buildProctor(t)
	replayRun(t, dir, 6, "sleep 4; printf x > answer.txt", "concurrency = 2\nretries = 1")
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "eval", filepath.Join(dir, "run.toml"), "--out", out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n, _ := exec.Command("docker", "ps", "-q", "--filter", "label=proctor.managed=true").Output(); len(strings.Fields(string(n))) >= 2 {
			break
		}
	}
	// Restart the engine under the running rollouts.
	exec.Command("pkill", "-x", "dockerd").Run()
	for i := 0; i < 100 && exec.Command("pgrep", "-x", "dockerd").Run() == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if b, err := exec.Command("bash", filepath.Join(root, "scripts/engine.sh")).CombinedOutput(); err != nil {
		t.Fatalf("restart the engine: %v\n%s", err, b)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("the run did not finish after the engine restart:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitOK && code != exitRolloutsErr {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	seen := map[string]int{}
	infra := 0
	f, _ := os.Open(filepath.Join(out, "results.jsonl"))
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct {
			TaskID, Outcome string
			Attempt         int
		}
		json.Unmarshal(sc.Bytes(), &struct {
			TaskID  *string `json:"task_id"`
			Outcome *string `json:"outcome"`
			Attempt *int    `json:"attempt"`
		}{&r.TaskID, &r.Outcome, &r.Attempt})
		seen[r.TaskID]++
		if r.Outcome == "infra_error" {
			infra++
		}
	}
	if len(seen) != 6 {
		t.Fatalf("%d tasks recorded, want 6:\n%s", len(seen), stderr.String())
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s recorded %d times", id, n)
		}
	}
	t.Logf("%d of 6 rollouts ended as infra_error after the restart", infra)
	// A start the restart cut short left its container stopped, and the
	// failed removal; the run's end removes it.
	runID := runIDOf(out)
	if n := containers(t, runID); runID == "" || n != 0 {
		t.Errorf("%d containers of run %q left after it ended", n, runID)
	}
}
