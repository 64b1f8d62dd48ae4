package wasm

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// callOp runs the future plugin's "call:OP" hook.
func callOp(t *testing.T, inst *Instance, op string) (uint32, string) {
	t.Helper()
	var got struct {
		Status uint32
		Resp   string
	}
	if err := inst.Call(context.Background(), "call:"+op, abi.Empty{}, &got); err != nil {
		t.Fatal(err)
	}
	return got.Status, got.Resp
}

// A plugin built for a newer minor version loads: a manifest field, a hook
// and an optional capability this host does not know are no reason to
// refuse it. The unknown optional capability is denied when called, as an
// optional capability the run does not grant is.
func TestNewerMinorLoads(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Config{})
	p := load(t, r, "./host/plugin/wasm/testdata/future")
	if m := p.Manifest(); m.ABIMinor != 9 || m.SDK != "go 9.0.0" {
		t.Fatalf("manifest %+v", m)
	}
	if err := p.Grant([]string{abi.OpHostInfo}); err != nil {
		t.Fatal(err)
	}
	inst, err := p.Instantiate(ctx, InstanceConfig{Ops: map[string]Op{
		abi.OpHostInfo: func(context.Context, []byte) ([]byte, error) { return json.Marshal(abi.HostInfo{ABI: 1}) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	for op, want := range map[string]struct {
		status uint32
		msg    string
	}{
		"sandbox.snapshot":   {abi.StatusDenied, "sandbox.snapshot is an optional capability this proctor (ABI v1.2) does not have"},
		abi.OpModelComplete:  {abi.StatusDenied, "model.complete was not declared by the plugin or not granted by the run"},
		"sandbox.frobnicate": {abi.StatusUnknown, `unknown operation \"sandbox.frobnicate\"`},
		abi.OpHostInfo:       {abi.StatusOK, `"abi":1`},
	} {
		if status, resp := callOp(t, inst, op); status != want.status || !strings.Contains(resp, want.msg) {
			t.Errorf("%s: status %d %s, want %d %s", op, status, resp, want.status, want.msg)
		}
	}
	var tasks abi.TasksResponse
	if err := inst.Call(ctx, abi.HookTasks, abi.TasksRequest{}, &tasks); err != nil || len(tasks.Tasks) != 1 || tasks.Tasks[0].ID != "t1" {
		t.Errorf("tasks with fields this host does not know: %v %+v", err, tasks)
	}
	// An error class this host does not give plugins comes back as it is;
	// host/env records it as class plugin.
	err = inst.Call(ctx, "fail:quota", abi.Empty{}, nil)
	var pe *PluginError
	if !errors.As(err, &pe) || !errors.Is(err, ErrHookFailed) || pe.Class != "quota" {
		t.Errorf("fail: %v", err)
	}
}

// A required capability this host does not have refuses the plugin at
// load, saying why and what to do.
func TestNewerRequiredCapabilityRefused(t *testing.T) {
	r := newRuntime(t, Config{})
	_, err := r.LoadFile(context.Background(), wasmtest.BuildWith(t, "./host/plugin/wasm/testdata/future", "-ldflags=-X=main.required=sandbox.snapshot"))
	want := `declares capability "sandbox.snapshot", which this proctor (ABI v1.2) does not have: the plugin was built for v1.9, so upgrade proctor, or make it an optional capability of the plugin`
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// A Go plugin built without -buildmode=c-shared is a WASI command whose
// exports trap with runtime.notInitialized; the host names the flag.
func TestCommandModuleNamesTheFlag(t *testing.T) {
	r := newRuntime(t, Config{})
	_, err := r.LoadFile(context.Background(), wasmtest.BuildWith(t, "./host/plugin/wasm/testdata/command", "-buildmode=exe"))
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "built without -buildmode=c-shared: rebuild it with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared") {
		t.Errorf("got %v", err)
	}
}

// gunzip reads a plugin checked into testdata/compat.
func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Plugins built with the SDK before minor versions (ABI v1.0; see
// testdata/compat/README) keep loading and answering every hook.
func TestPluginsOfTheFirstSDKStillRun(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Config{})
	ex, err := r.Load(ctx, "example-sdk0", gunzip(t, "testdata/compat/example-sdk0.wasm.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if m := ex.Manifest(); m.Name != "example" || m.ABI != 1 || m.ABIMinor != 0 || m.SDK != "" {
		t.Fatalf("manifest %+v", m)
	}
	if err := ex.Grant(ex.Manifest().Capabilities); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	inst, err := ex.Instantiate(ctx, InstanceConfig{Ops: fakeOps(files)})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	var tasks abi.TasksResponse
	cfg := json.RawMessage(`{"tasks":[{"id":"hi","text":"hello"}]}`)
	if err := inst.Call(ctx, abi.HookTasks, abi.TasksRequest{Config: cfg}, &tasks); err != nil || len(tasks.Tasks) != 1 {
		t.Fatalf("tasks.load: %v %+v", err, tasks)
	}
	rr := abi.RolloutRequest{Task: tasks.Tasks[0], Config: cfg, RolloutID: "hi#0"}
	var spec abi.SandboxSpec
	var prompt abi.PromptResponse
	var v abi.VerifyResponse
	for _, c := range []struct {
		hook    string
		in, out any
	}{
		{abi.HookSandbox, rr, &spec}, {abi.HookSetup, rr, nil}, {abi.HookPrompt, rr, &prompt},
		{abi.HookOracle, rr, nil}, {abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v}, {abi.HookTeardown, rr, nil},
	} {
		if err := inst.Call(ctx, c.hook, c.in, c.out); err != nil {
			t.Fatalf("%s: %v", c.hook, err)
		}
	}
	if spec.Workdir != "/work" || !strings.Contains(prompt.User, "hello") || !v.Passed || !bytes.Equal(files["answer.txt"], []byte("hello")) {
		t.Errorf("spec %+v prompt %+v verdict %+v files %q", spec, prompt, v, files)
	}
	// It never had config.check, so the host does not ask it.
	if err := inst.Call(ctx, abi.HookConfig, abi.ConfigRequest{}, nil); !errors.Is(err, ErrUnknown) {
		t.Errorf("config.check: %v", err)
	}

	ts, err := r.Load(ctx, "toolstats-sdk0", gunzip(t, "testdata/compat/toolstats-sdk0.wasm.gz"))
	if err != nil {
		t.Fatal(err)
	}
	ts.Grant(nil)
	tinst, err := ts.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer tinst.Close(ctx)
	var score abi.RewardResponse
	req := abi.RewardRequest{Task: abi.Task{ID: "hi"}, Config: json.RawMessage(`{}`),
		Trajectory: json.RawMessage(`{"trajectory":{"turns":[{"tools":[{"failed":true},{"failed":false}]}]}}`), Verify: abi.VerifyResponse{Passed: true, Reward: 1}}
	if err := tinst.Call(ctx, abi.HookReward, req, &score); err != nil || score.Reward != 0.5 || score.Scores["tool_calls"] != 2 {
		t.Errorf("reward.score: %v %+v", err, score)
	}
}
