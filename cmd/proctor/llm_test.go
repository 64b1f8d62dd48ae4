package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestLLMRolloutSolvesTask: the llm agent, driven by a scripted
// OpenAI-compatible server on 127.0.0.1, solves a fixture task in a real
// Docker sandbox through the whole CLI; a 429 on the way is retried, and the
// API key reaches neither the results, the transcripts nor the sandbox.
func TestLLMRolloutSolvesTask(t *testing.T) {
	sandboxtest.RequireDocker(t)
	srv := openaitest.New(
		openaitest.Step{Status: 429, RetryAfter: "0"},
		openaitest.Step{Body: openaitest.Reply("Let me look.", openaitest.Call{Name: "terminal", Args: map[string]any{"command": "env | grep -c SECRET_TEST_KEY || true"}})},
		openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: "write_file", Args: map[string]any{"path": "/tmp/hello.txt", "content": "Hello, world!\n"}})},
		openaitest.Step{Body: openaitest.Reply("The file is written.")},
	)
	defer srv.Close()
	t.Setenv("SECRET_TEST_KEY", "sk-proctor-test-secret")
	root, _ := filepath.Abs("../..")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"eval", filepath.Join(root, "examples/quickstart.toml"),
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file"]`,
		"--set", "agent.kind=llm",
		"--set", "model.base_url=" + srv.URL(),
		"--set", "model.name=scripted",
		"--set", "model.api_key_env=SECRET_TEST_KEY",
		"--out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	res, _ := os.ReadFile(filepath.Join(out, "results.jsonl"))
	if !strings.Contains(string(res), `"outcome":"passed"`) || !strings.Contains(string(res), `"prompt_tokens":300`) {
		t.Fatalf("results: %s", res)
	}
	tr, _ := os.ReadFile(filepath.Join(out, "transcripts", "hello-file.0.try0.json"))
	if !strings.Contains(string(tr), `{\"output\": \"0\", \"exit_code\": 0, \"error\": null}`) {
		t.Errorf("the key's variable reached the sandbox, or the transcript lacks the tool output:\n%s", tr)
	}
	filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte("sk-proctor-test-secret")) {
				t.Errorf("the API key leaked into %s", p)
			}
		}
		return nil
	})
	if got := srv.Requests()[0].Auth; got != "Bearer sk-proctor-test-secret" {
		t.Errorf("auth header %q", got)
	}
}

// TestModelEndpointDown: an endpoint that keeps failing costs each rollout
// its bounded retry budget and ends it as infra_error of class model; the
// run finishes and says so with exit code 1.
func TestModelEndpointDown(t *testing.T) {
	sandboxtest.RequireDocker(t)
	var steps []openaitest.Step
	for range 40 {
		steps = append(steps, openaitest.Step{Status: 503})
	}
	srv := openaitest.New(steps...)
	defer srv.Close()
	root, _ := filepath.Abs("../..")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"eval", filepath.Join(root, "examples/quickstart.toml"),
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file","dash-instruction"]`,
		"--set", "agent.kind=llm", "--set", "model.base_url=" + srv.URL(), "--set", "model.name=scripted",
		"--set", "model.retry_budget=2", "--set", "run.retries=0",
		"--out", out}, &stdout, &stderr)
	if code != exitRolloutsErr {
		t.Fatalf("exit %d, want %d\n%s", code, exitRolloutsErr, stderr.String())
	}
	res, _ := os.ReadFile(filepath.Join(out, "results.jsonl"))
	if n := strings.Count(string(res), `"outcome":"infra_error","error_class":"model"`); n != 2 {
		t.Fatalf("want 2 model infra errors, got %d:\n%s", n, res)
	}
	if n := len(srv.Requests()); n != 6 {
		t.Errorf("%d requests, want 2 rollouts x 3 tries", n)
	}
}
