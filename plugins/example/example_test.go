//go:build !wasip1

package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

// The same plugin runs under the real host in host/plugin/wasm's tests; here its
// logic runs natively against the emulated host.
func TestExampleNatively(t *testing.T) {
	h := sdktest.New(t)
	h.Workdir = "/work"
	h.Datasets["rows.jsonl"] = []json.RawMessage{json.RawMessage(`{"id":"d1","text":"from a dataset"}`)}
	cfg := json.RawMessage(`{"dataset":"rows.jsonl","tasks":[{"id":"c1","text":"hello"}]}`)
	var tasks abi.TasksResponse
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{Config: cfg}, &tasks); err != nil || len(tasks.Tasks) != 2 {
		t.Fatalf("%v %+v", err, tasks)
	}
	rr := abi.RolloutRequest{Task: tasks.Tasks[0], Config: cfg}
	var v abi.VerifyResponse
	if err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v); err != nil || v.Passed {
		t.Fatalf("untouched: %v %+v", err, v)
	}
	os.MkdirAll(h.Path("/work"), 0o755)
	os.WriteFile(h.Path("answer.txt"), []byte("hello\n"), 0o644)
	if err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v); err != nil || v.Reward != 0.5 {
		t.Fatalf("extra whitespace: %v %+v", err, v)
	}
	if err := sdktest.Call(abi.HookOracle, rr, nil); err != nil {
		t.Fatal(err)
	}
	if err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v); err != nil || !v.Passed {
		t.Fatalf("after the oracle: %v %+v", err, v)
	}
}
