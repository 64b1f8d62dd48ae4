// Command swesmith is the bundled SWE-smith environment: each instance is
// a repository with the code at /testbed, a patch that introduces a bug,
// and the tests that must pass again (FAIL_TO_PASS) or keep passing
// (PASS_TO_PASS).
//
// Two workspace modes. Image mode (rows with image_name, SWE-smith's own
// layout): the sandbox is the repository's image, with the clean code at
// /testbed. Clone mode (rows with repo and base_commit but no image, like
// the SWE-smith-oracle rows): the sandbox is a generic image and the host
// checks the repository out at base_commit from its shared bare-repository
// cache (the repo.checkout operation, which the run must grant).
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
	// Mode is auto (from each row), image or clone.
	Mode string `json:"mode"`
	// RepoURL turns a row's repo into a URL for clone mode; {repo} is
	// replaced. A local folder of repositories works too.
	RepoURL string `json:"repo_url"`
	// CloneImage is the sandbox image of clone mode.
	CloneImage string `json:"clone_image"`
	// InstallCmd runs in /testbed after a clone-mode checkout.
	InstallCmd string `json:"install_cmd"`
	// GoTestFlags are extra flags for `go test -json` on Go rows.
	GoTestFlags string `json:"go_test_flags"`
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
	if c.RepoURL == "" {
		c.RepoURL = "https://github.com/{repo}.git"
	}
	if c.CloneImage == "" {
		c.CloneImage = "python:3.12"
	}
	switch c.Mode {
	case "":
		c.Mode = "auto"
	case "auto", modeImage, modeClone:
	default:
		return c, fmt.Errorf("env.config.mode is %q: use auto, image or clone", c.Mode)
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
	Text             string   `json:"text,omitempty"`
	Mode             string   `json:"mode,omitempty"`
}

// Workspace modes.
const (
	modeImage = "image"
	modeClone = "clone"
)

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
		Text             string   `json:"text"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return Instance{}, err
	}
	if r.ID == "" && r.Repo != "" && len(r.BaseCommit) >= 7 {
		// SWE-smith-oracle rows may carry no id: name them by repo and commit.
		r.ID = strings.ReplaceAll(r.Repo, "/", "__") + "." + r.BaseCommit[:min(len(r.BaseCommit), 12)]
	}
	if r.ID == "" {
		return Instance{}, errors.New("row has no instance_id (nor repo and base_commit to name it by)")
	}
	if len(r.FailToPass) == 0 {
		return Instance{}, fmt.Errorf("instance %s has no FAIL_TO_PASS tests", r.ID)
	}
	if r.ProblemStatement == "" && r.Text == "" {
		return Instance{}, fmt.Errorf("instance %s has neither problem_statement nor text", r.ID)
	}
	return Instance{ID: r.ID, Repo: r.Repo, Patch: r.Patch, FailToPass: r.FailToPass, PassToPass: r.PassToPass,
		Image: r.Image, BaseCommit: r.BaseCommit, ProblemStatement: r.ProblemStatement, Text: r.Text}, nil
}

// mode picks the workspace mode of one instance under the config.
func mode(c Config, in Instance) (string, error) {
	image := in.Image != "" || c.Image != ""
	clone := in.Repo != "" && in.BaseCommit != ""
	switch {
	case c.Mode == modeImage && !image:
		return "", errors.New("mode is image but the row has no image_name and env.config.image is not set")
	case c.Mode == modeClone && !clone:
		return "", errors.New("mode is clone but the row has no repo and base_commit")
	case c.Mode == modeImage, c.Mode == "auto" && image:
		return modeImage, nil
	case clone:
		return modeClone, nil
	}
	return "", errors.New("the row has neither image_name (image mode) nor repo and base_commit (clone mode)")
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
		// Clone mode only; a run of image-mode rows need not grant it.
		OptionalCapabilities: []string{abi.OpRepoCheckout},
		ConfigSchema:         json.RawMessage(`{"type":"object","required":["dataset"],"properties":{"dataset":{"type":"string"},"instances":{"type":"array"},"exclude":{"type":"array"},"repos":{"type":"array"},"python_only":{"type":"boolean"},"max_items":{"type":"integer"},"shuffle_seed":{"type":"integer"},"image":{"type":"string"},"prompt_template":{"type":"string"},"extra_text":{"type":"string"},"test_timeout_sec":{"type":"number"},"agent_timeout_sec":{"type":"number"},"mode":{"enum":["auto","image","clone"]},"repo_url":{"type":"string"},"clone_image":{"type":"string"},"install_cmd":{"type":"string"},"go_test_flags":{"type":"string"}}}`),
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
		m, err := mode(c, in)
		if err != nil {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: in.ID, Reason: err.Error()})
			continue
		}
		in.Mode = m
		if c.Image != "" && m == modeImage {
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
	if in.Mode == modeClone {
		c, err := parseConfig(r.Config)
		if err != nil {
			return abi.SandboxSpec{}, err
		}
		return abi.SandboxSpec{Image: c.CloneImage, Workdir: "/"}, nil
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
const hookFind = `find . -path ./.git -prune -o \( -name conftest.py -o -name pytest.ini -o -name tox.ini -o -name setup.cfg -o -name pyproject.toml -o -name '__init__.py' -path '*tests*' -o -name 'test_*.py' -o -name '*_test.py' -o -name '*_test.go' \) -type f -print`

func testFiles(ids []string) []string {
	var files []string
	for _, t := range ids {
		f, _, found := strings.Cut(t, "::")
		if !found && !strings.HasSuffix(f, ".py") {
			continue // a Go test name, not a file
		}
		if f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	return files
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// checkout brings a clone-mode instance's repository to /testbed (files
// without a .git: Setup makes the one history the agent sees), then runs
// the configured install command.
func checkout(c Config, in Instance) error {
	url := strings.ReplaceAll(c.RepoURL, "{repo}", in.Repo)
	if _, err := sdk.RepoCheckout(url, in.BaseCommit, "/testbed"); err != nil {
		var he *sdk.HostError
		if errors.As(err, &he) && he.Status == abi.StatusDenied {
			return sdk.Errorf("setup", "instance %s needs clone mode: add \"repo.checkout\" to [env] grants", in.ID)
		}
		return sdk.Errorf("setup", "instance %s: check out %s at %s: %v", in.ID, url, in.BaseCommit, err)
	}
	if c.InstallCmd != "" {
		if _, err := run("setup", "install_cmd", c.InstallCmd, int64(c.TestTimeoutSec*1000)); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) Setup(r abi.RolloutRequest) error {
	in, err := instance(r)
	if err != nil {
		return err
	}
	if in.Mode == modeClone {
		c, err := parseConfig(r.Config)
		if err != nil {
			return err
		}
		if err := checkout(c, in); err != nil {
			return err
		}
	}
	// Snapshot the test files and hooks of the clean checkout, in memory.
	// (An image's checkout must be clean; a clone-mode checkout has no .git
	// yet, so git status says nothing.)
	if _, err := run("setup", "snapshot tests", "git status --porcelain --untracked-files=no | grep -q . && { echo 'checkout not clean'; exit 1; }; "+
		hookFind+" | tar -cf /tmp/.proctor-tests.tar -T - && echo ok", 120000); err != nil {
		return err
	}
	snap, err := sdk.ReadFile("/tmp/.proctor-tests.tar")
	if err != nil {
		return err
	}
	e.snapshot = snap
	// Bring the checkout to the bugged state (oracle-variant rows have no
	// patch: base_commit is the bugged state already).
	if in.Patch != "" {
		if err := applyBug(in); err != nil {
			return err
		}
	}
	// Hide the failing tests, and start the history afresh so the bug is not in a diff.
	var rm []string
	for _, f := range testFiles(in.FailToPass) {
		rm = append(rm, quote(f))
	}
	_, err = run("setup", "hide tests and reset history", "rm -f /tmp/.proctor-tests.tar "+strings.Join(rm, " ")+
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
	problem, extra := in.ProblemStatement, c.ExtraText
	if problem == "" {
		problem = in.Text // oracle-variant rows: text is the whole issue with its context
	} else if in.Text != "" {
		extra = strings.TrimSpace(in.Text + "\n" + extra)
	}
	p := strings.NewReplacer("{problem_statement}", problem, "{extra}", extra, "{tests}", tests).Replace(c.PromptTemplate)
	return abi.PromptResponse{User: p}, nil
}

// Oracle applies the gold fix: the bug patch reversed.
func (*env) Oracle(r abi.RolloutRequest) (abi.OracleResponse, error) {
	in, err := instance(r)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	if in.Patch == "" {
		return abi.OracleResponse{}, sdk.Errorf("setup", "instance %s has no patch, so there is no gold fix to apply: the oracle agent needs rows with a patch", in.ID)
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
	var got map[string]string
	var out string
	if isGo(in) {
		got, out, err = runGoTests(c, ids)
	} else {
		got, out, err = runPytest(c, ids)
	}
	if err != nil {
		return abi.VerifyResponse{}, err
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

// applyBug applies the instance's bug patch to the clean checkout.
func applyBug(in Instance) error {
	if err := sdk.WriteFile("/tmp/.proctor-bug.patch", []byte(in.Patch), 0o600); err != nil {
		return err
	}
	where := in.Image
	if in.Mode == modeClone {
		where = in.Repo + "@" + in.BaseCommit
	}
	_, err := run("setup", fmt.Sprintf("instance %s: the bug patch does not apply to %s", in.ID, where),
		"git apply --whitespace=nowarn /tmp/.proctor-bug.patch; rc=$?; rm -f /tmp/.proctor-bug.patch; exit $rc", 120000)
	return err
}

// runPytest runs the listed tests' files with a JUnit report.
func runPytest(c Config, ids []string) (map[string]string, string, error) {
	var args []string
	for _, f := range testFiles(ids) {
		args = append(args, quote(f))
	}
	res, err := sdk.Exec(abi.ExecRequest{Workdir: "/testbed", TimeoutMs: int64(c.TestTimeoutSec * 1000), MaxOutput: 256 << 10,
		Cmd: "rm -f /tmp/.proctor-junit.xml; python3 -m pytest -rA -p no:cacheprovider --junitxml=/tmp/.proctor-junit.xml " + strings.Join(args, " ")})
	if err != nil {
		return nil, "", err
	}
	out := tail(res.Stdout+res.Stderr, 4000)
	if res.TimedOut {
		return nil, out, sdk.Errorf("verifier", "tests ran past %.0fs:\n%s", c.TestTimeoutSec, out)
	}
	xml, err := sdk.ReadFile("/tmp/.proctor-junit.xml")
	if err != nil {
		return nil, out, sdk.Errorf("verifier", "pytest wrote no report (exit %d): install or collection failed:\n%s", res.ExitCode, out)
	}
	got, err := ParseJUnit(xml)
	if err != nil {
		return nil, out, sdk.Errorf("verifier", "read the pytest report: %v", err)
	}
	if len(got) == 0 && res.ExitCode != 0 {
		return nil, out, sdk.Errorf("verifier", "no test ran (pytest exit %d):\n%s", res.ExitCode, out)
	}
	return got, out, nil
}

// runGoTests runs the listed Go tests in every package with -json events.
func runGoTests(c Config, ids []string) (map[string]string, string, error) {
	cmd := "go test -json -count=1 " + c.GoTestFlags + " -run " + quote(goRunPattern(ids)) + " ./... > /tmp/.proctor-gotest.json 2>/tmp/.proctor-gotest.err; echo $?"
	res, err := sdk.Exec(abi.ExecRequest{Workdir: "/testbed", TimeoutMs: int64(c.TestTimeoutSec * 1000), MaxOutput: 64 << 10, Cmd: cmd})
	if err != nil {
		return nil, "", err
	}
	events, err := sdk.ReadFile("/tmp/.proctor-gotest.json")
	if err != nil {
		return nil, "", sdk.Errorf("verifier", "go test wrote no output: %v", err)
	}
	stderr, _ := sdk.ReadFile("/tmp/.proctor-gotest.err")
	out := tail(string(stderr)+goOutput(events), 4000)
	if res.TimedOut {
		return nil, out, sdk.Errorf("verifier", "tests ran past %.0fs:\n%s", c.TestTimeoutSec, out)
	}
	got := ParseGoTestJSON(events)
	if len(got) == 0 && strings.TrimSpace(res.Stdout) != "0" {
		return nil, out, sdk.Errorf("verifier", "no test ran (go test exit %s): build failed?\n%s", strings.TrimSpace(res.Stdout), out)
	}
	return got, out, nil
}

// goOutput is the text of `go test -json` output events.
func goOutput(events []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(events), "\n") {
		var ev struct{ Action, Output string }
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Action == "output" {
			b.WriteString(ev.Output)
		} else if !strings.HasPrefix(line, "{") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
