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

// TestTerminalTimeoutReachesTools: [agent] terminal_timeout is the terminal
// tool's default time limit, as hermes' TERMINAL_TIMEOUT is.
func TestTerminalTimeoutReachesTools(t *testing.T) {
	sandboxtest.RequireDocker(t)
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: "terminal", Args: map[string]any{"command": "sleep 5"}})},
		openaitest.Step{Body: openaitest.Reply("Gave up.")},
	)
	defer srv.Close()
	t.Setenv("TOOLS_TEST_KEY", "k")
	root, _ := filepath.Abs("../..")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"eval", filepath.Join(root, "examples/quickstart.toml"),
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file"]`,
		"--set", "agent.kind=llm", "--set", "agent.terminal_timeout=1",
		"--set", "model.base_url=" + srv.URL(), "--set", "model.name=scripted", "--set", "model.api_key_env=TOOLS_TEST_KEY",
		"--out", out}, &stdout, &stderr)
	if code != 0 && code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	tr, _ := os.ReadFile(filepath.Join(out, "transcripts", "hello-file.0.try0.json"))
	if !strings.Contains(string(tr), `{\"output\": \"Command timed out after 1s\", \"exit_code\": 124, \"error\": null}`) {
		t.Errorf("the terminal call did not time out after 1s:\n%s", tr)
	}
}
