package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
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
	switch plugin {
	case "swesmith":
		args = []string{"eval", filepath.Join(root, "examples/swesmith.toml"),
			"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/swesmith"),
			"--set", "env.config.dataset=" + filepath.Join(root, "testdata/swesmith/instances.jsonl"),
			"--set", `env.config.instances=["calc__ops.add__change_operator"]`,
			"--set", `env.config.prompt_template={problem_statement}`}
	case "swesmith-clone":
		repos := t.TempDir()
		if b, err := exec.Command("bash", filepath.Join(root, "testdata/swesmith/make-repo.sh"), filepath.Join(repos, "calc")).CombinedOutput(); err != nil {
			t.Fatalf("make-repo.sh: %v\n%s", err, b)
		}
		args = []string{"eval", filepath.Join(root, "examples/swesmith-clone.toml"),
			"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/swesmith"),
			"--set", "env.config.dataset=" + filepath.Join(root, "testdata/swesmith/clone.jsonl"),
			"--set", "env.config.repo_url=" + repos + "/{repo}",
			"--set", `env.config.instances=["calc__clone.add_sign"]`,
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

// TestTerminus2SolvesSWEsmithTask: Terminus-2 resolves the SWE-smith
// fixture instance (image mode) through the CLI from scripted replies: the
// instruction is the bare problem statement, the pane starts in the
// image's working directory (/testbed), as Harbor's docker exec does, so a
// relative path reaches the repository; the plugin grades the change.
func TestTerminus2SolvesSWEsmithTask(t *testing.T) {
	requireTmux(t)
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply(terminusReply("sed -i '0,/return a - b/s//return a + b/' calc/ops.py; pwd\n", 1, true))},
		openaitest.Step{Body: openaitest.Reply(terminusReply("", 0, true))},
	)
	defer srv.Close()
	dir, code, out := evalReference(t, "swesmith", "agent.kind=terminus-2", "model.base_url="+srv.URL(), "model.name=scripted")
	if res, _ := os.ReadFile(filepath.Join(dir, "results.jsonl")); code != 0 || !strings.Contains(string(res), `"outcome":"passed"`) {
		t.Fatalf("exit %d %s\n%s", code, res, out)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if p := lastUser(reqs[0]); !strings.Contains(p, "Task Description:\ncalc.ops.add() gives wrong results") {
		t.Errorf("first prompt:\n%s", p)
	}
	if p := lastUser(reqs[1]); !strings.Contains(p, "\n/testbed\n") || !strings.HasSuffix(p, `If so, include "task_complete": true in your JSON response again.`) {
		t.Errorf("confirmation:\n%q", p)
	}
}

// TestTerminus2ErrorPaths: in one rollout, Harbor's answers to a reply
// without JSON, to a reply without commands, to a command still running
// when its duration is up, and to a full context (the three summarization
// calls and the handoff); the task is solved after all that.
func TestTerminus2ErrorPaths(t *testing.T) {
	requireTmux(t)
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply("I will create the file now.")},
		openaitest.Step{Body: openaitest.Reply(terminusReply("", 0, false))},
		openaitest.Step{Body: openaitest.Reply(terminusReply("sleep 30\n", 1, false))},
		openaitest.Step{Status: 400, Body: openaitest.Error("context_length_exceeded", "This model's maximum context length is 4096 tokens.")},
		openaitest.Step{Body: openaitest.Reply("I started a sleep.")},
		openaitest.Step{Body: openaitest.Reply("1. Is the sleep done?")},
		openaitest.Step{Body: openaitest.Reply("1. No.")},
		openaitest.Step{Body: openaitest.Reply(terminusReply("C-c", 0.5, false))},
		openaitest.Step{Body: openaitest.Reply(terminusReply("printf 'Hello, world!\\n' > /tmp/hello.txt\n", 10, true))},
		openaitest.Step{Body: openaitest.Reply(terminusReply("", 0, true))},
	)
	defer srv.Close()
	dir, code, out := evalReference(t, "tb2", "agent.kind=terminus-2", "model.base_url="+srv.URL(), "model.name=scripted", "model.retry_budget=0")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if res, _ := os.ReadFile(filepath.Join(dir, "results.jsonl")); !strings.Contains(string(res), `"outcome":"passed"`) {
		t.Fatalf("results: %s", res)
	}
	reqs := srv.Requests()
	if len(reqs) != 10 {
		t.Fatalf("%d requests", len(reqs))
	}
	want := []string{
		1: "Previous response had parsing errors:\nERROR: No valid JSON found in response\nWARNINGS: - No valid JSON object found\n\nPlease fix these issues and provide a proper JSON response.",
		2: "New Terminal Output:\n",
		3: "New Terminal Output:\n",
		4: "You are about to hand off your work to another AI agent.\n            Please provide a comprehensive summary",
		5: "You are picking up work from a previous AI agent on this task:\n\n**Original Task:** Create the file /tmp/hello.txt",
		6: "The next agent has a few questions for you, please answer each of them one by one in detail:\n\n1. Is the sleep done?",
		7: "Here are the answers the other agent provided.\n\n1. No.\n\nContinue working on this task from where the previous agent left off.",
		9: "Current terminal state:\n",
	}
	for i, w := range want {
		if w != "" && !strings.HasPrefix(lastUser(reqs[i]), w) {
			t.Errorf("request %d's prompt:\n%q\nwant it to start with\n%q", i, lastUser(reqs[i]), w)
		}
	}
	if p := lastUser(reqs[3]); !strings.Contains(p, "sleep 30") {
		t.Errorf("the running command is not on the screen: %q", p)
	}
	if p := lastUser(reqs[5]); !strings.Contains(p, "**Current Terminal Screen:**\n") || !strings.Contains(p, "sleep 30") {
		t.Errorf("the questions subagent is not shown the screen: %q", p)
	}
	if msgs, _ := reqs[5].Body["messages"].([]any); len(msgs) != 1 {
		t.Errorf("the questions subagent starts afresh: %d messages", len(msgs))
	}
	if msgs, _ := reqs[7].Body["messages"].([]any); len(msgs) != 4 {
		t.Errorf("after the handoff: %d messages, want the first prompt, the questions' exchange and the answers", len(msgs))
	}
}

// bashCall is a mini-swe-agent reply with bash tool calls.
func bashCall(content string, commands ...string) openaitest.Step {
	var calls []openaitest.Call
	for _, c := range commands {
		calls = append(calls, openaitest.Call{Name: "bash", Args: map[string]any{"command": c}})
	}
	return openaitest.Step{Body: openaitest.Reply(content, calls...)}
}

// TestMiniSWEAgentSolvesTasks: mini-swe-agent resolves a SWE-smith
// fixture instance (image and clone modes) and the tb2 fixture through the CLI, from
// scripted tool calls: swebench.yaml's messages and tool go out, commands
// run in /testbed (SWE-smith) or the task's folder (tb2), the submission
// is kept; the SWE-smith run replays from its transcript without a model,
// the tb2 one exports to Atropos with exact token ids and to SFT with its
// bash tool.
func TestMiniSWEAgentSolvesTasks(t *testing.T) {
	sandboxtest.RequireDocker(t)
	srv := openaitest.New(
		bashCall("THOUGHT: fix the operator.", "sed -i '0,/return a - b/s//return a + b/' calc/ops.py", "git diff -- calc/ops.py > patch.txt"),
		bashCall("THOUGHT: submit.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"),
	)
	defer srv.Close()
	dir, code, out := evalReference(t, "swesmith", "agent.kind=mini-swe-agent", "model.base_url="+srv.URL(), "model.name=scripted")
	if res, _ := os.ReadFile(filepath.Join(dir, "results.jsonl")); code != 0 || !strings.Contains(string(res), `"outcome":"passed"`) || !strings.Contains(string(res), `"stop_reason":"submitted"`) {
		t.Fatalf("exit %d %s\n%s", code, res, out)
	}
	req := srv.Requests()[0].Body
	msgs, _ := req["messages"].([]any)
	sys, _ := msgs[0].(map[string]any)
	user, _ := msgs[1].(map[string]any)
	if sys["content"] != "You are a helpful assistant that can interact with a computer shell to solve programming tasks." ||
		!strings.HasPrefix(user["content"].(string), "<pr_description>\nConsider the following PR description:\ncalc.ops.add() gives wrong results") ||
		req["parallel_tool_calls"] != true || !strings.Contains(toJSON(req["tools"]), `"name":"bash"`) {
		t.Errorf("first request: %s", toJSON(req))
	}
	transcript := filepath.Join(dir, "transcripts", "calc__ops.add__change_operator.0.try0.json")
	tr := readTranscript(t, transcript)
	if s := tr.Trajectory.Submission; s == nil || !strings.Contains(*s, "+    return a + b") {
		t.Errorf("submission %v", s)
	}
	if p := toJSON(srv.Requests()[1].Body["messages"]); !strings.Contains(p, `<returncode>0</returncode>\n<output>\n</output>`) {
		t.Errorf("observations: %s", p)
	}
	replayed, code, out := evalReference(t, "swesmith", "agent.kind=mini-swe-agent", "agent.script="+transcript)
	if res, _ := os.ReadFile(filepath.Join(replayed, "results.jsonl")); code != 0 || !strings.Contains(string(res), `"outcome":"passed"`) {
		t.Fatalf("replay: exit %d %s\n%s", code, res, out)
	}

	clone := openaitest.New(
		bashCall("THOUGHT: fix it.", "sed -i '0,/return a - b/s//return a + b/' calc/ops.py && git diff -- calc/ops.py > patch.txt"),
		bashCall("THOUGHT: submit.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"),
	)
	defer clone.Close()
	dir, code, out = evalReference(t, "swesmith-clone", "agent.kind=mini-swe-agent", "model.base_url="+clone.URL(), "model.name=scripted")
	if res, _ := os.ReadFile(filepath.Join(dir, "results.jsonl")); code != 0 || !strings.Contains(string(res), `"outcome":"passed"`) {
		t.Fatalf("clone mode: exit %d %s\n%s", code, res, out)
	}

	srv2 := openaitest.New(
		bashCall("THOUGHT: write it.", "printf 'Hello, world!\\n' > /tmp/hello.txt && pwd"),
		bashCall("THOUGHT: done.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
	)
	defer srv2.Close()
	dir, code, out = evalReference(t, "tb2", "agent.kind=mini-swe-agent", "model.base_url="+srv2.URL(), "model.name=scripted", "model.return_tokens=true")
	if res, _ := os.ReadFile(filepath.Join(dir, "results.jsonl")); code != 0 || !strings.Contains(string(res), `"outcome":"passed"`) {
		t.Fatalf("tb2: exit %d %s\n%s", code, res, out)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"export", dir, "--format", "atropos", "-o", filepath.Join(dir, "groups.jsonl")}, &stdout, &stderr); code != 0 {
		t.Fatalf("export atropos: %d %s", code, stderr.String())
	}
	if g, _ := os.ReadFile(filepath.Join(dir, "groups.jsonl")); !bytes.Contains(g, []byte(`"tokens":[[`)) {
		t.Errorf("no group with exact tokens: %s\n%s", g, stderr.String())
	}
	if code := run([]string{"export", dir, "--format", "sft"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), `"name":"bash"`) {
		t.Errorf("export sft: %d %s %s", code, stdout.String(), stderr.String())
	}
	if p := toJSON(srv2.Requests()[1].Body["messages"]); !strings.Contains(p, `<returncode>0</returncode>\n<output>\n/\n</output>`) {
		t.Errorf("tb2 observation: %s", p)
	}
}

func toJSON(v any) string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(v)
	return b.String()
}

// TestMiniSWEAgentErrorPaths: mini-swe-agent's answers to tool arguments
// that are not JSON, to a reply without a tool call and to a command past
// its timeout, then a full context, which ends the rollout as such.
func TestMiniSWEAgentErrorPaths(t *testing.T) {
	sandboxtest.RequireDocker(t)
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply("THOUGHT: list.", openaitest.Call{Name: "bash", Args: `{"command": "ls"`})},
		openaitest.Step{Body: openaitest.Reply("I think I am done.")},
		bashCall("THOUGHT: wait.", "sleep 30"),
		openaitest.Step{Status: 400, Body: openaitest.Error("context_length_exceeded", "maximum context length is 4096 tokens")},
	)
	defer srv.Close()
	dir, code, out := evalReference(t, "tb2", "agent.kind=mini-swe-agent", "model.base_url="+srv.URL(), "model.name=scripted",
		"agent.mini_swe_agent.timeout=2", "model.retry_budget=0")
	res, _ := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if code != 0 || !strings.Contains(string(res), `"outcome":"failed"`) || !strings.Contains(string(res), `"stop_reason":"context_length"`) {
		t.Fatalf("exit %d %s\n%s", code, res, out)
	}
	reqs := srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	last := func(i int) string {
		msgs, _ := reqs[i].Body["messages"].([]any)
		m, _ := msgs[len(msgs)-1].(map[string]any)
		s, _ := m["content"].(string)
		return s
	}
	if p := last(1); !strings.HasPrefix(p, "Tool call error:\n\n<error>\nError parsing tool call arguments: Expecting ',' delimiter: line 1 column 17 (char 16).Missing 'command' argument in bash tool call.\n</error>") {
		t.Errorf("after arguments that are not JSON:\n%s", p)
	}
	if p := last(2); !strings.HasPrefix(p, "Tool call error:\n\n<error>\nNo tool calls found in the response. Every response MUST include at least one tool call.\n</error>") {
		t.Errorf("after no tool call:\n%s", p)
	}
	if p := last(3); !strings.HasPrefix(p, "<exception>An error occurred while executing the command: Command '['docker', 'exec', '-w', '/', '-e', 'PAGER=cat'") ||
		!strings.Contains(p, "'bash', '-c', 'sleep 30']' timed out after 2 seconds</exception>\n<returncode>-1</returncode>") {
		t.Errorf("after the timeout:\n%s", p)
	}
}
