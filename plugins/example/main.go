// Command example is a small but complete proctor environment: each task
// asks the agent to write a given text into a file, and verification reads
// the file back. docs/plugins.md walks through it.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o example.wasm ./plugins/example
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.Register(&env{}) }

func main() {}

// config is the run's [env.config] table.
type config struct {
	Image   string `json:"image"`   // "none": no image, for the local backend
	Dataset string `json:"dataset"` // optional JSONL/JSON/parquet rows with id, text
	Tasks   []item `json:"tasks"`
}

type item struct {
	ID       string `json:"id"`
	Text     string `json:"text"`
	Category string `json:"category"`
}

type env struct{}

func (*env) Manifest() abi.Manifest {
	return abi.Manifest{
		Name:         "example",
		Version:      "1.0.0",
		Description:  "write a given text into answer.txt in the working directory",
		Capabilities: []string{abi.OpExec, abi.OpReadFile, abi.OpWriteFile, abi.OpDatasetRead},
		ConfigSchema: json.RawMessage(`{"type":"object","properties":{"image":{"type":"string"},"dataset":{"type":"string"},"tasks":{"type":"array"}}}`),
	}
}

func parse(raw json.RawMessage) (config, error) {
	var c config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, fmt.Errorf("env.config: %w", err)
	}
	if c.Image == "" {
		c.Image = "proctor-base:bookworm"
	}
	return c, nil
}

func (*env) LoadTasks(raw json.RawMessage) (abi.TasksResponse, error) {
	c, err := parse(raw)
	if err != nil {
		return abi.TasksResponse{}, err
	}
	items := c.Tasks
	if c.Dataset != "" {
		rows, err := sdk.ReadAllRows(c.Dataset, "")
		if err != nil {
			return abi.TasksResponse{}, err
		}
		for _, r := range rows {
			var it item
			if err := json.Unmarshal(r, &it); err != nil {
				return abi.TasksResponse{}, fmt.Errorf("dataset %s: %w", c.Dataset, err)
			}
			items = append(items, it)
		}
	}
	var resp abi.TasksResponse
	for _, it := range items {
		if it.ID == "" {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: "?", Reason: "task without an id"})
			continue
		}
		data, _ := json.Marshal(it)
		resp.Tasks = append(resp.Tasks, abi.Task{ID: it.ID, Category: it.Category, AgentTimeoutSec: 60, Data: data})
	}
	return resp, nil
}

func task(r abi.RolloutRequest) (item, error) {
	var it item
	err := json.Unmarshal(r.Task.Data, &it)
	return it, err
}

func (*env) Sandbox(r abi.RolloutRequest) (abi.SandboxSpec, error) {
	c, err := parse(r.Config)
	img := c.Image
	if img == "none" {
		img = "" // no image: the local backend's tasks
	}
	return abi.SandboxSpec{Image: img, Workdir: "/work"}, err
}

func (*env) Setup(r abi.RolloutRequest) error {
	// Paths relative to the workdir: on the local backend, which is not
	// isolated, an absolute path would be the host's.
	return sdk.WriteFile("README", []byte("Write your answer to answer.txt\n"), 0o644)
}

func (*env) Prompt(r abi.RolloutRequest) (abi.PromptResponse, error) {
	it, err := task(r)
	return abi.PromptResponse{User: fmt.Sprintf("Write exactly the text %q (no newline) into the file answer.txt in the current directory.", it.Text)}, err
}

func (*env) Oracle(r abi.RolloutRequest) (abi.OracleResponse, error) {
	it, err := task(r)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	res, err := sdk.Exec(abi.ExecRequest{Cmd: "printf '%s' \"$ANSWER\" > answer.txt", Env: map[string]string{"ANSWER": it.Text}})
	if err != nil {
		return abi.OracleResponse{}, err
	}
	if res.ExitCode != 0 {
		return abi.OracleResponse{}, fmt.Errorf("oracle: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return abi.OracleResponse{Output: "wrote the answer"}, nil
}

func (*env) Verify(r abi.VerifyRequest) (abi.VerifyResponse, error) {
	it, err := task(r.RolloutRequest)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	got, err := sdk.ReadFile("answer.txt")
	if errors.Is(err, sdk.ErrNotFound) {
		return abi.VerifyResponse{Output: "no answer.txt", Tests: []abi.TestResult{{Name: "answer", Status: "failed", Message: "file missing"}}}, nil
	}
	if err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "read answer: %v", err)
	}
	if string(got) == it.Text {
		return abi.VerifyResponse{Reward: 1, Passed: true, Tests: []abi.TestResult{{Name: "answer", Status: "passed"}}}, nil
	}
	// Partial credit: the right text with stray whitespace.
	if strings.TrimSpace(string(got)) == it.Text {
		return abi.VerifyResponse{Reward: 0.5, Output: "answer has extra whitespace", Tests: []abi.TestResult{{Name: "answer", Status: "failed", Message: "extra whitespace"}}}, nil
	}
	return abi.VerifyResponse{Output: fmt.Sprintf("answer %.80q", got), Tests: []abi.TestResult{{Name: "answer", Status: "failed"}}}, nil
}
