package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// The installed-agent tests drive the real CLIs, installed from the npm
// registry by proctor's own install path into a layer over the fixture
// image, against the scripted chat server behind the gateway's
// translation. The first run downloads a few hundred MB per CLI; the
// layers are kept as images, so later runs download nothing.

// requireNPM skips the test when the npm registry does not answer, unless
// PROCTOR_REQUIRE_NPM=1, when it fails instead.
func requireNPM(t *testing.T) {
	t.Helper()
	reg := os.Getenv("NPM_CONFIG_REGISTRY")
	if reg == "" {
		reg = "https://registry.npmjs.org/"
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(reg, "/") + "/npm")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		err = fmt.Errorf("%s", resp.Status)
	}
	msg := fmt.Sprintf("the npm registry %s does not answer (%v): the installed-agent tests install the real CLIs from it (once; the layers are kept as images)", reg, err)
	if os.Getenv("PROCTOR_REQUIRE_NPM") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// cli is how a test scripts one installed agent: its shell tool's name
// and arguments.
type cliAgent struct {
	name string
	tool string
	args func(cmd string) map[string]any
}

var clis = []cliAgent{
	{"codex", "exec_command", func(cmd string) map[string]any { return map[string]any{"cmd": cmd} }},
	{"claude-code", "Bash", func(cmd string) map[string]any {
		return map[string]any{"command": cmd, "description": "Write the answer"}
	}},
	{"gemini-cli", "run_shell_command", func(cmd string) map[string]any { return map[string]any{"command": cmd} }},
	{"opencode", "bash", func(cmd string) map[string]any {
		return map[string]any{"command": cmd, "description": "Write the answer"}
	}},
}

// probe writes the answer file and says, from inside the sandbox, whether
// the run's key is in the environment, which network interfaces there
// are, and whether the scripted server's port on the host's loopback is
// reachable.
func probe(srv *openaitest.Server) string {
	u, _ := url.Parse(srv.URL())
	return "echo 'Hello, world!' > /tmp/hello.txt; echo key=$(env | grep -c sk-proctor-test-\\secret); " +
		"echo net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | paste -sd,); " +
		"(timeout 5 bash -c 'echo > /dev/tcp/127.0.0.1/" + u.Port() + "' 2>/dev/null && echo host=reachable) || echo host=unreachable"
}

// installedRun runs eval of hello-file with an installed agent into a new
// directory and returns it, with stderr.
func installedRun(t *testing.T, name string, srv *openaitest.Server, sets ...string) (string, string) {
	t.Helper()
	t.Setenv("SECRET_TEST_KEY", "sk-proctor-test-secret")
	root, _ := filepath.Abs("../..")
	out := t.TempDir()
	args := []string{"eval", filepath.Join(root, "examples/quickstart.toml"), "--log-level", "info",
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file"]`,
		"--set", "agent.kind=installed", "--set", "agent.name=" + name,
		"--set", "model.base_url=" + srv.URL(), "--set", "model.name=scripted",
		"--set", "model.api_key_env=SECRET_TEST_KEY", "--set", "run.retries=0",
		"--out", out}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	if code != 0 && code != exitRolloutsErr {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	return out, stderr.String()
}

// records reads a run's records.
func records(t *testing.T, dir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

func readTranscript(t *testing.T, dir string, rec map[string]any) agent.Transcript {
	t.Helper()
	var tr agent.Transcript
	b, err := os.ReadFile(filepath.Join(dir, rec["transcript"].(string)))
	if err == nil {
		err = json.Unmarshal(b, &tr)
	}
	if err != nil || tr.Trajectory == nil {
		t.Fatalf("transcript: %v", err)
	}
	return tr
}

// TestInstalledAgents: each bundled CLI solves hello-file through the
// scripted model: it runs the tool call itself (writing the answer and
// probing its sandbox: no key, no network), sends the result back and
// ends with a message; the gateway's trajectory shows the call; the key
// reaches no file of the run; the agent's logs are kept; and a second run
// of the task installs nothing.
func TestInstalledAgents(t *testing.T) {
	sandboxtest.RequireDocker(t)
	requireNPM(t)
	for _, c := range clis {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.New()
			defer srv.Close()
			srv.AnswerSideCalls("Hello file")
			srv.Script(openaitest.Step{Body: openaitest.Reply("I will write the file.", openaitest.Call{Name: c.tool, Args: c.args(probe(srv))})},
				openaitest.Step{Body: openaitest.Reply("The file is written.")})
			dir, stderr := installedRun(t, c.name, srv)
			rec := records(t, dir)[0]
			if rec["outcome"] != "passed" || rec["reward"] != 1.0 || rec["stop_reason"] != agent.StopDone {
				t.Fatalf("record: %v\n%s", rec, stderr)
			}
			tr := readTranscript(t, dir, rec).Trajectory
			checkProbe(t, tr, c.tool)
			checkNoKey(t, dir)
			checkLogs(t, dir, rec)
			if got := srv.Requests()[0].Auth; got != "Bearer sk-proctor-test-secret" {
				t.Errorf("the endpoint got auth %q", got)
			}
			// Again: the layer is there, nothing is installed.
			srv.Script(openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: c.tool, Args: c.args("echo 'Hello, world!' > /tmp/hello.txt")})},
				openaitest.Step{Body: openaitest.Reply("Done.")})
			dir, stderr = installedRun(t, c.name, srv)
			if n := strings.Count(stderr, "installing into an image"); n != 0 {
				t.Errorf("the second run installed %d times:\n%s", n, stderr)
			}
			if rec := records(t, dir)[0]; rec["outcome"] != "passed" {
				t.Errorf("second run: %v", rec)
			}
		})
	}
}

// checkProbe: the trajectory holds the tool call and its result, which
// says the sandbox had no key and no network.
func checkProbe(t *testing.T, tr *agent.Trajectory, tool string) {
	t.Helper()
	called, answered := false, ""
	for _, m := range tr.Messages {
		for _, tc := range m.ToolCalls {
			called = called || tc.Function.Name == tool
		}
		if m.Role == "tool" {
			answered += m.Content
		}
	}
	if !called || len(tr.Turns) < 2 {
		t.Fatalf("the trajectory lacks the %s call or its turns: %+v", tool, tr)
	}
	for _, want := range []string{"key=0", "net=lo", "host=unreachable"} {
		if !strings.Contains(answered, want) {
			t.Errorf("the tool's result lacks %q: %q", want, answered)
		}
	}
}

// checkNoKey: the run's key is in no file of the run directory (the
// agent's logs included).
func checkNoKey(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte("sk-proctor-test-secret")) {
				t.Errorf("the API key leaked into %s", p)
			}
		}
		return nil
	})
}

// checkLogs: the agent's logs hold the gateway's exchanges, the CLI's
// output and some of its own files.
func checkLogs(t *testing.T, dir string, rec map[string]any) {
	t.Helper()
	name, _ := rec["agent_logs"].(string)
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("agent logs: %v", err)
	}
	defer f.Close()
	names := map[string]int64{}
	tr := tar.NewReader(f)
	files := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = h.Size
		if strings.HasPrefix(h.Name, "files/") {
			files++
		}
	}
	if names["gateway.jsonl"] == 0 || files == 0 {
		t.Errorf("agent logs: %v", names)
	}
}
