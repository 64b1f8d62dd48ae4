//go:build !wasip1

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

func TestJudge(t *testing.T) {
	h := sdktest.New(t)
	var asked string
	answer := "Thorough.\nSCORE: 7"
	h.Model = func(r abi.ModelRequest) (abi.ModelResponse, error) {
		asked = r.Messages[len(r.Messages)-1].Content
		return abi.ModelResponse{Content: answer}, nil
	}
	req := abi.RewardRequest{Task: abi.Task{ID: "t1"}, Config: json.RawMessage(`{"rubric":"Was it tidy?"}`),
		Trajectory: json.RawMessage(`{"trajectory":{"messages":[{"role":"user","content":"do it"},{"role":"assistant","content":"done it"}]}}`),
		Verify:     abi.VerifyResponse{Passed: true, Reward: 1}}
	var resp abi.RewardResponse
	if err := sdktest.Call(abi.HookReward, req, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Reward != 0.7 || resp.Scores["score"] != 7 || !strings.Contains(asked, "Was it tidy?") || !strings.Contains(asked, "[assistant] done it") {
		t.Errorf("reward %+v, asked %q", resp, asked)
	}
	answer = "SCORE: 42"
	if sdktest.Call(abi.HookReward, req, &resp); resp.Reward != 1 {
		t.Errorf("an out-of-range score is clamped: %+v", resp)
	}
	answer = "I would rather not say."
	if err := sdktest.Call(abi.HookReward, req, &resp); err == nil || !strings.Contains(err.Error(), "SCORE") {
		t.Errorf("an answer without a score: %v", err)
	}
}
