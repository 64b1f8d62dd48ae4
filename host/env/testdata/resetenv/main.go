// Command resetenv is an environment for the runner's tests of
// sandbox.reset: every task's verifier resets the sandbox and reports
// whether the fresh one is empty of what the agent wrote.
package main

import (
	"encoding/json"
	"errors"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.Register(env{}) }

func main() {}

type env struct{}

func (env) Manifest() abi.Manifest {
	return abi.Manifest{Name: "resetenv", Version: "0.0.1", Description: "grades in a reset sandbox",
		Capabilities: []string{abi.OpReadFile, abi.OpWriteFile, abi.OpReset}}
}

func (env) LoadTasks(json.RawMessage) (abi.TasksResponse, error) {
	return abi.TasksResponse{Tasks: []abi.Task{{ID: "t"}}}, nil
}

func (env) Sandbox(abi.RolloutRequest) (abi.SandboxSpec, error) {
	return abi.SandboxSpec{Image: "img"}, nil
}

func (env) Setup(abi.RolloutRequest) error {
	return sdk.WriteFile("/agent-was-here", []byte("x"), 0o644)
}

func (env) Prompt(abi.RolloutRequest) (abi.PromptResponse, error) {
	return abi.PromptResponse{User: "nothing to do"}, nil
}

func (env) Verify(abi.VerifyRequest) (abi.VerifyResponse, error) {
	if err := sdk.ResetSandbox(); err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "reset: %v", err)
	}
	_, err := sdk.ReadFile("/agent-was-here")
	fresh := errors.Is(err, sdk.ErrNotFound)
	v := abi.VerifyResponse{Passed: fresh}
	if fresh {
		v.Reward = 1
	}
	return v, nil
}
