package wasm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/python"
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
func BenchmarkPythonCompileCold(b *testing.B) {
	ctx := context.Background()
	for lang, bin := range plugins(b) {
		b.Run(lang, func(b *testing.B) {
			for b.Loop() {
				r, _ := wasm.NewRuntime(ctx, wasm.Config{CacheDir: b.TempDir()})
				if _, err := r.Load(ctx, lang, bin); err != nil {
					b.Fatal(err)
				}
				r.Close(ctx)
			}
			b.ReportMetric(float64(len(bin))/1e6, "MB")
		})
	}
}

// BenchmarkLoadCached: loading a plugin whose compilation is in the
// on-disk cache, in a new runtime (as a new process would). For Python
// the cache was filled by another plugin on the same runtime: the runtime
// is compiled once per machine, not once per plugin.
func BenchmarkPythonLoadCached(b *testing.B) {
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

// scoreOnce scores one rollout on a fresh instance, as a run does.
func scoreOnce(b *testing.B, p *wasm.Plugin, req []byte) {
	ctx := context.Background()
	inst, err := p.Instantiate(ctx, wasm.InstanceConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(ctx)
	if _, err := inst.CallRaw(ctx, abi.HookReward, req); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkInstance: a fresh instance per rollout and its first hook call.
// python-noimage is the plugin without its memory image: the interpreter
// starts and imports the plugin in every instance.
func BenchmarkPythonInstance(b *testing.B) {
	req := transcripts(1)[0]
	all := plugins(b)
	rt := requireRuntime(b)
	noImage, err := python.Build(rt, filepath.Join(repoRoot(b), "plugins/python/toolstats/toolstats.py"), python.Options{})
	if err != nil {
		b.Fatal(err)
	}
	all["python-noimage"] = noImage
	for lang, bin := range all {
		b.Run(lang, func(b *testing.B) {
			p, done := loaded(b, lang, bin)
			defer done()
			for b.Loop() {
				scoreOnce(b, p, req)
			}
		})
	}
}

// BenchmarkHookRoundTrip: one more hook call on a live instance, with a
// small transcript.
func BenchmarkPythonHookRoundTrip(b *testing.B) {
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
func BenchmarkPythonScore1000(b *testing.B) {
	reqs := transcripts(1000)
	for lang, bin := range plugins(b) {
		b.Run(lang, func(b *testing.B) {
			p, done := loaded(b, lang, bin)
			defer done()
			for b.Loop() {
				for _, req := range reqs {
					scoreOnce(b, p, req)
				}
			}
		})
	}
}

// BenchmarkPythonHoardDeadline: a Python hook that hoards memory
// (bytearray(1 << 20) in a loop) under memory_mb = 4096 and a 2 s
// deadline, on a fresh instance; past-deadline-s is how long the call ran
// past its deadline before it ended, peak-rss-MB the process's peak.
//
//	go test -run '^$' -bench PythonHoardDeadline -benchtime 1x -count 5 ./host/plugin/wasm
func BenchmarkPythonHoardDeadline(b *testing.B) {
	const deadline = 2 * time.Second
	ctx := context.Background()
	p := loadPython(b, newRuntime(b, wasm.Config{HookTimeout: deadline, MemoryLimitMiB: 4096}), "sdk/python/testdata/bad")
	req, _ := json.Marshal(abi.RewardRequest{Task: abi.Task{ID: "alloc"}})
	var past time.Duration
	for b.Loop() {
		inst, err := p.Instantiate(ctx, wasm.InstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		_, err = inst.CallRaw(ctx, abi.HookReward, req)
		past += time.Since(start) - deadline
		inst.Close(ctx)
		if !errors.Is(err, wasm.ErrTimeout) && !strings.Contains(err.Error(), "MemoryError") {
			b.Fatalf("want the deadline or a MemoryError, got %v", err)
		}
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(past.Seconds()/float64(b.N), "past-deadline-s")
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MB")
}
