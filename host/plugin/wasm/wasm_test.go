package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestMain removes the plugins and the compile caches the tests shared.
func TestMain(m *testing.M) { os.Exit(wasmtest.Run(m)) }

// sharedCache lets the tests of this package compile each plugin once.
var sharedCache = sync.OnceValue(func() string {
	d, err := wasmtest.TempDir("cache-")
	if err != nil {
		panic(err)
	}
	return d
})

func newRuntime(t testing.TB, cfg Config) *Runtime {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = sharedCache()
	}
	r, err := NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func load(t testing.TB, r *Runtime, pkg string) *Plugin {
	t.Helper()
	p, err := r.LoadFile(context.Background(), wasmtest.Build(t, pkg))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeOps answers sandbox operations from memory.
func fakeOps(files map[string][]byte) map[string]Op {
	return map[string]Op{
		abi.OpExec: func(ctx context.Context, req []byte) ([]byte, error) {
			var r abi.ExecRequest
			json.Unmarshal(req, &r)
			if strings.Contains(r.Cmd, "answer.txt") {
				files["answer.txt"] = []byte(r.Env["ANSWER"])
			}
			return json.Marshal(abi.ExecResponse{Stdout: "ran " + r.Cmd})
		},
		abi.OpReadFile: func(ctx context.Context, req []byte) ([]byte, error) {
			var r abi.ReadFileRequest
			json.Unmarshal(req, &r)
			b, ok := files[r.Path]
			return json.Marshal(abi.ReadFileResponse{Data: b, Missing: !ok})
		},
		abi.OpWriteFile: func(ctx context.Context, req []byte) ([]byte, error) {
			var r abi.WriteFileRequest
			json.Unmarshal(req, &r)
			files[r.Path] = r.Data
			return []byte("{}"), nil
		},
	}
}

func TestExamplePluginUnderTheRealHost(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Config{})
	p := load(t, r, "./plugins/example")
	m := p.Manifest()
	if m.Name != "example" || m.ABI != 1 || len(p.SHA256()) != 64 {
		t.Fatalf("manifest %+v sha %s", m, p.SHA256())
	}
	for _, h := range []string{abi.HookTasks, abi.HookVerify, abi.HookOracle, abi.HookSandbox} {
		if !strings.Contains(strings.Join(m.Hooks, ","), h) {
			t.Errorf("hooks %v lack %s", m.Hooks, h)
		}
	}
	if err := p.Grant([]string{abi.OpExec, abi.OpReadFile, abi.OpWriteFile, abi.OpDatasetRead}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	inst, err := p.Instantiate(ctx, InstanceConfig{Ops: fakeOps(files), Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	var tasks abi.TasksResponse
	cfg := json.RawMessage(`{"tasks":[{"id":"hi","text":"hello"},{"text":"no id"}]}`)
	if err := inst.Call(ctx, abi.HookTasks, abi.TasksRequest{Config: cfg}, &tasks); err != nil {
		t.Fatal(err)
	}
	if len(tasks.Tasks) != 1 || len(tasks.Skipped) != 1 {
		t.Fatalf("tasks %+v", tasks)
	}
	rr := abi.RolloutRequest{Task: tasks.Tasks[0], Config: cfg}
	var v abi.VerifyResponse
	if err := inst.Call(ctx, abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v); err != nil {
		t.Fatal(err)
	}
	if v.Passed {
		t.Fatal("passed before the oracle ran")
	}
	if err := inst.Call(ctx, abi.HookOracle, rr, nil); err != nil {
		t.Fatal(err)
	}
	if err := inst.Call(ctx, abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v); err != nil {
		t.Fatal(err)
	}
	if !v.Passed || v.Reward != 1 {
		t.Fatalf("after the oracle: %+v", v)
	}
}

func TestCapabilityChecks(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Config{})
	p := load(t, r, "./plugins/example")
	err := p.Grant([]string{abi.OpExec})
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "sandbox.read_file") {
		t.Fatalf("want a denial naming the missing grant, got %v", err)
	}
	if _, err := p.Instantiate(ctx, InstanceConfig{}); err == nil {
		t.Fatal("instantiated a plugin whose capabilities were refused")
	}

	// A plugin calling an operation it did not declare gets status 3.
	evil := load(t, r, "./host/plugin/wasm/testdata/evil")
	if err := evil.Grant([]string{abi.OpExec, abi.OpReadFile}); err != nil {
		t.Fatal(err)
	}
	inst, err := evil.Instantiate(ctx, InstanceConfig{Ops: fakeOps(map[string][]byte{})})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status uint32
		Resp   string
	}
	if err := inst.Call(ctx, "read_file", abi.Empty{}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != abi.StatusDenied {
		t.Fatalf("undeclared op: status %d (%s), want %d", got.Status, got.Resp, abi.StatusDenied)
	}
	// A declared one works, and a response larger than the guest's buffer
	// comes through take_response without running the op twice.
	if err := inst.Call(ctx, "exec", abi.Empty{}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != 0 || !strings.Contains(got.Resp, "ran echo hi") {
		t.Fatalf("exec: %+v", got)
	}
}

func TestBadPlugins(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Config{})
	notWasm := t.TempDir() + "/x.wasm"
	os.WriteFile(notWasm, []byte("#!/bin/sh\necho hi\n"), 0o644)
	if _, err := r.LoadFile(ctx, notWasm); !errors.Is(err, ErrNotWasm) || !strings.Contains(err.Error(), "x.wasm") {
		t.Errorf("not wasm: %v", err)
	}
	if _, err := r.LoadFile(ctx, wasmtest.Build(t, "./host/plugin/wasm/testdata/abiv2")); !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "rebuild it against sdk v1") {
		t.Errorf("ABI v2: %v", err)
	}
	if _, err := r.LoadFile(ctx, wasmtest.Build(t, "./host/plugin/wasm/testdata/nohandle")); !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "proctor_handle") {
		t.Errorf("missing export: %v", err)
	}
}

func TestHostileHooks(t *testing.T) {
	ctx := context.Background()
	// The infinite loop gets a short deadline; the rest a long one, so that
	// a slow machine (or -race) cannot turn a trap into a timeout.
	short := newRuntime(t, Config{HookTimeout: 2 * time.Second, MemoryLimitMiB: 128, MaxOutput: 8 << 20})
	long := newRuntime(t, Config{HookTimeout: 2 * time.Minute, MemoryLimitMiB: 128, MaxOutput: 8 << 20})
	evilShort := load(t, short, "./host/plugin/wasm/testdata/evil")
	evilShort.Grant([]string{abi.OpExec})
	evilLong := load(t, long, "./host/plugin/wasm/testdata/evil")
	evilLong.Grant([]string{abi.OpExec})
	r := long
	cases := map[string]error{
		"trap":    ErrTrap,
		"panic":   ErrTrap,
		"loop":    ErrTimeout,
		"alloc":   ErrTrap,
		"badjson": ErrBadOutput,
		"huge":    ErrTooLarge,
		"nothing": ErrUnknown,
	}
	for hook, want := range cases {
		t.Run(hook, func(t *testing.T) {
			evil := evilLong
			if want == ErrTimeout {
				evil = evilShort
			}
			inst, err := evil.Instantiate(ctx, InstanceConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close(ctx)
			err = inst.Call(ctx, hook, abi.Empty{}, nil)
			var pe *PluginError
			if !errors.Is(err, want) || !errors.As(err, &pe) || pe.Plugin == "" || pe.Hook != hook {
				t.Fatalf("want %v naming plugin and hook, got %v", want, err)
			}
		})
	}
	// The host is fine: a fresh instance of the well-behaved plugin works.
	p := load(t, r, "./plugins/example")
	p.Grant(p.Manifest().Capabilities)
	inst, err := p.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	var tasks abi.TasksResponse
	if err := inst.Call(ctx, abi.HookTasks, abi.TasksRequest{Config: json.RawMessage(`{"tasks":[{"id":"a","text":"b"}]}`)}, &tasks); err != nil || len(tasks.Tasks) != 1 {
		t.Fatalf("after hostile hooks: %v %+v", err, tasks)
	}
}

func TestInstancesDoNotLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	ctx := context.Background()
	r := newRuntime(t, Config{})
	p := load(t, r, "./plugins/example")
	p.Grant(p.Manifest().Capabilities)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	cycle := func(n int) {
		for range n {
			inst, err := p.Instantiate(ctx, InstanceConfig{})
			if err != nil {
				t.Fatal(err)
			}
			inst.Close(ctx)
		}
	}
	cycle(100)
	at100 := heap()
	cycle(900)
	at1000 := heap()
	if at1000 > at100+32<<20 {
		t.Fatalf("heap grew from %d MB after 100 instances to %d MB after 1000", at100>>20, at1000>>20)
	}
	t.Logf("heap in use: %d MB after 100, %d MB after 1000 instances", at100>>20, at1000>>20)
}

// TestHookTimeIsTheHooksOwn: the hook timeout bounds what the plugin does,
// not the time it waits on its sandbox operations (a task's solve.sh or
// test.sh that runs for minutes under the task's own timeout, issue 32).
// An operation three times longer than the hook timeout completes; a hook
// whose own code loops still runs out of time, and the error names the
// limit that fired.
func TestHookTimeIsTheHooksOwn(t *testing.T) {
	ctx := context.Background()
	const limit = 2 * time.Second
	r := newRuntime(t, Config{HookTimeout: limit, HookTimeoutName: "[env] hook_timeout", MemoryLimitMiB: 128})
	evil := load(t, r, "./host/plugin/wasm/testdata/evil")
	evil.Grant([]string{abi.OpExec})
	slow := map[string]Op{abi.OpExec: func(ctx context.Context, req []byte) ([]byte, error) {
		select {
		case <-time.After(3 * limit):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.Marshal(abi.ExecResponse{Stdout: "done", ExitCode: 0})
	}}
	inst, err := evil.Instantiate(ctx, InstanceConfig{Ops: slow})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	var got struct {
		Status uint32 `json:"status"`
		Resp   string `json:"resp"`
	}
	if err := inst.Call(ctx, "exec", abi.Empty{}, &got); err != nil || got.Status != abi.StatusOK || !strings.Contains(got.Resp, "done") {
		t.Fatalf("a sandbox operation longer than the hook timeout: %v %+v", err, got)
	}

	loop, err := evil.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close(ctx)
	err = loop.Call(ctx, "loop", abi.Empty{}, nil)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "no answer within 2s ([env] hook_timeout") {
		t.Fatalf("a looping hook: %v", err)
	}
}
