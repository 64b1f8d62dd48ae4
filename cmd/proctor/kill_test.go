package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestKillAndResume kills proctor with SIGKILL mid-run, resumes, and
// checks that every (task, attempt) is recorded exactly once and no
// container of the run is left.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	sandboxtest.RequireDocker(t)
	dir := t.TempDir()
	bin := buildProctor(t)
	replayRun(t, dir, 8, "sleep 2; printf x > answer.txt", "name = \"kill\"\nconcurrency = 3\nattempts = 2")
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "eval", filepath.Join(dir, "run.toml"), "--out", out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill once some rollouts are recorded and others are in flight (3
	// at once, each 2 s long).
	poll.Until(t, "2 rollouts recorded", func() bool { return countLines(filepath.Join(out, "results.jsonl")) >= 2 })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	before := countLines(filepath.Join(out, "results.jsonl"))
	if before == 0 || before >= 16 {
		t.Fatalf("killed with %d of 16 rollouts recorded; want some but not all", before)
	}
	runID := runIDOf(out)
	if left := containers(t, runID); left == 0 {
		t.Log("no containers in flight at the kill")
	}

	resumeOnce(t, bin, dir, out, 16)
	if n := containers(t, runID); n != 0 {
		t.Errorf("%d containers of the run left after the resume", n)
	}
}

// resumeOnce resumes the run in dir into out and checks that each of the
// want (task, attempt) identities is recorded exactly once, and passed.
func resumeOnce(t *testing.T, bin, dir, out string, want int) {
	t.Helper()
	res := exec.Command(bin, "eval", filepath.Join(dir, "run.toml"), "--out", out)
	if b, err := res.CombinedOutput(); err != nil {
		t.Fatalf("resume: %v\n%s", err, b)
	}
	seen := map[string]int{}
	f, _ := os.Open(filepath.Join(out, "results.jsonl"))
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct {
			TaskID  string `json:"task_id"`
			Attempt int    `json:"attempt"`
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		seen[fmt.Sprintf("%s#%d", r.TaskID, r.Attempt)]++
		if r.Outcome != "passed" {
			t.Errorf("%s#%d: %s", r.TaskID, r.Attempt, r.Outcome)
		}
	}
	if len(seen) != want {
		t.Errorf("%d identities recorded, want %d", len(seen), want)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s recorded %d times", id, n)
		}
	}
}

// replayRun writes dir/run.toml (and its script): tasks t0, t1, ... of the
// example plugin, each solved by a replay agent running command in one
// terminal call; runKeys are lines of the [run] table and extra is TOML
// appended at the end.
func replayRun(t *testing.T, dir string, tasks int, command, runKeys string, extra ...string) string {
	t.Helper()
	plugin := wasmtest.Build(t, "./plugins/example")
	var list []string
	for i := range tasks {
		list = append(list, fmt.Sprintf(`{id = "t%d", text = "x"}`, i))
	}
	script, _ := json.Marshal(map[string]any{"turns": []any{map[string]any{"tool_calls": []any{
		map[string]any{"name": "terminal", "arguments": map[string]any{"command": command}}}}}})
	os.WriteFile(filepath.Join(dir, "script.json"), script, 0o644)
	path := filepath.Join(dir, "run.toml")
	os.WriteFile(path, []byte(fmt.Sprintf(`
[run]
%s
[agent]
kind = "replay"
script = "script.json"
[env]
plugin = %q
[env.config]
tasks = [%s]
%s`, runKeys, plugin, strings.Join(list, ", "), strings.Join(extra, "\n"))), 0o644)
	return path
}

// localRun writes path: a run of plugin (the example plugin's config:
// tasks as TOML inline tables) on the local backend, which needs no
// Docker, with the given [run] keys and agent kind; extra tables follow
// [env.config].
func localRun(t *testing.T, path, plugin, runKeys, agent, tasks string, extra ...string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[run]
%s
[agent]
kind = %q
[sandbox]
backend = "local"
[env]
plugin = %q
[env.config]
image = "none"
tasks = [%s]
%s`, runKeys, agent, plugin, tasks, strings.Join(extra, "\n"))), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitRunning waits for the run that cmd writes to out to have n
// containers or more, and returns its run id; "" when cmd ended first. At
// least, not exactly: the sandbox started ahead for the next rollout may
// come up before a poll sees the first n alone, and then the run has
// exactly n again only once rollouts end.
func waitRunning(t *testing.T, cmd *exec.Cmd, out string, n int) string {
	t.Helper()
	var id string
	poll.Until(t, fmt.Sprintf("the run's first %d containers", n), func() bool {
		if id = runIDOf(out); id != "" && containers(t, id) >= n {
			return true
		}
		id = ""
		return ended(cmd)
	})
	return id
}

// ended reports whether cmd's process has exited (a zombie until Wait).
func ended(cmd *exec.Cmd) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	i := bytes.LastIndexByte(b, ')')
	return err != nil || i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// runIDOf is the run id in the manifest of the run directory out, "" when
// there is none yet.
func runIDOf(out string) string {
	var man struct {
		RunID string `json:"run_id"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
	json.Unmarshal(b, &man)
	return man.RunID
}

func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func containers(t testing.TB, runID string) int {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=proctor.run="+runID).Output()
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(out)))
}

// waitContainers waits until the run has n running containers: those of
// its running rollouts and those started ahead for the next.
func waitContainers(t *testing.T, runID string, n int) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("%d running containers (running and started ahead)", n), func() bool {
		out, err := exec.Command("docker", "ps", "-q", "--filter", "status=running", "--filter", "label=proctor.run="+runID).Output()
		return err == nil && len(strings.Fields(string(out))) >= n
	})
}

// TestInterrupt sends Ctrl-C (SIGINT) mid-run: proctor stops starting
// rollouts, cancels the running ones, removes their containers, writes the
// summary and exits 130; a resume then finishes the run.
func TestInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	sandboxtest.RequireDocker(t)
	dir := t.TempDir()
	bin := buildProctor(t)
	replayRun(t, dir, 3, "sleep 600", "concurrency = 2")
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "eval", filepath.Join(dir, "run.toml"), "--out", out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once both running rollouts are in their agent phase and
	// the third one's sandbox waits, started ahead.
	runID := waitRunning(t, cmd, out, 2)
	if runID == "" {
		cmd.Process.Kill()
		t.Fatalf("rollouts never started:\n%s", stderr.String())
	}
	waitContainers(t, runID, 3)
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit %d (%v), want %d\n%s", code, err, exitInterrupted, stderr.String())
	}
	if n := countLines(filepath.Join(out, "results.jsonl")); n != 0 {
		t.Errorf("%d interrupted rollouts recorded; they belong to the resume", n)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.json")); err != nil {
		t.Errorf("no summary after the interrupt: %v", err)
	}
	if n := containers(t, runID); n != 0 {
		t.Errorf("%d containers left after Ctrl-C", n)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", stderr.String())
	}
}

// buildProctor builds the real binary once per test process, for tests
// that must signal or kill it.
func buildProctor(t testing.TB) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := wasmtest.TempDir("bin-")
		if err != nil {
			builtErr = err
			return
		}
		builtBin = filepath.Join(dir, "proctor")
		if out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtBin
}

var (
	builtOnce sync.Once
	builtBin  string
	builtErr  error
)

// TestSecondInterrupt: a second Ctrl-C exits at once, leaving what the
// first one had not cleaned up; `sandbox prune` (or the resume) removes
// the run's leftover containers by label.
func TestSecondInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	sandboxtest.RequireDocker(t)
	dir := t.TempDir()
	bin := buildProctor(t)
	replayRun(t, dir, 3, "sleep 600", "concurrency = 2")
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "eval", filepath.Join(dir, "run.toml"), "--out", out)
	pipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var stderr strings.Builder
	first, eof := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			mu.Lock()
			stderr.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "stopping rollouts") {
				close(first)
			}
		}
	}()
	runID := waitRunning(t, cmd, out, 2)
	if runID == "" {
		cmd.Process.Kill()
		t.Fatal("rollouts never started")
	}
	waitContainers(t, runID, 3) // the third's started ahead
	// The second signal after the first was taken (the kernel merges
	// two pending SIGINTs into one).
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-first:
	case <-eof:
		t.Fatal("proctor ended without taking the first Ctrl-C")
	}
	cmd.Process.Signal(os.Interrupt)
	<-eof // read everything before Wait closes the pipe
	cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit %d, want %d\n%s", code, exitInterrupted, stderr.String())
	}
	if !strings.Contains(stderr.String(), "exiting at once") {
		t.Errorf("stderr does not say it exits at once:\n%s", stderr.String())
	}
	if n := countLines(filepath.Join(out, "results.jsonl")); n != 0 {
		t.Errorf("%d rollouts recorded by an interrupted run", n)
	}
	if b, err := exec.Command(bin, "sandbox", "prune", "--run", runID).CombinedOutput(); err != nil {
		t.Fatalf("prune: %v\n%s", err, b)
	}
	if n := containers(t, runID); n != 0 {
		t.Errorf("%d containers of the run left after prune", n)
	}
}
