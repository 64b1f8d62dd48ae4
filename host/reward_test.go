package host

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/proctor-dev/proctor/host/results"
	"github.com/proctor-dev/proctor/host/wasm"
	"github.com/proctor-dev/proctor/host/wasm/wasmtest"
)

func TestCombine(t *testing.T) {
	scores := []results.RewardScore{{Name: "a", Weight: 0.5, Reward: 0.8}, {Name: "b", Weight: 2, Reward: 1, Error: "trap"}, {Name: "c", Weight: 0.25, Reward: 1}}
	if got := Combine(1, 1, scores); got != 1.65 {
		t.Errorf("Combine = %v, want 1.65 (a failed reward counts for nothing)", got)
	}
	if got := Combine(1, 0, nil); got != 0 {
		t.Errorf("env weight 0: %v", got)
	}
}

// BenchmarkRewardPlugin: one stacked reward (toolstats) on a 30-turn
// transcript, fresh instance included: the cost a reward plugin adds to a
// rollout.
func BenchmarkRewardPlugin(b *testing.B) {
	ctx := context.Background()
	rt, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	p, err := rt.LoadFile(ctx, wasmtest.Build(b, "./plugins/toolstats"))
	if err != nil {
		b.Fatal(err)
	}
	p.Grant([]string{"host.info"})
	type turn struct {
		Tools []map[string]any `json:"tools"`
	}
	var turns []turn
	for i := range 30 {
		turns = append(turns, turn{Tools: []map[string]any{{"name": "terminal", "secs": 0.1, "failed": i%7 == 0}}})
	}
	tr, _ := json.Marshal(map[string]any{"trajectory": map[string]any{"turns": turns, "messages": []any{}}})
	rp := &RewardPlugin{Name: "toolstats", Weight: 1, Plugin: p}
	in := ScoreInput{Task: Task{ID: "t"}, Transcript: tr, Verdict: Verdict{Reward: 1, Passed: true}}
	if s := rp.Score(ctx, in); s.Error != "" || s.Scores["tool_calls"] != 30 {
		b.Fatalf("%+v", s)
	}
	b.ResetTimer()
	for b.Loop() {
		rp.Score(ctx, in)
	}
}
