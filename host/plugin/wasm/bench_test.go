package wasm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// BenchmarkLoadCached: loading a ~3.5 MB Go plugin whose compilation is in
// the on-disk cache (a new runtime each time, as a new process would).
func BenchmarkLoadCached(b *testing.B) {
	ctx := context.Background()
	path := wasmtest.Build(b, "./plugins/example")
	bin, _ := os.ReadFile(path)
	dir := b.TempDir()
	warm, _ := NewRuntime(ctx, Config{CacheDir: dir})
	if _, err := warm.Load(ctx, "example", bin); err != nil {
		b.Fatal(err)
	}
	warm.Close(ctx)
	b.ReportMetric(float64(len(bin))/1e6, "MB")
	b.ResetTimer()
	for b.Loop() {
		r, _ := NewRuntime(ctx, Config{CacheDir: dir})
		if _, err := r.Load(ctx, "example", bin); err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
	}
}

// BenchmarkLoadCold: compiling without a cache.
func BenchmarkLoadCold(b *testing.B) {
	ctx := context.Background()
	bin, _ := os.ReadFile(wasmtest.Build(b, "./plugins/example"))
	for b.Loop() {
		r, _ := NewRuntime(ctx, Config{CacheDir: b.TempDir()})
		if _, err := r.Load(ctx, "example", bin); err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
	}
}

func benchPlugin(b *testing.B) (*Plugin, func()) { return benchPluginOn(b, Config{}) }

// benchPluginOn is benchPlugin on a runtime made with cfg.
func benchPluginOn(b *testing.B, cfg Config) (*Plugin, func()) {
	ctx := context.Background()
	cfg.CacheDir = b.TempDir()
	r, _ := NewRuntime(ctx, cfg)
	p, err := r.LoadFile(ctx, wasmtest.Build(b, "./plugins/example"))
	if err != nil {
		b.Fatal(err)
	}
	p.Grant(p.Manifest().Capabilities)
	return p, func() { r.Close(ctx) }
}

// BenchmarkInstantiate: a fresh instance per rollout.
func BenchmarkInstantiate(b *testing.B) {
	ctx := context.Background()
	p, done := benchPlugin(b)
	defer done()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		inst, err := p.Instantiate(ctx, InstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		inst.Close(ctx)
	}
}

// BenchmarkHookCall: a trivial hook (prompt.format) end to end.
func BenchmarkHookCall(b *testing.B) {
	ctx := context.Background()
	p, done := benchPlugin(b)
	defer done()
	inst, _ := p.Instantiate(ctx, InstanceConfig{})
	req := abi.RolloutRequest{Task: abi.Task{ID: "a", Data: json.RawMessage(`{"id":"a","text":"b"}`)}}
	in, _ := json.Marshal(req)
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if _, err := inst.CallRaw(ctx, abi.HookPrompt, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHostOp: a hook that makes one host operation (read_file through
// a fake sandbox), minus BenchmarkHookCall, is the op's round trip.
func BenchmarkHostOp(b *testing.B) {
	ctx := context.Background()
	p, done := benchPlugin(b)
	defer done()
	files := map[string][]byte{"answer.txt": []byte("b")}
	inst, _ := p.Instantiate(ctx, InstanceConfig{Ops: fakeOps(files)})
	req := abi.VerifyRequest{RolloutRequest: abi.RolloutRequest{Task: abi.Task{ID: "a", Data: json.RawMessage(`{"id":"a","text":"b"}`)}}}
	in, _ := json.Marshal(req)
	start := time.Now()
	for b.Loop() {
		if _, err := inst.CallRaw(ctx, abi.HookVerify, in); err != nil {
			b.Fatal(err)
		}
	}
	_ = start
}

// BenchmarkTrivialHook: a hook whose guest does almost nothing (the raw
// test plugin answering an unknown method): the host's overhead per call.
func BenchmarkTrivialHook(b *testing.B) {
	ctx := context.Background()
	r, _ := NewRuntime(ctx, Config{CacheDir: b.TempDir()})
	defer r.Close(ctx)
	p, _ := r.LoadFile(ctx, wasmtest.Build(b, "./host/plugin/wasm/testdata/evil"))
	p.Grant([]string{abi.OpExec})
	inst, _ := p.Instantiate(ctx, InstanceConfig{Ops: fakeOps(map[string][]byte{})})
	for b.Loop() {
		inst.CallRaw(ctx, "nothing", []byte("{}"))
	}
}

// BenchmarkTrivialHookWithOp: the same with one host operation (a fake
// sandbox.exec); the difference to BenchmarkTrivialHook is the op's round
// trip.
func BenchmarkTrivialHookWithOp(b *testing.B) {
	ctx := context.Background()
	r, _ := NewRuntime(ctx, Config{CacheDir: b.TempDir()})
	defer r.Close(ctx)
	p, _ := r.LoadFile(ctx, wasmtest.Build(b, "./host/plugin/wasm/testdata/evil"))
	p.Grant([]string{abi.OpExec})
	ops := map[string]Op{abi.OpExec: func(ctx context.Context, req []byte) ([]byte, error) { return []byte(`{"stdout":"hi"}`), nil }}
	inst, _ := p.Instantiate(ctx, InstanceConfig{Ops: ops})
	for b.Loop() {
		if _, err := inst.CallRaw(ctx, "exec", []byte("{}")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstanceMemory: what one example plugin instance of a rollout
// costs the host once it answered the hooks before the agent (sandbox
// spec, setup, prompt): whole, and parked as the scheduler parks it while
// the agent works. 200 instances at once, as many rollouts in flight.
func BenchmarkInstanceMemory(b *testing.B) {
	for _, parked := range []bool{false, true} {
		b.Run(fmt.Sprintf("parked=%v", parked), func(b *testing.B) {
			ctx := context.Background()
			const n = 200
			// All whole unless parked here: the runtime would park those
			// past its resident instances on its own.
			p, done := benchPluginOn(b, Config{ResidentInstances: n})
			defer done()
			req, _ := json.Marshal(abi.RolloutRequest{Task: abi.Task{ID: "a", Data: json.RawMessage(`{"id":"a","text":"b"}`)}})
			var perInstance float64
			for b.Loop() {
				debug.FreeOSMemory()
				before := rss(b)
				insts := make([]*Instance, n)
				for k := range insts {
					inst, err := p.Instantiate(ctx, InstanceConfig{Ops: fakeOps(map[string][]byte{})})
					if err != nil {
						b.Fatal(err)
					}
					for _, h := range []string{abi.HookSandbox, abi.HookSetup, abi.HookPrompt} {
						if _, err := inst.CallRaw(ctx, h, req); err != nil {
							b.Fatal(err)
						}
					}
					if parked && !inst.Park(ctx) {
						b.Fatal("not parked")
					}
					insts[k] = inst
				}
				debug.FreeOSMemory()
				perInstance = float64(rss(b)-before) / n
				for _, inst := range insts {
					inst.Close(ctx)
				}
			}
			b.ReportMetric(perInstance/1e6, "MB/instance")
		})
	}
}

// BenchmarkParkUnpark: parking an instance after a hook and re-creating
// it for the next; minus BenchmarkHookCall, what a park costs.
func BenchmarkParkUnpark(b *testing.B) {
	ctx := context.Background()
	p, done := benchPlugin(b)
	defer done()
	inst, _ := p.Instantiate(ctx, InstanceConfig{})
	req, _ := json.Marshal(abi.RolloutRequest{Task: abi.Task{ID: "a", Data: json.RawMessage(`{"id":"a","text":"b"}`)}})
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if !inst.Park(ctx) {
			b.Fatal("not parked")
		}
		if _, err := inst.CallRaw(ctx, abi.HookPrompt, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRolloutHooks: an example plugin instance through a rollout's
// hooks, whole, and parked where the scheduler parks it (before the
// sandbox starts and while the agent works): the difference is what
// parking costs a rollout.
func BenchmarkRolloutHooks(b *testing.B) {
	for _, park := range []bool{false, true} {
		b.Run(fmt.Sprintf("parked=%v", park), func(b *testing.B) {
			ctx := context.Background()
			p, done := benchPlugin(b)
			defer done()
			files := map[string][]byte{"answer.txt": []byte("b")}
			req, _ := json.Marshal(abi.VerifyRequest{RolloutRequest: abi.RolloutRequest{Task: abi.Task{ID: "a", Data: json.RawMessage(`{"id":"a","text":"b"}`)}}})
			defer reportCPU(b, cpuTime())
			for b.Loop() {
				inst, err := p.Instantiate(ctx, InstanceConfig{Ops: fakeOps(files)})
				if err != nil {
					b.Fatal(err)
				}
				for _, h := range []string{abi.HookSandbox, "park", abi.HookSetup, abi.HookPrompt, "park", abi.HookVerify, abi.HookTeardown} {
					if h == "park" {
						if park && !inst.Park(ctx) {
							b.Fatal("not parked")
						}
						continue
					}
					if _, err := inst.CallRaw(ctx, h, req); err != nil && h != abi.HookTeardown {
						b.Fatal(err)
					}
				}
				inst.Close(ctx)
			}
		})
	}
}

// reportCPU reports the process's CPU time per op since start as
// cpu-ms/op, which, unlike ns/op, a loaded machine does not inflate.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
}
