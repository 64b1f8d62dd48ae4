// Command swesmith is the bundled SWE-smith environment: each instance is
// a repository with the code at /testbed, a patch that introduces a bug,
// and the tests that must pass again (FAIL_TO_PASS) or keep passing
// (PASS_TO_PASS).
//
// Two workspace modes. Image mode (rows with image_name, SWE-smith's own
// layout): the sandbox is the repository's image, with the clean code at
// /testbed, and setup applies the bug patch. Clone mode (rows with repo and
// base_commit but no image, like the SWE-smith-oracle rows, or rows whose
// instance_id names a branch of a SWE-smith mirror): the host checks the
// repository out from its shared bare-repository cache into a generic image
// (the repo.checkout operation, which the run must grant).
//
// The agent works on the bugged code with the FAIL_TO_PASS test files
// hidden and a history that starts afresh, so neither the tests nor `git
// log` give the fix away. Grading never trusts the agent's sandbox: the
// plugin takes the agent's changes as a diff, leaves out every change to
// tests, test hooks (conftest.py, pytest.ini, ...), bytecode and symlinks,
// then resets to a fresh sandbox, prepares the same bugged checkout with
// the tests in place, applies the diff and runs the tests there, as
// SWE-smith and SWE-bench grade a patch in a new container. Nothing the
// agent left outside /testbed (a PATH, a .pth file, a background process)
// is there.
//
// Two gradings. Strict (the default): resolved only when every listed
// test passes (XFAIL counts as a pass, a missing or skipped test as a
// failure), with pytest's JUnit report or `go test -json`. Swesmith:
// SWE-smith's own harness, for scores comparable with it: the
// repository's test command and log parser from SWE-smith's profiles, and
// its rule that a test the log does not mention passes.
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
	"time"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.Register(&env{}) }

func main() {}

// Config is the run's [env.config] table.
type Config struct {
	Dataset        string   `json:"dataset"`
	Split          string   `json:"split"`
	Instances      []string `json:"instances"` // include globs of instance ids
	Exclude        []string `json:"exclude"`
	Repos          []string `json:"repos"`
	PythonOnly     bool     `json:"python_only"`
	MaxItems       int      `json:"max_items"`
	ShuffleSeed    uint64   `json:"shuffle_seed"`
	Image          string   `json:"image"`           // overrides every row's image_name
	PromptTemplate string   `json:"prompt_template"` // {problem_statement}, {extra}, {tests}
	ExtraText      string   `json:"extra_text"`
	// TestTimeout bounds one run of the tests; AgentTimeout the agent.
	TestTimeout  duration `json:"test_timeout"`
	AgentTimeout duration `json:"agent_timeout"`
	// Mode is auto (from each row), image or clone.
	Mode string `json:"mode"`
	// RepoURL turns a row's repo into a URL for clone mode; {repo} is
	// replaced. A local folder of repositories works too.
	RepoURL string `json:"repo_url"`
	// CloneImage is the sandbox image of clone mode.
	CloneImage string `json:"clone_image"`
	// InstallCmd runs in /testbed after a clone-mode checkout.
	InstallCmd string `json:"install_cmd"`
	// TestSetup runs before the tests, in the same shell. Unset, it
	// activates the conda env "testbed" when the image has
	// /opt/miniconda3, as SWE-smith's images do; "" runs nothing.
	TestSetup *string `json:"test_setup"`
	// GoTestFlags are extra flags for `go test -json` on Go rows.
	GoTestFlags string `json:"go_test_flags"`
	// Grading is strict or swesmith.
	Grading string `json:"grading"`
	// Profiles give repositories (owner/repo) a test command and log
	// parser for the swesmith grading, over SWE-smith's own.
	Profiles map[string]Profile `json:"profiles"`
}

// duration is a Go duration string in the config ("300s", "30m").
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`want a duration string such as "300s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("%q is not a positive duration such as \"300s\"", s)
	}
	*d = duration(v)
	return nil
}

func (d duration) seconds() float64 { return time.Duration(d).Seconds() }
func (d duration) ms() int64        { return time.Duration(d).Milliseconds() }

const defaultTemplate = `<problem_statement>
{problem_statement}
</problem_statement>

The repository is checked out at /testbed. Change its source code so that the problem above is fixed.
{extra}
These tests must pass when you are done (some of them may be missing from the checkout):
{tests}`

// condaSetup is SWE-smith's own activation of its images' Python.
const condaSetup = `if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi`

func parseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, fmt.Errorf("env.config: %w", err)
	}
	if c.Dataset == "" {
		return c, errors.New("env.config.dataset is required: a JSONL/parquet file of SWE-smith instances or hf://SWE-bench/SWE-smith")
	}
	if c.PromptTemplate == "" {
		c.PromptTemplate = defaultTemplate
	}
	switch c.Grading {
	case "":
		c.Grading = gradingStrict
	case gradingStrict, gradingSwesmith:
	default:
		return c, fmt.Errorf("env.config.grading is %q: use strict (every listed test must pass) or swesmith (SWE-smith's harness)", c.Grading)
	}
	if err := checkProfiles(c.Profiles); err != nil {
		return c, err
	}
	if c.TestTimeout == 0 {
		// SWE-smith's eval harness gives the tests 4×TIMEOUT, 480s
		// (swesmith/harness/eval.py, swesmith/constants.py).
		c.TestTimeout = duration(300 * time.Second)
		if c.Grading == gradingSwesmith {
			c.TestTimeout = duration(480 * time.Second)
		}
	}
	if c.AgentTimeout == 0 {
		c.AgentTimeout = duration(30 * time.Minute)
	}
	if c.RepoURL == "" {
		c.RepoURL = "https://github.com/{repo}.git"
	}
	if c.CloneImage == "" {
		c.CloneImage = "python:3.12"
	}
	if c.TestSetup == nil {
		s := condaSetup
		c.TestSetup = &s
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

// tests are every listed test: FAIL_TO_PASS, then PASS_TO_PASS.
func (in Instance) tests() []string {
	return append(slices.Clone(in.FailToPass), in.PassToPass...)
}

// listedTest is a listed test and its group, FAIL_TO_PASS or PASS_TO_PASS.
type listedTest struct{ id, group string }

// grouped are the listed tests with their groups, in the order of tests.
func (in Instance) grouped() []listedTest {
	var out []listedTest
	for _, id := range in.FailToPass {
		out = append(out, listedTest{id, "FAIL_TO_PASS"})
	}
	for _, id := range in.PassToPass {
		out = append(out, listedTest{id, "PASS_TO_PASS"})
	}
	return out
}

// ref is the commit or ref clone mode checks out: base_commit, or else the
// instance's own branch, as SWE-smith's mirrors keep every instance.
func (in Instance) ref() string {
	if in.BaseCommit != "" {
		return in.BaseCommit
	}
	return in.ID
}

// mode picks the workspace mode of one instance under the config.
func mode(c Config, in Instance) (string, error) {
	image := in.Image != "" || c.Image != ""
	clone := in.Repo != "" && (in.BaseCommit != "" || c.Mode == modeClone)
	switch {
	case c.Mode == modeImage && !image:
		return "", errors.New("mode is image but the row has no image_name and env.config.image is not set")
	case c.Mode == modeClone && !clone:
		return "", errors.New("mode is clone but the row has no repo")
	case c.Mode == modeImage, c.Mode == "auto" && image:
		return modeImage, nil
	case clone:
		return modeClone, nil
	}
	return "", errors.New("the row has neither image_name (image mode) nor repo and base_commit (clone mode)")
}

// env keeps what Setup learnt for Verify. One plugin instance serves one
// rollout, and the agent cannot reach the plugin's memory.
type env struct {
	base     string          // the commit the agent's history starts from
	top      map[string]bool // the names at the top of that commit
	gradeRef string          // clone mode: the commit grading checks out
	hidden   []string        // the FAIL_TO_PASS test files hidden from the agent
}

func (*env) Manifest() abi.Manifest {
	return abi.Manifest{
		Name:         "swesmith",
		Version:      "0.3.0",
		Description:  "SWE-smith instances: the bugged repository at /testbed, graded on FAIL_TO_PASS and PASS_TO_PASS in a fresh sandbox",
		Capabilities: []string{abi.OpExec, abi.OpReadFile, abi.OpWriteFile, abi.OpDatasetRead, abi.OpReset},
		// Clone mode only; a run of image-mode rows need not grant it.
		OptionalCapabilities: []string{abi.OpRepoCheckout},
		ConfigSchema: json.RawMessage(`{"type":"object","required":["dataset"],"additionalProperties":false,"properties":{` +
			`"dataset":{"type":"string"},"split":{"type":"string"},"instances":{"type":"array"},"exclude":{"type":"array"},"repos":{"type":"array"},` +
			`"python_only":{"type":"boolean"},"max_items":{"type":"integer"},"shuffle_seed":{"type":"integer"},"image":{"type":"string"},` +
			`"prompt_template":{"type":"string"},"extra_text":{"type":"string"},"test_timeout":{"type":"string"},"agent_timeout":{"type":"string"},` +
			`"mode":{"enum":["auto","image","clone"]},"repo_url":{"type":"string"},"clone_image":{"type":"string"},"install_cmd":{"type":"string"},` +
			`"test_setup":{"type":"string"},"go_test_flags":{"type":"string"},"grading":{"enum":["strict","swesmith"]},` +
			`"profiles":{"type":"object","additionalProperties":{"type":"object","required":["test_cmd"],"additionalProperties":false,` +
			`"properties":{"test_cmd":{"type":"string"},"log_parser":{"type":"string"}}}}}}`),
		// What decides a verdict: a resume that changes one is refused.
		ScoringKeys: []string{"grading", "profiles", "test_timeout", "test_setup", "go_test_flags"},
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
	for _, t := range in.tests() {
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
		if err == nil {
			err = gradable(c, in)
		}
		if err != nil {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: in.ID, Reason: err.Error()})
			continue
		}
		in.Mode = m
		warnUnparsable(c, in)
		if c.Image != "" && m == modeImage {
			in.Image = c.Image
		}
		data, _ := json.Marshal(in)
		// Verification starts a second sandbox and prepares it, then
		// runs the tests, and on a broken run collects them once more.
		resp.Tasks = append(resp.Tasks, abi.Task{ID: in.ID, Category: in.Repo, AgentTimeoutSec: c.AgentTimeout.seconds(),
			AgentTimeoutFrom:  "env.config.agent_timeout = " + c.AgentTimeout.String(),
			VerifyTimeoutSec:  2*c.TestTimeout.seconds() + 300,
			VerifyTimeoutFrom: "2 × env.config.test_timeout = " + c.TestTimeout.String() + ", + 300 s to prepare a fresh sandbox",
			Data:              data})
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

func instance(r abi.RolloutRequest) (Instance, Config, error) {
	var in Instance
	if err := json.Unmarshal(r.Task.Data, &in); err != nil {
		return in, Config{}, err
	}
	c, err := parseConfig(r.Config)
	return in, c, err
}

func (*env) Sandbox(r abi.RolloutRequest) (abi.SandboxSpec, error) {
	in, c, err := instance(r)
	if err != nil {
		return abi.SandboxSpec{}, err
	}
	if in.Mode == modeClone {
		return abi.SandboxSpec{Image: c.CloneImage, Workdir: "/"}, nil
	}
	if in.Image == "" {
		return abi.SandboxSpec{}, sdk.Errorf("setup", "instance %s has no image_name", in.ID)
	}
	return abi.SandboxSpec{Image: in.Image, Workdir: "/testbed"}, nil
}

func (*env) Prompt(r abi.RolloutRequest) (abi.PromptResponse, error) {
	in, c, err := instance(r)
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
