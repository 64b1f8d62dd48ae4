package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/agent/terminus/tmuxbin"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// evalReference runs proctor eval on a fixture through the CLI with the
// reference agent kind and the extra settings, into a new run directory.
func evalReference(t *testing.T, plugin string, sets ...string) (dir string, code int, stderr string) {
	t.Helper()
	root, _ := filepath.Abs("../..")
	dir = t.TempDir()
	args := []string{"eval", filepath.Join(root, "examples/quickstart.toml"),
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file"]`, "--set", "run.retries=0"}
	if plugin == "swesmith" {
		args = []string{"eval", filepath.Join(root, "examples/swesmith.toml"),
			"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/swesmith"),
			"--set", "env.config.dataset=" + filepath.Join(root, "testdata/swesmith/instances.jsonl"),
			"--set", `env.config.instances=["calc__ops.add__change_operator"]`,
			"--set", `env.config.prompt_template={problem_statement}`}
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	var stdout, errb bytes.Buffer
	code = run(append(args, "--out", dir), &stdout, &errb)
	return dir, code, stdout.String() + errb.String()
}

// requireTmux skips a Terminus-2 test on docker where the static tmux is
// not built (the fixture images have no tmux of their own).
func requireTmux(t *testing.T) {
	t.Helper()
	sandboxtest.RequireDocker(t)
	if _, err := tmuxbin.Find(); err != nil {
		if os.Getenv("PROCTOR_REQUIRE_DOCKER") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func readTranscript(t *testing.T, path string) agent.Transcript {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr agent.Transcript
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

// terminusReply is a Terminus-2 JSON reply, its fields in the order
// Harbor's prompt asks for.
func terminusReply(keys string, dur float64, complete bool) string {
	cmds := "[]"
	if keys != "" {
		k, _ := json.Marshal(keys)
		d, _ := json.Marshal(dur)
		cmds = `[{"keystrokes": ` + string(k) + `, "duration": ` + string(d) + `}]`
	}
	c, _ := json.Marshal(complete)
	return `{"analysis": "a", "plan": "p", "commands": ` + cmds + `, "task_complete": ` + string(c) + `}`
}

// lastUser is the last message of a request: the prompt a call sent.
func lastUser(r openaitest.Request) string {
	msgs, _ := r.Body["messages"].([]any)
	if len(msgs) == 0 {
		return ""
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	s, _ := m["content"].(string)
	return s
}

// TestTerminus2SolvesTB2Task: Terminus-2 solves hello-file in a docker
// sandbox with the real tmux of the static build, through the CLI, from
// scripted replies: the first prompt is Harbor's template around the
// instruction and tmux's own screen, the keystrokes run in the pane, the
// task_complete is confirmed once more. The run exports to ATIF, and to
// Atropos with exact token ids; its transcript replays without a model.
func TestTerminus2SolvesTB2Task(t *testing.T) {
	requireTmux(t)
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply(terminusReply("printf 'Hello, world!\\n' > /tmp/hello.txt\n", 10, false))},
		openaitest.Step{Body: openaitest.Reply(terminusReply("cat /tmp/hello.txt\n", 1, true))},
		openaitest.Step{Body: openaitest.Reply(terminusReply("", 0, true))},
	)
	defer srv.Close()
	dir, code, out := evalReference(t, "tb2", "agent.kind=terminus-2", "model.base_url="+srv.URL(), "model.name=scripted",
		"model.return_tokens=true", "agent.terminus_2.interleaved_thinking=true")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	res, _ := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if !strings.Contains(string(res), `"outcome":"passed"`) || !strings.Contains(string(res), `"stop_reason":"done"`) {
		t.Fatalf("results: %s", res)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	first := lastUser(reqs[0])
	for _, want := range []string{"You are an AI assistant tasked with solving command-line tasks in a Linux environment.",
		"Task Description:\nCreate the file /tmp/hello.txt containing exactly the line `Hello, world!`.", "\n\nCurrent terminal state:\nCurrent Terminal Screen:\n", "#"} {
		if !strings.Contains(first, want) {
			t.Errorf("first prompt lacks %q:\n%s", want, first)
		}
	}
	if tools := reqs[0].Body["tools"]; tools != nil {
		t.Errorf("tools sent: %v", tools)
	}
	if p := lastUser(reqs[1]); !strings.HasPrefix(p, "New Terminal Output:\n") || !strings.Contains(p, "printf 'Hello, world!\\n' > /tmp/hello.txt") {
		t.Errorf("second prompt:\n%q", p)
	}
	if p := lastUser(reqs[2]); !strings.HasPrefix(p, "Current terminal state:\nNew Terminal Output:") || !strings.Contains(p, "Hello, world!\n") ||
		!strings.HasSuffix(p, `If so, include "task_complete": true in your JSON response again.`) {
		t.Errorf("confirmation:\n%q", p)
	}
	transcript := filepath.Join(dir, "transcripts", "hello-file.0.try0.json")
	if tr := readTranscript(t, transcript); tr.Trajectory.Agent != "terminus-2" || len(tr.Trajectory.Turns) != 3 || tr.Trajectory.Turns[0].Tools[0].Name != "bash_command" {
		t.Errorf("trajectory: %+v", tr.Trajectory)
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"export", dir, "--format", "atropos", "-o", filepath.Join(dir, "groups.jsonl")}, &stdout, &stderr); code != 0 {
		t.Fatalf("export atropos: %d %s", code, stderr.String())
	}
	if g, _ := os.ReadFile(filepath.Join(dir, "groups.jsonl")); !bytes.Contains(g, []byte(`"tokens":[[`)) {
		t.Errorf("no group with exact tokens: %s\n%s", g, stderr.String())
	}
	if code := run([]string{"export", dir, "--format", "atif"}, &stdout, &stderr); code != 0 {
		t.Fatalf("export atif: %d %s", code, stderr.String())
	}
	if a, _ := os.ReadFile(filepath.Join(dir, "atif", "hello-file.0.try0.json")); !bytes.Contains(a, []byte(`"agent": "terminus-2"`)) {
		t.Errorf("atif: %s", a)
	}

	replayed, code, out := evalReference(t, "tb2", "agent.kind=terminus-2", "agent.script="+transcript)
	if res, _ := os.ReadFile(filepath.Join(replayed, "results.jsonl")); code != 0 || !strings.Contains(string(res), `"outcome":"passed"`) {
		t.Fatalf("replay: exit %d %s\n%s", code, res, out)
	}
}
