// Command tb2 is the bundled Terminal-Bench 2 environment. It reads Harbor
// task folders and dataset rows in the layout of the Hugging Face
// terminal-bench-2 dataset, runs each task's own image, and verifies the way
// Harbor does, with its holes closed: the verifier's folder is emptied and
// the tests uploaded only when verification starts, so an agent can neither
// pre-write a reward nor read the tests; a missing reward is an
// infrastructure error carrying the test output, not a silent zero.
//
// It is built only against the public SDK and doubles as the reference
// plugin for authors.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.Register(&env{}) }

func main() {}

// Config is the run's [env.config] table.
type Config struct {
	Dataset             string   `json:"dataset"` // task folders, a JSONL/parquet file, or hf://owner/name
	Split               string   `json:"split"`
	Tasks               []string `json:"tasks"`      // include globs (default all)
	Exclude             []string `json:"exclude"`    // exclude globs
	Categories          []string `json:"categories"` // keep only these
	Skip                []string `json:"skip"`       // tasks the backend cannot run (KVM, ...)
	ForceBuild          bool     `json:"force_build"`
	AgentTimeoutMult    float64  `json:"agent_timeout_multiplier"`
	VerifierTimeoutMult float64  `json:"verifier_timeout_multiplier"`
	TestTimeout         string   `json:"test_timeout"` // overrides every task's verifier timeout
	CPUs                float64  `json:"cpus"`
	MemoryMB            int64    `json:"memory_mb"`
}

func parseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, fmt.Errorf("env.config: %w", err)
	}
	if c.Dataset == "" {
		return c, errors.New(`env.config.dataset is required: a folder of Harbor tasks, a .jsonl/.parquet file, or hf://NousResearch/terminal-bench-2`)
	}
	if c.AgentTimeoutMult == 0 {
		c.AgentTimeoutMult = 1
	}
	if c.VerifierTimeoutMult == 0 {
		c.VerifierTimeoutMult = 1
	}
	return c, nil
}

type env struct{}

func (*env) Manifest() abi.Manifest {
	return abi.Manifest{
		Name:         "tb2",
		Version:      "1.0.0",
		Description:  "Terminal-Bench 2: Harbor task folders and terminal-bench-2 dataset rows, verified Harbor's way",
		Capabilities: []string{abi.OpExec, abi.OpReadFile, abi.OpWriteFile, abi.OpUpload, abi.OpDatasetRead},
		ConfigSchema: json.RawMessage(`{"type":"object","required":["dataset"],"properties":{` +
			`"dataset":{"type":"string"},"split":{"type":"string"},"tasks":{"type":"array","items":{"type":"string"}},` +
			`"exclude":{"type":"array"},"categories":{"type":"array"},"skip":{"type":"array"},"force_build":{"type":"boolean"},` +
			`"agent_timeout_multiplier":{"type":"number"},"verifier_timeout_multiplier":{"type":"number"},` +
			`"test_timeout":{"type":"string"},"cpus":{"type":"number"},"memory_mb":{"type":"integer"}}}`),
	}
}

func anyMatch(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
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
		t, err := FromRow(row)
		if err != nil {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: fmt.Sprintf("row %d", i), Reason: err.Error()})
			continue
		}
		switch {
		case len(c.Tasks) > 0 && !anyMatch(c.Tasks, t.Name),
			anyMatch(c.Exclude, t.Name),
			len(c.Categories) > 0 && !anyMatch(c.Categories, t.Category):
			continue
		case anyMatch(c.Skip, t.Name):
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: t.Name, Reason: "in env.config.skip"})
			continue
		}
		agentTO := t.AgentTimeoutSec * c.AgentTimeoutMult
		verifyTO := t.VerifierTimeoutSec * c.VerifierTimeoutMult
		if c.TestTimeout != "" {
			if d, err := parseSeconds(c.TestTimeout); err == nil {
				verifyTO = d
			}
		}
		t.VerifierTimeoutSec = verifyTO
		data, _ := json.Marshal(t)
		resp.Tasks = append(resp.Tasks, abi.Task{
			ID: t.Name, Category: t.Category, Difficulty: t.Difficulty,
			AgentTimeoutSec: agentTO, VerifyTimeoutSec: verifyTO + 60, Data: data,
		})
	}
	return resp, nil
}

// parseSeconds reads "180s", "3m", "1h" or a plain number of seconds.
func parseSeconds(s string) (float64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "ms"):
		mult, s = 0.001, strings.TrimSuffix(s, "ms")
	case strings.HasSuffix(s, "s"):
		s = strings.TrimSuffix(s, "s")
	case strings.HasSuffix(s, "m"):
		mult, s = 60, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "h"):
		mult, s = 3600, strings.TrimSuffix(s, "h")
	}
	v, err := strconv.ParseFloat(s, 64)
	return v * mult, err
}

func task(r abi.RolloutRequest) (Task, error) {
	var t Task
	if err := json.Unmarshal(r.Task.Data, &t); err != nil {
		return t, err
	}
	if t.Broken != "" {
		return t, sdk.Errorf("setup", "task %s cannot run: %s", t.Name, t.Broken)
	}
	return t, nil
}

func (*env) Sandbox(r abi.RolloutRequest) (abi.SandboxSpec, error) {
	t, err := task(r)
	if err != nil {
		return abi.SandboxSpec{}, err
	}
	c, err := parseConfig(r.Config)
	if err != nil {
		return abi.SandboxSpec{}, err
	}
	spec := abi.SandboxSpec{Image: t.DockerImage, CPUs: t.CPUs, MemoryMB: t.MemoryMB, ForceBuild: c.ForceBuild && t.EnvironmentTar != nil,
		// What the verifier runs and writes is out of the agent's reach.
		Private: []string{testsDir, verifierDir}}
	if spec.Image == "" || spec.ForceBuild {
		if t.EnvironmentTar == nil {
			return spec, sdk.Errorf("setup", "task %s has no environment to build", t.Name)
		}
		spec.BuildContext = t.EnvironmentTar
	}
	if c.CPUs > 0 {
		spec.CPUs = c.CPUs
	}
	if c.MemoryMB > 0 {
		spec.MemoryMB = c.MemoryMB
	}
	if t.AllowInternet {
		spec.Network = "host" // honoured only when the run's config allows it
	}
	return spec, nil
}

// The folders Harbor's verifier uses: the tests it uploads and runs, and
// where test.sh writes the reward and logs.
const (
	testsDir    = "/tests"
	verifierDir = "/logs/verifier"
)

func (*env) Setup(r abi.RolloutRequest) error {
	res, err := sdk.Exec(abi.ExecRequest{Cmd: "mkdir -p /logs/agent /logs/verifier", TimeoutMs: 60000})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return sdk.Errorf("setup", "create /logs: %s", res.Stderr)
	}
	return nil
}

func (*env) Prompt(r abi.RolloutRequest) (abi.PromptResponse, error) {
	t, err := task(r)
	return abi.PromptResponse{User: t.Instruction}, err
}

func (*env) Oracle(r abi.RolloutRequest) (abi.OracleResponse, error) {
	t, err := task(r)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	if t.SolutionTar == nil {
		return abi.OracleResponse{}, fmt.Errorf("task %s has no solution/", t.Name)
	}
	if err := sdk.Upload("/solution", t.SolutionTar); err != nil {
		return abi.OracleResponse{}, err
	}
	ms := int64(t.AgentTimeoutSec * 1000)
	res, err := sdk.Exec(abi.ExecRequest{Cmd: "bash /solution/solve.sh", TimeoutMs: ms,
		Env: map[string]string{"DEBIAN_FRONTEND": "noninteractive"}, MaxOutput: 64 << 10})
	if err != nil {
		return abi.OracleResponse{}, err
	}
	out := tail(res.Stdout+res.Stderr, 4000)
	if res.TimedOut {
		return abi.OracleResponse{Output: out}, fmt.Errorf("solve.sh timed out")
	}
	return abi.OracleResponse{Output: fmt.Sprintf("solve.sh exit %d\n%s", res.ExitCode, out)}, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func (*env) Verify(r abi.VerifyRequest) (abi.VerifyResponse, error) {
	t, err := task(r.RolloutRequest)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	// The host emptied the private folders when the agent's turn ended,
	// and nothing the agent runs can reach them; empty them here too for a
	// backend that keeps them as plain folders, and upload the tests only
	// now.
	res, err := sdk.Exec(abi.ExecRequest{Cmd: "mkdir -p /logs/verifier /tests && find /logs/verifier /tests -mindepth 1 -delete", TimeoutMs: 60000, Env: map[string]string{}})
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	if res.ExitCode != 0 {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "prepare /logs/verifier: %s", res.Stderr)
	}
	if err := sdk.Upload("/tests", t.TestsTar); err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "upload tests: %v", err)
	}
	ms := int64(t.VerifierTimeoutSec * 1000)
	res, err = sdk.Exec(abi.ExecRequest{Cmd: `bash -c "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1"`, TimeoutMs: ms})
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	out, _ := sdk.ReadFile("/logs/verifier/test-stdout.txt")
	outTail := tail(string(out), 4000)
	if res.TimedOut {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "test.sh ran past the verifier timeout of %.0fs; output tail:\n%s", t.VerifierTimeoutSec, outTail)
	}
	v := abi.VerifyResponse{Output: outTail}
	reward, scores, err := readReward()
	if err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "%v (test.sh exit %d); output tail:\n%s", err, res.ExitCode, outTail)
	}
	v.Reward, v.Scores = reward, scores
	v.Passed = reward >= 1
	if b, err := sdk.ReadFile("/logs/verifier/ctrf.json"); err == nil {
		v.Tests = parseCTRF(b)
	}
	return v, nil
}

// readReward reads reward.json (which wins) or reward.txt.
func readReward() (float64, map[string]float64, error) {
	if b, err := sdk.ReadFile("/logs/verifier/reward.json"); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		var m map[string]float64
		if err := json.Unmarshal(b, &m); err != nil {
			var f float64
			if json.Unmarshal(b, &f) == nil {
				return f, nil, nil
			}
			return 0, nil, fmt.Errorf("reward.json is not an object of numbers: %v", err)
		}
		if r, ok := m["reward"]; ok {
			return r, m, nil
		}
		if len(m) == 0 {
			return 0, nil, errors.New("reward.json is empty")
		}
		sum := 0.0
		for _, v := range m {
			sum += v
		}
		return sum / float64(len(m)), m, nil
	}
	b, err := sdk.ReadFile("/logs/verifier/reward.txt")
	if err != nil {
		if errors.Is(err, sdk.ErrNotFound) {
			return 0, nil, errors.New("no reward: test.sh wrote neither /logs/verifier/reward.txt nor reward.json")
		}
		return 0, nil, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil, errors.New("reward.txt is empty")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("reward.txt holds %q, not a number", tail(s, 80))
	}
	return f, nil, nil
}

func parseCTRF(b []byte) []abi.TestResult {
	var doc struct {
		Results struct {
			Tests []struct {
				Name    string `json:"name"`
				Status  string `json:"status"`
				Message string `json:"message"`
				Trace   string `json:"trace"`
			} `json:"tests"`
		} `json:"results"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return nil
	}
	var out []abi.TestResult
	for _, t := range doc.Results.Tests {
		msg := t.Message
		if msg == "" {
			msg = tail(t.Trace, 500)
		}
		out = append(out, abi.TestResult{Name: t.Name, Status: t.Status, Message: msg})
	}
	return out
}
