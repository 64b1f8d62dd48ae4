//go:build !wasip1

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

func TestScore(t *testing.T) {
	sdktest.New(t)
	tr := json.RawMessage(`{"trajectory":{"turns":[{"tools":[{"name":"terminal"},{"name":"patch","failed":true}]},{"errors":["unknown tool"]},{}]}}`)
	var resp abi.RewardResponse
	if err := sdktest.Call(abi.HookReward, abi.RewardRequest{Trajectory: tr}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Reward != 1.0/3 || resp.Scores["tool_calls"] != 2 || resp.Scores["failed_calls"] != 1 || resp.Scores["malformed_calls"] != 1 || resp.Scores["turns"] != 3 {
		t.Errorf("%+v", resp)
	}
	if err := sdktest.Call(abi.HookReward, abi.RewardRequest{Trajectory: json.RawMessage(`{"trajectory":{"agent":"oracle"}}`)}, &resp); err != nil || resp.Reward != 1 {
		t.Errorf("no tool calls: %v %+v", err, resp)
	}
	var m abi.Manifest
	sdktest.Call(abi.HookDescribe, abi.Empty{}, &m)
	if strings.Join(m.Hooks, ",") != "describe,reward.score,config.check" || len(m.Capabilities) != 0 {
		t.Errorf("a reward-only plugin describes itself as %+v", m)
	}
	if err := sdktest.Call(abi.HookConfig, abi.ConfigRequest{Config: json.RawMessage(`{"weight":1}`)}, nil); err == nil || !strings.Contains(err.Error(), `unknown key "weight"`) {
		t.Errorf("toolstats takes no config, got %v", err)
	}
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{}, &struct{}{}); err == nil {
		t.Error("a reward plugin answered tasks.load")
	}
}
