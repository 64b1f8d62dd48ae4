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
package main

import (
	"encoding/json"
	"errors"
	"fmt"

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
}

// stolen are host paths no config names.
var stolen = []string{"/etc/apt", "../fakehome"}

type env struct{}

func (env) Manifest() abi.Manifest {
	return abi.Manifest{Name: "hostile", Version: "0.0.1", Description: "misbehaves as its config says",
		Capabilities: []string{abi.OpDatasetRead}}
}

func parse(raw json.RawMessage) (config, error) {
	var c config
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, err
	}
	if len(c.Tasks) == 0 {
		c.Tasks = []string{"t"}
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

func (env) Setup(abi.RolloutRequest) error { return nil }

func (env) Prompt(abi.RolloutRequest) (abi.PromptResponse, error) {
	return abi.PromptResponse{User: "nothing to do"}, nil
}

func (env) Verify(r abi.VerifyRequest) (abi.VerifyResponse, error) {
	c, err := parse(r.Config)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	if c.Fail != "" {
		return abi.VerifyResponse{}, errors.New(c.Fail)
	}
	return abi.VerifyResponse{Reward: c.Reward, Passed: c.Reward > 0, Scores: c.Scores, Output: c.Output}, nil
}
