package main

import (
	"archive/tar"
	"bytes"
	"context"
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
	"github.com/proctor-dev/proctor/agent/installed"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/plugin/oci/ocitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// The installed-agent tests drive the real CLIs, installed from the npm
// registry by proctor's own install path into a layer over the fixture
// image, against the scripted chat server behind the gateway's
// translation. `make agents` builds the four layers ahead (a few hundred
// MB from the registry per CLI, once): the tests then run offline. A test
// whose layer is missing builds it itself when the registry answers.

// agentsImage is hello-file's image, the one the layers are built over.
const agentsImage = "proctor-base:bookworm"

// agentLayer is the sandbox spec of name's layer over agentsImage, and
// the engine that builds it.
func agentLayer(t testing.TB, name string) (*docker.Backend, sandbox.Spec) {
	t.Helper()
	def, err := installed.Load(name, "", "")
	if err != nil {
		t.Fatal(err)
	}
	be, err := docker.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	inst := &installed.Installer{CacheDir: filepath.Join(assemble.CacheDir(), "npm")}
	return be, sandbox.Spec{Image: agentsImage, Layer: inst.Layer(def)}
}

// requireAgent skips the test when name's CLI is neither installed over
// the fixture image (`make agents`) nor installable (the npm registry
// does not answer), unless PROCTOR_REQUIRE_AGENTS=1, when it fails
// instead.
func requireAgent(t testing.TB, name string) {
	t.Helper()
	sandboxtest.RequireDocker(t)
	be, spec := agentLayer(t, name)
	ok, err := be.HasLayer(context.Background(), spec)
	if ok {
		return
	}
	if err == nil {
		if err = npmAnswers(); err == nil {
			return
		}
	}
	msg := fmt.Sprintf("%s is not installed over %s, and cannot be (%v): run `make agents` (once, from the npm registry)", name, agentsImage, err)
	if os.Getenv("PROCTOR_REQUIRE_AGENTS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// npmAnswers says why the npm registry cannot install a CLI, or nil.
func npmAnswers() error {
	reg := os.Getenv("NPM_CONFIG_REGISTRY")
	if reg == "" {
		reg = "https://registry.npmjs.org/"
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(reg, "/") + "/npm")
	if err != nil {
		return fmt.Errorf("the npm registry %s: %w", reg, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the npm registry %s: %s", reg, resp.Status)
	}
	return nil
}

// TestInstallAgents builds the bundled agents' layers over the fixture
// image, for `make agents` (PROCTOR_INSTALL_AGENTS=1): from the npm
// registry when missing, nothing when built.
func TestInstallAgents(t *testing.T) {
	if os.Getenv("PROCTOR_INSTALL_AGENTS") != "1" {
		t.Skip("PROCTOR_INSTALL_AGENTS=1 builds the installed agents' layers (make agents)")
	}
	for _, c := range clis {
		be, spec := agentLayer(t, c.name)
		t0 := time.Now()
		tag, err := be.BuildLayer(context.Background(), spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		t.Logf("%s: %s (%.0f s)", c.name, tag, time.Since(t0).Seconds())
	}
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
	// No $(...): Gemini CLI refuses command substitution in its shell tool.
	return "echo 'Hello, world!' > /tmp/hello.txt; env | grep -c sk-proctor-test-\\secret | sed s/^/key=/; " +
		"tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | paste -sd, | sed s/^/net=/; " +
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
		// The CLIs take seconds of CPU to start (OpenCode about 20): on a
		// loaded machine that is minutes, which is not what is tested.
		"--set", "run.agent_timeout_scale=10",
		// hello-file's 512 MiB is too little for OpenCode (killed at its
		// first tool call); TB2's own tasks give 2 GiB or more.
		"--set", "sandbox.memory_mb=2048",
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
func records(t testing.TB, dir string) []map[string]any {
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

func recordTranscript(t *testing.T, dir string, rec map[string]any) agent.Transcript {
	t.Helper()
	tr := readTranscript(t, filepath.Join(dir, rec["transcript"].(string)))
	if tr.Trajectory == nil {
		t.Fatal("transcript: no trajectory")
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
	for _, c := range clis {
		t.Run(c.name, func(t *testing.T) {
			requireAgent(t, c.name)
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
			tr := recordTranscript(t, dir, rec).Trajectory
			checkProbe(t, tr, c.tool)
			checkNoKey(t, dir)
			checkLogs(t, dir, rec)
			if c.name == "opencode" {
				// Its undo snapshots (a git add of the working folder,
				// here /, each step) are off: they took most of the
				// rollout and change nothing the model is sent.
				log, ok := agentLogs(t, dir, rec)["files/root/.local/share/opencode/log/opencode.log"]
				if !ok {
					t.Error("the agent logs lack opencode.log")
				}
				if n := strings.Count(string(log), "message=tracking"); n != 0 {
					t.Errorf("OpenCode took %d snapshots of its working folder", n)
				}
			}
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

// agentLogs is the rollout's agent logs: each file's name and bytes.
func agentLogs(t *testing.T, dir string, rec map[string]any) map[string][]byte {
	t.Helper()
	name, _ := rec["agent_logs"].(string)
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("agent logs: %v", err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// checkLogs: the agent's logs hold the gateway's exchanges, the CLI's
// output and some of its own files.
func checkLogs(t *testing.T, dir string, rec map[string]any) {
	t.Helper()
	logs := agentLogs(t, dir, rec)
	files := 0
	for name := range logs {
		if strings.HasPrefix(name, "files/") {
			files++
		}
	}
	if len(logs["gateway.jsonl"]) == 0 || files == 0 {
		t.Errorf("agent logs: %d files, gateway.jsonl %d bytes", len(logs), len(logs["gateway.jsonl"]))
	}
}

// TestInstalledAgentLimitAndExports: a CLI that keeps calling its tool is
// ended by the token limit with its stop reason; a rollout whose endpoint
// returns token ids exports to Atropos groups with exact tokens, to SFT
// lines with the CLI's own tools, and to ATIF.
func TestInstalledAgentLimitAndExports(t *testing.T) {
	c := clis[0] // codex: the quickest to start
	requireAgent(t, c.name)
	var loop []openaitest.Step
	for range 40 {
		loop = append(loop, openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: c.tool, Args: c.args("echo again")})})
	}
	srv := openaitest.New(loop...)
	defer srv.Close()
	srv.AnswerSideCalls("Loop")
	dir, stderr := installedRun(t, c.name, srv, "agent.token_limit=500") // 120 tokens a call
	rec := records(t, dir)[0]
	if rec["stop_reason"] != "token_limit" || rec["turns"] != 5.0 || rec["outcome"] != "failed" {
		t.Fatalf("the looping agent: %v\n%s", rec, stderr)
	}
	if n := len(srv.Requests()); n != 5 {
		t.Errorf("%d calls reached the endpoint, want 5", n)
	}

	srv.Script(openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: c.tool, Args: c.args("echo 'Hello, world!' > /tmp/hello.txt")})},
		openaitest.Step{Body: openaitest.Reply("Done.")})
	dir, stderr = installedRun(t, c.name, srv, "model.return_tokens=true")
	if rec := records(t, dir)[0]; rec["outcome"] != "passed" {
		t.Fatalf("record: %v\n%s", rec, stderr)
	}
	for _, f := range []string{"atropos", "sft", "atif"} {
		out := filepath.Join(t.TempDir(), f)
		var stdout, errb bytes.Buffer
		if code := run([]string{"export", dir, "--format", f, "-o", out}, &stdout, &errb); code != 0 {
			t.Fatalf("export %s: exit %d: %s", f, code, errb.String())
		}
		var b []byte
		if f == "atif" {
			entries, _ := os.ReadDir(out)
			if len(entries) == 1 {
				b, _ = os.ReadFile(filepath.Join(out, entries[0].Name()))
			}
		} else {
			b, _ = os.ReadFile(out)
		}
		want := map[string]string{"atropos": `"tokens":[`, "sft": `"name":"exec_command"`, "atif": `"exec_command"`}[f]
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("export %s lacks %s: %.2000s", f, want, b)
		}
	}
}

// TestInstalledAgentKubernetes: codex solves hello-file in a pod of the
// local cluster: the local engine builds its layer and pushes it to a
// loopback registry the cluster pulls from, and the gateway is relayed
// into the pod over an exec of its own (`warden relay`).
func TestInstalledAgentKubernetes(t *testing.T) {
	if !kubernetesAvailable() {
		if os.Getenv("PROCTOR_REQUIRE_KUBERNETES") == "1" {
			t.Fatal("PROCTOR_REQUIRE_KUBERNETES=1 but no Kubernetes cluster answers: run `make k8s-up` and export the KUBECONFIG it prints")
		}
		t.Skip("no Kubernetes cluster (make k8s-up, then export the KUBECONFIG it prints)")
	}
	c := clis[0]
	requireAgent(t, c.name)
	srv := openaitest.New()
	defer srv.Close()
	srv.AnswerSideCalls("Hello file")
	srv.Script(openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: c.tool, Args: c.args(probe(srv))})},
		openaitest.Step{Body: openaitest.Reply("The file is written.")})
	dir, stderr := installedRun(t, c.name, srv, "sandbox.backend=kubernetes", "sandbox.kubernetes.registry="+ocitest.Start(t).Addr+"/proctor",
		"sandbox.kubernetes.request_fraction=0.01")
	rec := records(t, dir)[0]
	if rec["outcome"] != "passed" || rec["stop_reason"] != agent.StopDone {
		t.Fatalf("record: %v\n%s", rec, stderr)
	}
	checkProbe(t, recordTranscript(t, dir, rec).Trajectory, c.tool)
	checkNoKey(t, dir)
	checkLogs(t, dir, rec)
}
