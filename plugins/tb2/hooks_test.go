//go:build !wasip1

package main

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

// file is one member of a task folder made by a test.
type file struct {
	body string
	mode int64
	link string // a symlink's target
	hard string // a hard link's target (a path in the folder)
	dir  bool
}

// folderTar packs a task folder as the host's dataset reader does (modes,
// folders and links kept).
func folderTar(files map[string]file) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range sortedNames(files) {
		f := files[name]
		h := &tar.Header{Name: name, Mode: f.mode, Typeflag: tar.TypeReg, Size: int64(len(f.body)), Uid: 1000, Gid: 1000}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		switch {
		case f.dir:
			h.Typeflag, h.Size, h.Name = tar.TypeDir, 0, name+"/"
		case f.link != "":
			h.Typeflag, h.Size, h.Linkname = tar.TypeSymlink, 0, f.link
		case f.hard != "":
			h.Typeflag, h.Size, h.Linkname = tar.TypeLink, 0, f.hard
		}
		tw.WriteHeader(h)
		tw.Write([]byte(f.body))
	}
	tw.Close()
	return buf.Bytes()
}

func sortedNames(m map[string]file) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func folderRowOf(name string, files map[string]file) json.RawMessage {
	row, _ := json.Marshal(map[string]string{"name": name, "tar": base64.StdEncoding.EncodeToString(folderTar(files))})
	return row
}

// members lists an archive as name → header.
func members(t *testing.T, b []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

// TestBuildContextKeepsModesAndLinks: environment/ reaches the engine with
// the modes it has on disk (an executable without .sh stays executable)
// and its links (inside it) as links; a link out of environment/ makes the
// task broken, naming the link.
func TestBuildContextKeepsModesAndLinks(t *testing.T) {
	base := map[string]file{
		"task.toml":               {body: "[metadata]\ncategory = \"x\"\n"},
		"instruction.md":          {body: "do it"},
		"tests/test.sh":           {body: "true", mode: 0o644},
		"environment":             {dir: true, mode: 0o755},
		"environment/Dockerfile":  {body: "FROM scratch\n"},
		"environment/make-marker": {body: "#!/bin/sh\ntouch /marker\n", mode: 0o755},
		"environment/private":     {dir: true, mode: 0o700},
		"environment/private/key": {body: "k", mode: 0o600},
		"environment/marker-link": {link: "make-marker"},
		"environment/private/up":  {link: "../make-marker"},
		"environment/hard":        {hard: "environment/make-marker"},
	}
	task, err := FromRow(folderRowOf("modes", base))
	if err != nil || task.Broken != "" {
		t.Fatalf("%v %s", err, task.Broken)
	}
	m := members(t, task.EnvironmentTar)
	for name, want := range map[string]struct {
		typ  byte
		mode int64
		link string
	}{
		"Dockerfile":  {tar.TypeReg, 0o644, ""},
		"make-marker": {tar.TypeReg, 0o755, ""},
		"private/":    {tar.TypeDir, 0o700, ""},
		"private/key": {tar.TypeReg, 0o600, ""},
		"marker-link": {tar.TypeSymlink, 0, "make-marker"},
		"private/up":  {tar.TypeSymlink, 0, "../make-marker"},
		"hard":        {tar.TypeLink, 0o644, "make-marker"},
	} {
		h, ok := m[name]
		if !ok {
			t.Errorf("%s missing from the build context: %v", name, m)
			continue
		}
		if h.Typeflag != want.typ || h.Linkname != want.link || (want.typ != tar.TypeSymlink && h.Mode != want.mode) || h.Uid != 0 {
			t.Errorf("%s: type %c mode %o link %q uid %d", name, h.Typeflag, h.Mode, h.Linkname, h.Uid)
		}
	}
	if h := members(t, task.TestsTar)["test.sh"]; h == nil || h.Mode != 0o644 {
		t.Errorf("tests/test.sh keeps its mode (the verifier makes it executable as Harbor does): %+v", h)
	}

	for name, bad := range map[string]file{
		"environment/out":  {link: "../tests/test.sh"},
		"environment/hard": {hard: "tests/test.sh"},
	} {
		files := map[string]file{}
		for k, v := range base {
			files[k] = v
		}
		delete(files, "environment/hard")
		files[name] = bad
		task, _ := FromRow(folderRowOf("escape", files))
		if !strings.Contains(task.Broken, name) || !strings.Contains(task.Broken, "leaves environment/") {
			t.Errorf("%s: want the task broken naming the link, got %q", name, task.Broken)
		}
	}
}

// TestTasksListBrokenAndRefused: a task whose task.toml does not read is a
// task with Broken set (proctor tasks lists it as broken, its rollouts
// fail with the reason); one that needs what proctor lacks is skipped
// with the key that asks for it.
func TestTasksListBrokenAndRefused(t *testing.T) {
	h := sdktest.New(t)
	task := func(toml string) map[string]file {
		return map[string]file{"task.toml": {body: toml}, "instruction.md": {body: "x"}, "tests/test.sh": {body: "true"}, "environment/Dockerfile": {body: "FROM x\n"}}
	}
	h.Datasets["d"] = []json.RawMessage{
		folderRowOf("good", task("[metadata]\ncategory = \"c\"\ntags = [\"a\", \"b\"]\n")),
		folderRowOf("bad-toml", task("[metadata]\ncategory = \"c\"\ntags = [\"a\", \"b\"\n")),
		folderRowOf("bad-value", task("[environment]\ncpus = 0.5\n")),
		folderRowOf("gpu", task("[environment]\ngpus = 2\ngpu_types = [\"H100\"]\n")),
		folderRowOf("steps", task("[[steps]]\nname = \"one\"\n")),
		folderRowOf("windows", task("[environment]\nos = \"Windows\"\n")),
		folderRowOf("host-var", task("[verifier]\nenv = { KEY = \"${OPENAI_API_KEY}\" }\n")),
		folderRowOf("artifacts", task("artifacts = [\"/app/out.json\"]\n")),
		folderRowOf("verifier-user", task("[verifier]\nuser = \"nobody\"\n")),
		// A phase that changes the network: Harbor's docker environment
		// cannot (src/harbor/trial/network_policy.py, trial.py's
		// _validate_network_plan); the same override is a no-op.
		folderRowOf("phase-net", task("[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"public\"\n")),
		folderRowOf("phase-same", task("[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"no-network\"\n")),
		folderRowOf("allowlist", task("[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n")),
	}
	var resp abi.TasksResponse
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{Config: json.RawMessage(`{"dataset":"d"}`)}, &resp); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tk := range resp.Tasks {
		got[tk.ID] = "broken: " + tk.Broken
		if tk.ID == "good" && !reflect.DeepEqual(tk.Tags, []string{"a", "b"}) {
			t.Errorf("tags %v", tk.Tags)
		}
	}
	for _, s := range resp.Skipped {
		got[s.ID] = "skipped: " + s.Reason
	}
	for id, want := range map[string]string{
		"good":          "broken: ",
		"artifacts":     "broken: ",
		"bad-toml":      "broken: task.toml: line",
		"bad-value":     "broken: task.toml: [environment].cpus: want an integer, got 0.5",
		"gpu":           "skipped: [environment].gpus = 2 (H100): the sandbox backends have no GPUs",
		"steps":         "skipped: [[steps]]",
		"windows":       `skipped: [environment].os = "windows"`,
		"host-var":      `skipped: [verifier].env.KEY = "${OPENAI_API_KEY}": proctor passes no host variables`,
		"verifier-user": `skipped: [verifier].user = "nobody" without [agent].user`,
		"phase-net":     `skipped: [verifier].network_mode = "public" differs from the environment's "no-network"`,
		"phase-same":    "broken: ",
		"allowlist":     `skipped: [environment].network_mode = "allowlist"`,
	} {
		if !strings.HasPrefix(got[id], want) || (want == "broken: " && got[id] != want) {
			t.Errorf("%s: got %q, want %q…", id, got[id], want)
		}
	}
	// A broken task's rollouts fail with the reason.
	for _, tk := range resp.Tasks {
		if tk.ID == "bad-toml" {
			err := sdktest.Call(abi.HookSandbox, abi.RolloutRequest{Task: tk, Config: json.RawMessage(`{"dataset":"d"}`)}, &abi.SandboxSpec{})
			if err == nil || !strings.Contains(err.Error(), "task.toml: line") {
				t.Errorf("rollout of a broken task: %v", err)
			}
		}
	}
}

func loadOne(t *testing.T, h *sdktest.Host, files map[string]file) abi.RolloutRequest {
	t.Helper()
	h.Datasets["d"] = []json.RawMessage{folderRowOf("t", files)}
	var resp abi.TasksResponse
	cfg := json.RawMessage(`{"dataset":"d"}`)
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{Config: cfg}, &resp); err != nil || len(resp.Tasks) != 1 || resp.Tasks[0].Broken != "" {
		t.Fatalf("%v %+v", err, resp)
	}
	return abi.RolloutRequest{Task: resp.Tasks[0], Config: cfg}
}

// TestSandboxSpecFromTaskToml: what task.toml asks of the sandbox reaches
// the spec: the network (Harbor's default is the internet), the
// environment's variables, the user, workdir, resources and build timeout.
func TestSandboxSpecFromTaskToml(t *testing.T) {
	h := sdktest.New(t)
	for _, tc := range []struct {
		toml string
		want abi.SandboxSpec
	}{
		{"", abi.SandboxSpec{Network: abi.NetworkInternet, BuildTimeoutSec: 600}},
		{"[environment]\nallow_internet = false\n", abi.SandboxSpec{BuildTimeoutSec: 600}},
		{"[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"no-network\"\n", abi.SandboxSpec{BuildTimeoutSec: 600}},
		{"[environment]\nbuild_timeout_sec = 90\ncpus = 2\nmemory_mb = 1024\nstorage_mb = 3000\nworkdir = \"/srv\"\nenv = { A = \"1\", B = \"${B:-two}\" }\n[agent]\nuser = \"1000\"\n[verifier]\nuser = 1000\n",
			abi.SandboxSpec{Network: abi.NetworkInternet, BuildTimeoutSec: 90, CPUs: 2, MemoryMB: 1024, DiskMB: 3000, Workdir: "/srv", Env: map[string]string{"A": "1", "B": "two"}, User: "1000"}},
		{"[agent]\nuser = \"agent\"\n[verifier]\nuser = \"root\"\n", abi.SandboxSpec{Network: abi.NetworkInternet, BuildTimeoutSec: 600, User: "root", AgentUser: "agent"}},
		{"[agent]\nuser = \"agent\"\n", abi.SandboxSpec{Network: abi.NetworkInternet, BuildTimeoutSec: 600, AgentUser: "agent"}},
	} {
		rr := loadOne(t, h, map[string]file{"task.toml": {body: tc.toml}, "instruction.md": {body: "x"}, "tests/test.sh": {body: "true"}, "environment/Dockerfile": {body: "FROM x\n"}})
		var spec abi.SandboxSpec
		if err := sdktest.Call(abi.HookSandbox, rr, &spec); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		want.Private = []string{testsDir, verifierDir}
		want.BuildTimeoutFrom = fmt.Sprintf("task.toml [environment] build_timeout_sec = %g", want.BuildTimeoutSec)
		spec.BuildContext = nil
		if !reflect.DeepEqual(spec, want) {
			t.Errorf("%q:\ngot  %+v\nwant %+v", tc.toml, spec, want)
		}
	}
}

// verify loads a task with a prebuilt image, task.toml and test.sh, and
// verifies it.
func verify(t *testing.T, h *sdktest.Host, toml, test string, mode int64) abi.VerifyResponse {
	t.Helper()
	rr := loadOne(t, h, map[string]file{"task.toml": {body: toml + "[environment]\ndocker_image = \"img\"\n"}, "instruction.md": {body: "x"}, "tests/test.sh": {body: test, mode: mode}})
	var v abi.VerifyResponse
	if err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVerifyHarborWay pins the verifier of harbor-framework/harbor
// src/harbor/verifier/verifier.py at 738fdfba: test.sh is made executable
// (its mode in the folder does not matter) and run as its own program
// with [verifier].env, its output and errors in test-stdout.txt;
// reward.json wins over reward.txt, and which gave the reward is recorded.
// The whole log comes back (bounded), and per-test results come from
// pytest's -rA summary when there is no CTRF or JUnit report.
func TestVerifyHarborWay(t *testing.T) {
	h := sdktest.New(t)
	test := `#!/bin/bash
echo "token=$TOKEN"
echo "to stderr" >&2
printf '=== short test summary info ===\nPASSED tests/test_a.py::test_one\nFAILED tests/test_a.py::test_two - assert 0\n=== 1 failed, 1 passed ===\n'
echo 1 > "$ROOT/logs/verifier/reward.txt"
echo '{"reward": 0.5, "partial": 1}' > "$ROOT/logs/verifier/reward.json"
`
	v := verify(t, h, "[verifier]\nenv = { TOKEN = \"t0k\" }\n", test, 0o644)
	if v.Reward != 0.5 || v.Passed || v.RewardSource != rewardJSONPath || v.Scores["partial"] != 1 {
		t.Errorf("%+v", v)
	}
	if !strings.Contains(v.Log, "token=t0k\n") || !strings.Contains(v.Log, "to stderr") || v.Output != v.Log {
		t.Errorf("log %q output %q", v.Log, v.Output)
	}
	want := []abi.TestResult{{Name: "tests/test_a.py::test_one", Status: "passed"}, {Name: "tests/test_a.py::test_two", Status: "failed", Message: "assert 0"}}
	if !reflect.DeepEqual(v.Tests, want) {
		t.Errorf("tests %+v", v.Tests)
	}
}

// TestVerifyLongLogIsKept: a 3 MiB log comes back as its head and tail
// around a line that says how much was cut; results.jsonl's Output is
// short too, and keeps the log's start (where a failing test's setup
// shows) as well as its end, the elision marked (issue 32).
func TestVerifyLongLogIsKept(t *testing.T) {
	h := sdktest.New(t)
	test := `#!/bin/bash
echo FIRST-LINE
head -c 3145728 /dev/zero | tr '\0' 'x'
echo
echo LAST-LINE
echo 1 > "$ROOT/logs/verifier/reward.txt"
`
	v := verify(t, h, "", test, 0)
	if len(v.Log) > abi.MaxVerifyLog+200 || !strings.HasPrefix(v.Log, "FIRST-LINE\n") || !strings.HasSuffix(v.Log, "LAST-LINE\n") ||
		!strings.Contains(v.Log, "bytes of 3145750 cut here") || v.RewardSource != rewardTextPath ||
		len(v.Output) > outputHead+outputTail+200 || !strings.HasPrefix(v.Output, "FIRST-LINE\n") || !strings.HasSuffix(v.Output, "LAST-LINE\n") ||
		!strings.Contains(v.Output, "bytes cut here: the whole output is the rollout's verifier log") {
		t.Errorf("log %d bytes, head %q, tail %q, output %d bytes", len(v.Log), v.Log[:20], v.Log[len(v.Log)-20:], len(v.Output))
	}
}

// TestTestResultsFallBackToJUnit: with no ctrf.json, a JUnit report in
// /logs/verifier gives the per-test results.
func TestTestResultsFallBackToJUnit(t *testing.T) {
	h := sdktest.New(t)
	test := `#!/bin/bash
cat > "$ROOT/logs/verifier/junit.xml" <<'XML'
<testsuite><testcase classname="t" name="a"/><testcase classname="t" name="b"><failure message="no"/></testcase></testsuite>
XML
echo 0 > "$ROOT/logs/verifier/reward.txt"
`
	v := verify(t, h, "", test, 0)
	want := []abi.TestResult{{Name: "t::a", Status: "passed"}, {Name: "t::b", Status: "failed", Message: "no"}}
	if !reflect.DeepEqual(v.Tests, want) {
		t.Errorf("%+v", v.Tests)
	}
}

// TestOracleHarborWay pins harbor-framework/harbor
// src/harbor/agents/oracle.py at 738fdfba: solve.sh runs as its own
// program (made executable), with DEBIAN_FRONTEND=noninteractive and
// [solution].env (which wins), its output and errors in
// /logs/agent/oracle.txt; a non-zero exit is recorded, not an error.
func TestOracleHarborWay(t *testing.T) {
	h := sdktest.New(t)
	solve := `#!/bin/bash
echo "frontend=$DEBIAN_FRONTEND key=$KEY"
echo "oops" >&2
exit 3
`
	rr := loadOne(t, h, map[string]file{
		"task.toml":         {body: "[solution]\nenv = { KEY = \"k\", DEBIAN_FRONTEND = \"readline\" }\n[environment]\ndocker_image = \"img\"\n"},
		"instruction.md":    {body: "x"},
		"tests/test.sh":     {body: "true"},
		"solution/solve.sh": {body: solve, mode: 0o644},
	})
	if err := sdktest.Call(abi.HookSetup, rr, nil); err != nil {
		t.Fatal(err)
	}
	var o abi.OracleResponse
	if err := sdktest.Call(abi.HookOracle, rr, &o); err != nil {
		t.Fatal(err)
	}
	if o.Output != "frontend=readline key=k\noops\n" || o.ExitCode == nil || *o.ExitCode != 3 {
		t.Errorf("%q %v", o.Output, o.ExitCode)
	}
	if b, _ := os.ReadFile(h.Path("/logs/agent/oracle.txt")); string(b) != o.Output {
		t.Errorf("oracle.txt %q", b)
	}
}

// TestHealthcheck pins BaseEnvironment.run_healthcheck
// (harbor-framework/harbor src/harbor/environments/base.py at 738fdfba):
// it retries until
// the command passes, and gives up after `retries` failures in a row once
// the start period is over.
func TestHealthcheck(t *testing.T) {
	h := sdktest.New(t)
	check := func(cmd string, extra string) error {
		toml := "[environment]\ndocker_image = \"img\"\n[environment.healthcheck]\ncommand = '" + cmd + "'\ninterval_sec = 0\nstart_interval_sec = 0\n" + extra
		rr := loadOne(t, h, map[string]file{"task.toml": {body: toml}, "instruction.md": {body: "x"}, "tests/test.sh": {body: "true"}})
		return sdktest.Call(abi.HookSetup, rr, nil)
	}
	counter := `n=$(cat "$ROOT/count" 2>/dev/null || echo 0); echo $((n+1)) > "$ROOT/count"; [ "$n" -ge 2 ]`
	if err := check(counter, "retries = 3\n"); err != nil {
		t.Errorf("passes on the third try: %v", err)
	}
	os.Remove(h.Path("/count"))
	if err := check(counter, "retries = 2\n"); err == nil || !strings.Contains(err.Error(), "after 2 consecutive retries") {
		t.Errorf("two failures in a row with retries = 2: %v", err)
	}
	os.Remove(h.Path("/count"))
	// Failures in the start period do not count.
	if err := check(counter, "retries = 1\nstart_period_sec = 60\n"); err != nil {
		t.Errorf("start period: %v", err)
	}
}

// TestPrebuiltImageGetsEnvironmentFiles: with docker_image and no
// Dockerfile, environment/ is copied into the working directory after the
// sandbox starts (should_upload_environment_dir in
// harbor-framework/harbor src/harbor/environments/definition.py).
func TestPrebuiltImageGetsEnvironmentFiles(t *testing.T) {
	h := sdktest.New(t)
	rr := loadOne(t, h, map[string]file{
		"task.toml":            {body: "[environment]\ndocker_image = \"img\"\nworkdir = \"/app\"\n"},
		"instruction.md":       {body: "x"},
		"tests/test.sh":        {body: "true"},
		"environment/data.csv": {body: "a,b\n"},
	})
	if err := sdktest.Call(abi.HookSetup, rr, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(h.Path("/app/data.csv")); err != nil || string(b) != "a,b\n" {
		t.Errorf("%q %v", b, err)
	}
}

// TestOracleTimeoutIsTheRunsAgentTimeout: solve.sh runs under the agent's
// timeout as the run scales it (agent_timeout_multiplier); running past it
// is the agent's outcome, and what it printed until then is kept (issue
// 32: it was lost).
func TestOracleTimeoutIsTheRunsAgentTimeout(t *testing.T) {
	h := sdktest.New(t)
	h.Datasets["d"] = []json.RawMessage{folderRowOf("t", map[string]file{
		"task.toml":         {body: "[agent]\ntimeout_sec = 10\n[environment]\ndocker_image = \"img\"\n"},
		"instruction.md":    {body: "x"},
		"tests/test.sh":     {body: "true"},
		"solution/solve.sh": {body: "#!/bin/bash\necho started\nsleep 30\n"},
	})}
	cfg := json.RawMessage(`{"dataset":"d","agent_timeout_multiplier":0.1}`)
	var resp abi.TasksResponse
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{Config: cfg}, &resp); err != nil || resp.Tasks[0].AgentTimeoutSec != 1 {
		t.Fatalf("%v %+v", err, resp)
	}
	rr := abi.RolloutRequest{Task: resp.Tasks[0], Config: cfg}
	if err := sdktest.Call(abi.HookSetup, rr, nil); err != nil {
		t.Fatal(err)
	}
	var o abi.OracleResponse
	err := sdktest.Call(abi.HookOracle, rr, &o)
	if err != nil || !o.TimedOut || o.ExitCode != nil || o.Output != "started\n" {
		t.Fatalf("%v %+v", err, o)
	}
}

// TestVerifierFailuresAreHarbors: test.sh past its timeout, and a reward
// file that is empty or does not parse, are the verifier's failure, as
// Harbor's VerifierTimeoutError, RewardFileEmptyError and
// VerifierOutputParseError (src/harbor/verifier/verifier.py at 738fdfba):
// no reward, the output kept, the limit named; not a hook error, which
// would be an infra_error retried.
func TestVerifierFailuresAreHarbors(t *testing.T) {
	h := sdktest.New(t)
	v := verify(t, h, "[verifier]\ntimeout_sec = 1\n", "#!/bin/bash\necho begun\nsleep 20\n", 0o755)
	if !strings.Contains(v.Failure, "test.sh ran past the verifier timeout of 1s (task.toml [verifier] timeout_sec = 1)") || v.Output != "begun\n" || v.Reward != 0 {
		t.Errorf("timeout: %+v", v)
	}
	v = verify(t, h, "", "#!/bin/bash\necho begun\n: > \"$ROOT/logs/verifier/reward.txt\"\n", 0o755)
	if !strings.Contains(v.Failure, "reward.txt is empty") || v.Output != "begun\n" {
		t.Errorf("empty reward: %+v", v)
	}
	v = verify(t, h, "", "#!/bin/bash\necho '{\"reward\": \"high\"}' > \"$ROOT/logs/verifier/reward.json\"\n", 0o755)
	if !strings.Contains(v.Failure, "not a number") {
		t.Errorf("unreadable reward: %+v", v)
	}
}
