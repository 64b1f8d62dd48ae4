// Command swesmith is the bundled SWE-smith environment (image mode): each
// instance is a repository image with the code at /testbed, a patch that
// introduces a bug, and the tests that must pass again (FAIL_TO_PASS) or
// keep passing (PASS_TO_PASS).
//
// Setup applies the bug, hides the failing tests, and restarts the git
// history so neither `git diff` nor `git log` shows the bug. It keeps a
// copy of every test file and test hook (conftest.py, pytest.ini, ...) in
// the plugin's own memory; verification puts that copy back and deletes any
// hook the agent added, so editing, deleting or overriding tests earns
// nothing. Grading follows SWE-smith: resolved only when every listed test
// passes (XFAIL counts as a pass, a missing test as a failure).
//
// Built only against the public SDK.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.Register(&env{}) }

func main() {}

// Config is the run's [env.config] table.
type Config struct {
	Dataset         string   `json:"dataset"`
	Split           string   `json:"split"`
	Instances       []string `json:"instances"` // include globs of instance ids
	Exclude         []string `json:"exclude"`
	Repos           []string `json:"repos"`
	PythonOnly      bool     `json:"python_only"`
	MaxItems        int      `json:"max_items"`
	ShuffleSeed     uint64   `json:"shuffle_seed"`
	Image           string   `json:"image"`           // overrides every row's image_name
	PromptTemplate  string   `json:"prompt_template"` // {problem_statement}, {extra}, {tests}
	ExtraText       string   `json:"extra_text"`
	TestTimeoutSec  float64  `json:"test_timeout_sec"`
	AgentTimeoutSec float64  `json:"agent_timeout_sec"`
}

const defaultTemplate = `<problem_statement>
{problem_statement}
</problem_statement>

The repository is checked out at /testbed. Change its source code so that the problem above is fixed.
{extra}
These tests must pass when you are done (some of them may be missing from the checkout):
{tests}`

func parseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &c); err != nil {
			return c, fmt.Errorf("env.config: %w", err)
		}
	}
	if c.Dataset == "" {
		return c, errors.New("env.config.dataset is required: a JSONL/parquet file of SWE-smith instances or hf://SWE-bench/SWE-smith")
	}
	if c.PromptTemplate == "" {
		c.PromptTemplate = defaultTemplate
	}
	if c.TestTimeoutSec == 0 {
		c.TestTimeoutSec = 300
	}
	if c.AgentTimeoutSec == 0 {
		c.AgentTimeoutSec = 1800
	}
	return c, nil
}

// Instance is one SWE-smith row, normalised.
type Instance struct {
	ID               string   `json:"instance_id"`
	Repo             string   `json:"repo"`
	Patch            string   `json:"patch"`
	FailToPass       []string `json:"FAIL_TO_PASS"`
	PassToPass       []string `json:"PASS_TO_PASS"`
	Image            string   `json:"image_name"`
	BaseCommit       string   `json:"base_commit"`
	ProblemStatement string   `json:"problem_statement"`
}

// testList reads FAIL_TO_PASS / PASS_TO_PASS: a list, or a JSON string of
// a list (as SWE-bench-style datasets store them).
type testList []string

func (l *testList) UnmarshalJSON(b []byte) error {
	var s []string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = s
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	if str == "" {
		*l = nil
		return nil
	}
	return json.Unmarshal([]byte(str), (*[]string)(l))
}

// FromRow reads one dataset row.
func FromRow(raw json.RawMessage) (Instance, error) {
	var r struct {
		ID               string   `json:"instance_id"`
		Repo             string   `json:"repo"`
		Patch            string   `json:"patch"`
		FailToPass       testList `json:"FAIL_TO_PASS"`
		PassToPass       testList `json:"PASS_TO_PASS"`
		Image            string   `json:"image_name"`
		BaseCommit       string   `json:"base_commit"`
		ProblemStatement string   `json:"problem_statement"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return Instance{}, err
	}
	if r.ID == "" {
		return Instance{}, errors.New("row has no instance_id")
	}
	if len(r.FailToPass) == 0 {
		return Instance{}, fmt.Errorf("instance %s has no FAIL_TO_PASS tests", r.ID)
	}
	return Instance{ID: r.ID, Repo: r.Repo, Patch: r.Patch, FailToPass: r.FailToPass, PassToPass: r.PassToPass,
		Image: r.Image, BaseCommit: r.BaseCommit, ProblemStatement: r.ProblemStatement}, nil
}

type env struct {
	// snapshot holds this rollout's original test files (a tar), taken at
	// setup. One plugin instance serves one rollout, so this is per rollout.
	snapshot []byte
}

func (*env) Manifest() abi.Manifest {
	return abi.Manifest{
		Name:         "swesmith",
		Version:      "0.1.0",
		Description:  "SWE-smith instances in image mode: bug patch applied at /testbed, graded on FAIL_TO_PASS and PASS_TO_PASS",
		Capabilities: []string{abi.OpExec, abi.OpReadFile, abi.OpWriteFile, abi.OpUpload, abi.OpDownload, abi.OpDatasetRead},
		ConfigSchema: json.RawMessage(`{"type":"object","required":["dataset"],"properties":{"dataset":{"type":"string"},"instances":{"type":"array"},"exclude":{"type":"array"},"repos":{"type":"array"},"python_only":{"type":"boolean"},"max_items":{"type":"integer"},"shuffle_seed":{"type":"integer"},"image":{"type":"string"},"prompt_template":{"type":"string"},"extra_text":{"type":"string"},"test_timeout_sec":{"type":"number"},"agent_timeout_sec":{"type":"number"}}}`),
	}
}

func match(globs []string, s string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

func isPython(in Instance) bool {
	for _, t := range append(slices.Clone(in.FailToPass), in.PassToPass...) {
		file, _, _ := strings.Cut(t, "::")
		if !strings.HasSuffix(file, ".py") {
			return false
		}
	}
	return true
}

func (*env) LoadTasks(raw json.RawMessage) (abi.TasksResponse, error) {
	c, err := parseConfig(raw)
	if err != nil {
		return abi.TasksResponse{}, err
	}
	rows, err := sdk.ReadAllRows(c.Dataset, c.Split)
	if err != nil {
		return abi.TasksResponse{}, err
	}
	var resp abi.TasksResponse
	for i, row := range rows {
		in, err := FromRow(row)
		if err != nil {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: fmt.Sprintf("row %d", i), Reason: err.Error()})
			continue
		}
		if len(c.Instances) > 0 && !match(c.Instances, in.ID) || match(c.Exclude, in.ID) ||
			len(c.Repos) > 0 && !match(c.Repos, in.Repo) || c.PythonOnly && !isPython(in) {
			continue
		}
		if c.Image != "" {
			in.Image = c.Image
		}
		data, _ := json.Marshal(in)
		resp.Tasks = append(resp.Tasks, abi.Task{ID: in.ID, Category: in.Repo, AgentTimeoutSec: c.AgentTimeoutSec,
			VerifyTimeoutSec: c.TestTimeoutSec + 120, Data: data})
	}
	if c.ShuffleSeed != 0 {
		r := rand.New(rand.NewPCG(c.ShuffleSeed, c.ShuffleSeed^0x5eed))
		r.Shuffle(len(resp.Tasks), func(i, j int) { resp.Tasks[i], resp.Tasks[j] = resp.Tasks[j], resp.Tasks[i] })
	}
	if c.MaxItems > 0 && len(resp.Tasks) > c.MaxItems {
		resp.Tasks = resp.Tasks[:c.MaxItems]
	}
	return resp, nil
}

func instance(r abi.RolloutRequest) (Instance, error) {
	var in Instance
	err := json.Unmarshal(r.Task.Data, &in)
	return in, err
}

func (*env) Sandbox(r abi.RolloutRequest) (abi.SandboxSpec, error) {
	in, err := instance(r)
	if err != nil {
		return abi.SandboxSpec{}, err
	}
	if in.Image == "" {
		return abi.SandboxSpec{}, sdk.Errorf("setup", "instance %s has no image_name", in.ID)
	}
	return abi.SandboxSpec{Image: in.Image, Workdir: "/testbed"}, nil
}

// run executes a command in /testbed and fails on a non-zero exit.
func run(class, what, cmd string, timeoutMs int64) (abi.ExecResponse, error) {
	res, err := sdk.Exec(abi.ExecRequest{Cmd: cmd, Workdir: "/testbed", TimeoutMs: timeoutMs})
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return res, sdk.Errorf(class, "%s: exit %d: %s", what, res.ExitCode, tail(res.Stdout+res.Stderr, 2000))
	}
	return res, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// hooks are files that change how tests run; an agent must not add or edit them.
const hookFind = `find . -path ./.git -prune -o \( -name conftest.py -o -name pytest.ini -o -name tox.ini -o -name setup.cfg -o -name pyproject.toml -o -name '__init__.py' -path '*tests*' -o -name 'test_*.py' -o -name '*_test.py' \) -type f -print`

func testFiles(ids []string) []string {
	var files []string
	for _, t := range ids {
		f, _, _ := strings.Cut(t, "::")
		if f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	return files
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (e *env) Setup(r abi.RolloutRequest) error {
	in, err := instance(r)
	if err != nil {
		return err
	}
	// Snapshot the test files and hooks of the clean checkout, in memory.
	if _, err := run("setup", "snapshot tests", "git status --porcelain --untracked-files=no | grep -q . && { echo 'checkout not clean'; exit 1; }; "+
		hookFind+" | tar -cf /tmp/.proctor-tests.tar -T - && echo ok", 120000); err != nil {
		return err
	}
	snap, err := sdk.ReadFile("/tmp/.proctor-tests.tar")
	if err != nil {
		return err
	}
	e.snapshot = snap
	// Bring the checkout to the bugged state.
	if err := sdk.WriteFile("/tmp/.proctor-bug.patch", []byte(in.Patch), 0o600); err != nil {
		return err
	}
	if _, err := run("setup", fmt.Sprintf("instance %s: the bug patch does not apply to %s", in.ID, in.Image),
		"git apply --whitespace=nowarn /tmp/.proctor-bug.patch; rc=$?; rm -f /tmp/.proctor-bug.patch /tmp/.proctor-tests.tar; exit $rc", 120000); err != nil {
		return err
	}
	// Hide the failing tests, and start the history afresh so the bug is not in a diff.
	var rm []string
	for _, f := range testFiles(in.FailToPass) {
		rm = append(rm, quote(f))
	}
	_, err = run("setup", "hide tests and reset history", "rm -f "+strings.Join(rm, " ")+
		" && rm -rf .git && git init -q && git add -A && git -c user.name=proctor -c user.email=proctor@localhost commit -qm 'initial' && echo ok", 120000)
	return err
}

func (*env) Prompt(r abi.RolloutRequest) (abi.PromptResponse, error) {
	in, err := instance(r)
	if err != nil {
		return abi.PromptResponse{}, err
	}
	c, err := parseConfig(r.Config)
	if err != nil {
		return abi.PromptResponse{}, err
	}
	tests := "- " + strings.Join(in.FailToPass, "\n- ")
	p := strings.NewReplacer("{problem_statement}", in.ProblemStatement, "{extra}", c.ExtraText, "{tests}", tests).Replace(c.PromptTemplate)
	return abi.PromptResponse{User: p}, nil
}

// Oracle applies the gold fix: the bug patch reversed.
func (*env) Oracle(r abi.RolloutRequest) (abi.OracleResponse, error) {
	in, err := instance(r)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	if err := sdk.WriteFile("/tmp/.proctor-fix.patch", []byte(in.Patch), 0o600); err != nil {
		return abi.OracleResponse{}, err
	}
	res, err := run("setup", "apply the gold patch", "git apply -R --whitespace=nowarn /tmp/.proctor-fix.patch; rc=$?; rm -f /tmp/.proctor-fix.patch; exit $rc", 120000)
	return abi.OracleResponse{Output: res.Stdout}, err
}

func (e *env) Verify(r abi.VerifyRequest) (abi.VerifyResponse, error) {
	in, err := instance(r.RolloutRequest)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	c, err := parseConfig(r.Config)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	if e.snapshot == nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "no snapshot of the original tests (setup did not run)")
	}
	// Undo every change to tests and test hooks: delete them all, then put
	// the originals back.
	if _, err := run("verifier", "remove test files", hookFind+" | xargs -r rm -f", 120000); err != nil {
		return abi.VerifyResponse{}, err
	}
	if err := sdk.Upload("/testbed", e.snapshot); err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "restore tests: %v", err)
	}
	ids := append(slices.Clone(in.FailToPass), in.PassToPass...)
	var args []string
	for _, f := range testFiles(ids) {
		args = append(args, quote(f))
	}
	res, err := sdk.Exec(abi.ExecRequest{Workdir: "/testbed", TimeoutMs: int64(c.TestTimeoutSec * 1000), MaxOutput: 256 << 10,
		Cmd: "rm -f /tmp/.proctor-junit.xml; python3 -m pytest -rA -p no:cacheprovider --junitxml=/tmp/.proctor-junit.xml " + strings.Join(args, " ")})
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	out := tail(res.Stdout+res.Stderr, 4000)
	if res.TimedOut {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "tests ran past %.0fs:\n%s", c.TestTimeoutSec, out)
	}
	xml, err := sdk.ReadFile("/tmp/.proctor-junit.xml")
	if err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "pytest wrote no report (exit %d): install or collection failed:\n%s", res.ExitCode, out)
	}
	got, err := ParseJUnit(xml)
	if err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "read the pytest report: %v", err)
	}
	if len(got) == 0 && res.ExitCode != 0 {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "no test ran (pytest exit %d):\n%s", res.ExitCode, out)
	}
	v := Grade(in, got)
	v.Output = out
	return v, nil
}

// Grade applies SWE-smith's rule: resolved only when every FAIL_TO_PASS and
// PASS_TO_PASS test passed; XFAIL counts as passed, a missing test as
// failed.
func Grade(in Instance, got map[string]string) abi.VerifyResponse {
	var v abi.VerifyResponse
	ok := true
	for _, group := range []struct {
		name string
		ids  []string
	}{{"FAIL_TO_PASS", in.FailToPass}, {"PASS_TO_PASS", in.PassToPass}} {
		for _, id := range group.ids {
			st, found := got[id]
			switch {
			case !found:
				st = "missing"
			case st == "xfail":
				st = "passed"
			}
			if st != "passed" {
				ok = false
			}
			v.Tests = append(v.Tests, abi.TestResult{Name: id, Status: st, Message: group.name})
		}
	}
	v.Passed = ok
	if ok {
		v.Reward = 1
	}
	return v
}
