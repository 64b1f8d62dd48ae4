package python_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/proctor-dev/proctor/host/wasm"
	"github.com/proctor-dev/proctor/host/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// The figures of a Python plugin against the Go version of the same plugin
// (toolstats, a reward plugin), in one run:
//
//	go test -run '^$' -bench . -count 5 ./sdk/python | benchstat -
//
// Each benchmark has a /go and a /python case.

// plugins are the two toolstats, as bytes.
func plugins(b *testing.B) map[string][]byte {
	goWasm, err := os.ReadFile(wasmtest.Build(b, "./plugins/toolstats"))
	if err != nil {
		b.Fatal(err)
	}
	return map[string][]byte{"go": goWasm, "python": buildPlugin(b, "plugins/python/toolstats/toolstats.py")}
}

// BenchmarkCompileCold: loading a plugin with an empty compilation cache
// (the first load on a machine); MB is the plugin file's size.
func BenchmarkCompileCold(b *testing.B) {
	ctx := context.Background()
	for lang, bin := range plugins(b) {
		b.Run(lang, func(b *testing.B) {
			b.ReportMetric(float64(len(bin))/1e6, "MB")
			for b.Loop() {
				r, _ := wasm.NewRuntime(ctx, wasm.Config{CacheDir: b.TempDir()})
				if _, err := r.Load(ctx, lang, bin); err != nil {
					b.Fatal(err)
				}
				r.Close(ctx)
			}
		})
	}
}

// BenchmarkLoadCached: loading a plugin whose compilation is in the
// on-disk cache, in a new runtime (as a new process would). For Python
// the cache was filled by another plugin on the same runtime: the runtime
// is compiled once per machine, not once per plugin.
func BenchmarkLoadCached(b *testing.B) {
	ctx := context.Background()
	other := buildPlugin(b, "plugins/python/judge/judge.py")
	for lang, bin := range plugins(b) {
		b.Run(lang, func(b *testing.B) {
			dir := b.TempDir()
			warm, _ := wasm.NewRuntime(ctx, wasm.Config{CacheDir: dir})
			first := bin
			if lang == "python" {
				first = other
			}
			if _, err := warm.Load(ctx, lang, first); err != nil {
				b.Fatal(err)
			}
			warm.Close(ctx)
			for b.Loop() {
				r, _ := wasm.NewRuntime(ctx, wasm.Config{CacheDir: dir})
				if _, err := r.Load(ctx, lang, bin); err != nil {
					b.Fatal(err)
				}
				r.Close(ctx)
			}
		})
	}
}

func loaded(b *testing.B, lang string, bin []byte) (*wasm.Plugin, func()) {
	ctx := context.Background()
	r, _ := wasm.NewRuntime(ctx, wasm.Config{CacheDir: sharedCache()})
	p, err := r.Load(ctx, lang, bin)
	if err != nil {
		b.Fatal(err)
	}
	return p, func() { r.Close(ctx) }
}

// transcripts are n recorded rollouts of 1 to 30 turns with tool calls.
func transcripts(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		var turns []map[string]any
		for j := range 1 + i%30 {
			turns = append(turns, map[string]any{"index": j, "tools": []map[string]any{{"name": "terminal", "failed": (i+j)%7 == 0}, {"name": "read_file"}}})
		}
		msgs := []map[string]string{{"role": "user", "content": fmt.Sprintf("task %d", i)}}
		for range turns {
			msgs = append(msgs, map[string]string{"role": "assistant", "content": "running a command to look at the files in the working directory"})
		}
		tr, _ := json.Marshal(map[string]any{"task_id": fmt.Sprint(i), "trajectory": map[string]any{"messages": msgs, "turns": turns}})
		req, _ := json.Marshal(abi.RewardRequest{Task: abi.Task{ID: fmt.Sprint(i)}, Trajectory: tr, Verify: abi.VerifyResponse{Reward: 1, Passed: true}})
		out[i] = req
	}
	return out
}

// BenchmarkInstance: a fresh instance per rollout and its first hook call
// (for Python, the interpreter's start and the plugin's import happen
// there).
func BenchmarkInstance(b *testing.B) {
	ctx := context.Background()
	req := transcripts(1)[0]
	for lang, bin := range plugins(b) {
		b.Run(lang, func(b *testing.B) {
			p, done := loaded(b, lang, bin)
			defer done()
			for b.Loop() {
				inst, err := p.Instantiate(ctx, wasm.InstanceConfig{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := inst.CallRaw(ctx, abi.HookReward, req); err != nil {
					b.Fatal(err)
				}
				inst.Close(ctx)
			}
		})
	}
}

// BenchmarkHookRoundTrip: one more hook call on a live instance, with a
// small transcript.
func BenchmarkHookRoundTrip(b *testing.B) {
	ctx := context.Background()
	req := transcripts(1)[0]
	for lang, bin := range plugins(b) {
		b.Run(lang, func(b *testing.B) {
			p, done := loaded(b, lang, bin)
			defer done()
			inst, _ := p.Instantiate(ctx, wasm.InstanceConfig{})
			defer inst.Close(ctx)
			if _, err := inst.CallRaw(ctx, abi.HookReward, req); err != nil { // the first call starts the plugin
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := inst.CallRaw(ctx, abi.HookReward, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScore1000: a reward plugin scoring 1,000 recorded rollouts as a
// run does, a fresh instance each; the metric is the whole batch's time.
func BenchmarkScore1000(b *testing.B) {
	ctx := context.Background()
	reqs := transcripts(1000)
	for lang, bin := range plugins(b) {
		b.Run(lang, func(b *testing.B) {
			p, done := loaded(b, lang, bin)
			defer done()
			for b.Loop() {
				for _, req := range reqs {
					inst, err := p.Instantiate(ctx, wasm.InstanceConfig{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := inst.CallRaw(ctx, abi.HookReward, req); err != nil {
						b.Fatal(err)
					}
					inst.Close(ctx)
				}
			}
		})
	}
}
