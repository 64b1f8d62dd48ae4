// Command hostile is an environment plugin that misbehaves as its config
// says, for the CLI tests of what the host must not trust a plugin with.
// Its tasks need no image (the local backend runs them) and nothing of
// the agent; its verifier answers what the config says:
//
//   - tasks: the task ids (default ["t"]); category: every task's category.
//   - reward, scores: the verdict's reward and named scores.
//   - fail: rollout.verify fails with this text.
//   - output: the verifier's output.
//   - steal: tasks.load asks dataset.read for host paths the config does
//     not name (/etc/apt, ../fakehome), as a plugin pulled from a registry
//     might, and lists each as a skipped task saying what came back.
//   - dataset: tasks.load reads this dataset and says how many rows.
//   - task_count: tasks.load lists this many tasks (t0, t1, ...).
//   - task_id_bytes: one more task, with an id this long.
//   - prompt_mb: prompt.format answers a user prompt this many MiB long.
//   - score_count: the verdict holds this many named scores.
//   - test_count: the verdict lists this many tests.
//   - error_mb: rollout.verify fails with an error this many MiB long.
//   - log_lines: rollout.setup logs this many 8 KiB lines.
//   - exec, exec_max: rollout.verify runs exec asking for exec_max bytes
//     of each stream, and its output says what came back.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.Register(env{}) }

func main() {}

type config struct {
	Tasks    []string           `json:"tasks"`
	Category string             `json:"category"`
	Reward   float64            `json:"reward"`
	Scores   map[string]float64 `json:"scores"`
	Fail     string             `json:"fail"`
	Output   string             `json:"output"`
	Steal    bool               `json:"steal"`
	Dataset  string             `json:"dataset"`

	TaskCount   int    `json:"task_count"`
	TaskIDBytes int    `json:"task_id_bytes"`
	PromptMB    int    `json:"prompt_mb"`
	ScoreCount  int    `json:"score_count"`
	TestCount   int    `json:"test_count"`
	ErrorMB     int    `json:"error_mb"`
	LogLines    int    `json:"log_lines"`
	Exec        string `json:"exec"`
	ExecMax     int    `json:"exec_max"`
}

// stolen are host paths no config names.
var stolen = []string{"/etc/apt", "../fakehome"}

type env struct{}

func (env) Manifest() abi.Manifest {
	return abi.Manifest{Name: "hostile", Version: "0.0.1", Description: "misbehaves as its config says",
		Capabilities: []string{abi.OpDatasetRead, abi.OpExec}}
}

func parse(raw json.RawMessage) (config, error) {
	var c config
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, err
	}
	for i := range c.TaskCount {
		c.Tasks = append(c.Tasks, fmt.Sprint("t", i))
	}
	if len(c.Tasks) == 0 {
		c.Tasks = []string{"t"}
	}
	if c.TaskIDBytes > 0 {
		c.Tasks = append(c.Tasks, strings.Repeat("i", c.TaskIDBytes))
	}
	return c, nil
}

func (env) LoadTasks(raw json.RawMessage) (abi.TasksResponse, error) {
	c, err := parse(raw)
	if err != nil {
		return abi.TasksResponse{}, err
	}
	var resp abi.TasksResponse
	for _, id := range c.Tasks {
		resp.Tasks = append(resp.Tasks, abi.Task{ID: id, Category: c.Category, AgentTimeoutSec: 60})
	}
	var reads []string
	if c.Steal {
		reads = stolen
	}
	if c.Dataset != "" {
		reads = append(reads, c.Dataset)
	}
	for _, src := range reads {
		rows, err := sdk.ReadAllRows(src, "")
		reason := fmt.Sprintf("read %d rows", len(rows))
		if err != nil {
			reason = "refused: " + err.Error()
		}
		resp.Skipped = append(resp.Skipped, abi.Skipped{ID: "dataset " + src, Reason: reason})
	}
	return resp, nil
}

func (env) Sandbox(abi.RolloutRequest) (abi.SandboxSpec, error) { return abi.SandboxSpec{}, nil }

func (env) Setup(r abi.RolloutRequest) error {
	c, err := parse(r.Config)
	if err != nil {
		return err
	}
	line := strings.Repeat("l", 8<<10)
	for range c.LogLines {
		sdk.Log(sdk.LevelWarn, line)
	}
	return nil
}

func (env) Prompt(r abi.RolloutRequest) (abi.PromptResponse, error) {
	c, err := parse(r.Config)
	if err != nil || c.PromptMB == 0 {
		return abi.PromptResponse{User: "nothing to do"}, err
	}
	return abi.PromptResponse{User: strings.Repeat("p", c.PromptMB<<20)}, nil
}

func (env) Verify(r abi.VerifyRequest) (abi.VerifyResponse, error) {
	c, err := parse(r.Config)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	if c.Fail != "" {
		return abi.VerifyResponse{}, errors.New(c.Fail)
	}
	if c.ErrorMB > 0 {
		return abi.VerifyResponse{}, errors.New(strings.Repeat("e", c.ErrorMB<<20))
	}
	v := abi.VerifyResponse{Reward: c.Reward, Passed: c.Reward > 0, Scores: c.Scores, Output: c.Output}
	if c.ScoreCount > 0 {
		v.Scores = map[string]float64{}
		for i := range c.ScoreCount {
			v.Scores[fmt.Sprint("score-", i)] = 1
		}
	}
	for i := range c.TestCount {
		v.Tests = append(v.Tests, abi.TestResult{Name: fmt.Sprint("test-", i), Status: "passed"})
	}
	if c.Exec != "" {
		res, err := sdk.Exec(abi.ExecRequest{Cmd: c.Exec, MaxOutput: c.ExecMax})
		if err != nil {
			return v, err
		}
		v.Output = fmt.Sprintf("exec: stdout %d bytes, stderr %d bytes, truncated %v", len(res.Stdout), len(res.Stderr), res.Truncated)
	}
	return v, nil
}
