//go:build !wasip1

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

// TestToolCredit pins hermes' tool_call_reward, min(min(0.02·attempted,
// 0.10) + min(0.03·well-formed, 0.20), 0.30), to the float Python computes
// (hermes-agent environments/swe_smith_oracle_env.py compute_reward).
func TestToolCredit(t *testing.T) {
	for _, tc := range []struct {
		attempted, valid int
		want             float64
	}{
		{1, 0, 0.02}, {1, 1, 0.05}, {2, 2, 0.1}, {3, 2, 0.12}, {4, 3, 0.16999999999999998}, {4, 4, 0.2},
		{5, 5, 0.25}, {6, 6, 0.28}, {7, 6, 0.28}, {7, 7, 0.3}, {40, 0, 0.1}, {40, 40, 0.3},
	} {
		if got := ToolCredit(tc.attempted, tc.valid); got != tc.want {
			t.Errorf("ToolCredit(%d, %d) = %v, want %v", tc.attempted, tc.valid, got, tc.want)
		}
	}
}

// TestShaped pins compute_reward's ladder: nothing without a tool call
// (even when the tests pass), the tool credit while the tests do not run,
// 0.4 once they do, 1 when they pass.
func TestShaped(t *testing.T) {
	for _, tc := range []struct {
		attempted, valid int
		ran, passed      bool
		want             float64
	}{
		{0, 0, true, true, 0}, {0, 0, false, false, 0}, {3, 3, false, false, 0.15}, {3, 3, true, false, 0.4},
		{3, 1, true, true, 1}, {30, 30, false, false, 0.3}, {30, 30, true, false, 0.4},
	} {
		if got := Shaped(tc.attempted, tc.valid, tc.ran, tc.passed); got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
	}
}

// TestWellFormed pins schema_valid: each want is what hermes-agent's
// environments/agent_loop.py _normalize_tool_args gives (run with Python's
// json), Python's NaN and Infinity, whitespace and last-key-wins included.
func TestWellFormed(t *testing.T) {
	for _, tc := range [][3]any{
		{"terminal", "{\"command\": \"ls\"}", true},
		{"terminal", "{\"command\": \"  \\u3000 \"}", false},
		{"terminal", "{\"command\": \"\\u001c\"}", false},
		{"terminal", "{\"command\": \"\"}", false},
		{"terminal", "{\"input\": \"ls\"}", false},
		{"terminal", "{\"command\": 5}", false},
		{"terminal", "{\"command\": null}", false},
		{"terminal", "\"{\\\"command\\\": \\\"ls\\\"}\"", false},
		{"terminal", "ls", false},
		{"terminal", "{\"command\": \"ls\", \"timeout\": NaN}", true},
		{"terminal", "{\"command\": \"ls\", \"timeout\": -Infinity}", true},
		{"terminal", "{\"command\": \"ls\", \"x\": \"NaN\"}", true},
		{"read_file", "{}", true},
		{"read_file", "[]", false},
		{"read_file", "null", false},
		{"read_file", "{\"path\": Infinity}", true},
		{"read_file", "{\"path\": -NaN}", false},
		{"read_file", "{\"path\": NaNx}", false},
		{"read_file", "{\"path\": \"a\"} {}", false},
		{"terminal", "{\"command\": \"a\", \"command\": \" \"}", false},
		{"terminal", "{\"command\": \" \", \"command\": \"a\"}", true},
		{"write_file", "{\"a\": \"\\\\\"}", true},
		{"write_file", "{\"a\": \"\\\" NaN\"}", true},
		{"patch", "", false},
		{"terminal", "{\"command\": \"ls\"}  ", true},
		{"terminal", "\ufeff{\"command\": \"ls\"}", false},
		{"read_file", "{\"p\": 1e999}", true},
		{"read_file", "{\"p\": 01}", false},
	} {
		if got := WellFormed(tc[0].(string), tc[1].(string)); got != tc[2].(bool) {
			t.Errorf("%s %q: %v, want %v", tc[0], tc[1], got, tc[2])
		}
	}
}

// TestScore scores transcripts: calls to tools the rollout did not have
// count for nothing, the verdict's tests_ran and passed climb the ladder,
// and a verdict from another environment is an error that says where to
// stack the reward.
func TestScore(t *testing.T) {
	sdktest.New(t)
	tr := json.RawMessage(`{"trajectory":{"tools":["terminal","read_file"],"messages":[
		{"role":"user","content":"fix it"},
		{"role":"assistant","tool_calls":[{"function":{"name":"terminal","arguments":"{\"command\":\"ls\"}"}},{"function":{"name":"read_file","arguments":"{\"path\""}}]},
		{"role":"tool","content":"..."},
		{"role":"assistant","tool_calls":[{"function":{"name":"browser","arguments":"{}"}},{"function":{"name":"terminal","arguments":"{\"command\":\" \"}"}}]},
		{"role":"assistant","content":"done"}]}}`)
	score := func(v abi.VerifyResponse, tr json.RawMessage) (abi.RewardResponse, error) {
		var resp abi.RewardResponse
		err := sdktest.Call(abi.HookReward, abi.RewardRequest{Trajectory: tr, Verify: v}, &resp)
		return resp, err
	}
	for _, tc := range []struct {
		v    abi.VerifyResponse
		want float64
	}{
		{abi.VerifyResponse{Scores: map[string]float64{"tests_ran": 0}}, 0.09},
		{abi.VerifyResponse{Scores: map[string]float64{"tests_ran": 1}}, 0.4},
		{abi.VerifyResponse{Passed: true, Reward: 1, Scores: map[string]float64{"tests_ran": 1}}, 1},
	} {
		resp, err := score(tc.v, tr)
		if err != nil || resp.Reward != tc.want || resp.Scores["tool_calls_attempted"] != 3 || resp.Scores["tool_calls_schema_valid"] != 1 {
			t.Errorf("%+v: %v %+v", tc.v, err, resp)
		}
	}
	// A transcript without a tool list (an older one) counts every call.
	resp, err := score(abi.VerifyResponse{Scores: map[string]float64{"tests_ran": 0}}, json.RawMessage(`{"trajectory":{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"x","arguments":"no"}}]}]}}`))
	if err != nil || resp.Reward != 0.05 {
		t.Errorf("no tool list: %v %+v", err, resp)
	}
	// The oracle's transcript has no tool call: 0, as hermes gives it.
	if resp, err := score(abi.VerifyResponse{Passed: true, Scores: map[string]float64{"tests_ran": 1}}, json.RawMessage(`{"trajectory":{"agent":"oracle"}}`)); err != nil || resp.Reward != 0 {
		t.Errorf("no tool call: %v %+v", err, resp)
	}
	// A verdict without tests_ran (another environment's): one that passed
	// ran its tests; for one that failed, nothing says.
	if resp, err := score(abi.VerifyResponse{Passed: true, Reward: 1}, tr); err != nil || resp.Reward != 1 {
		t.Errorf("a passed verdict without tests_ran: %v %+v", err, resp)
	}
	if _, err := score(abi.VerifyResponse{}, tr); err == nil || !strings.Contains(err.Error(), "swesmith environment") {
		t.Errorf("a failed verdict without tests_ran: %v", err)
	}
	var resp2 abi.RewardResponse
	if err := sdktest.Call(abi.HookReward, abi.RewardRequest{Config: json.RawMessage(`{"weight":2}`), Verify: abi.VerifyResponse{Scores: map[string]float64{"tests_ran": 1}}}, &resp2); err == nil || !strings.Contains(err.Error(), "weight") {
		t.Errorf("an unknown config key: %v", err)
	}
}

func FuzzWellFormed(f *testing.F) {
	f.Add("terminal", `{"command": "ls", "t": NaN}`)
	f.Add("read_file", `{"a": "\" Infinity"}`)
	f.Fuzz(func(t *testing.T, tool, args string) {
		if WellFormed(tool, args) {
			if _, ok := pyJSONObject(args); !ok {
				t.Fatal("well formed but not an object")
			}
		}
	})
}
