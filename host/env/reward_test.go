package env

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestRewardOutOfRange: a plugin reward outside ±MaxReward (1e308 here,
// finite alone, infinite once summed) is that score's error, saying what
// it was, and counts for nothing; the rollout is recorded with the
// verifier's reward.
func TestRewardOutOfRange(t *testing.T) {
	_, bad := rewardPlugins(t)
	huge := json.RawMessage(`{"mode":"huge"}`)
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r"})
	r.Rewards = []scheduler.Scorer{
		&Reward{Name: "a", Weight: 1, Wasm: bad, Config: huge},
		&Reward{Name: "weighted", Weight: 2, Wasm: bad, Config: huge},
	}
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "ok"}}); err != nil {
		t.Fatalf("the run stopped: %v", err)
	}
	recs := r.Store.Records()
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	rec := recs[0]
	for _, rs := range rec.Rewards {
		if rs.Reward != 0 || !strings.Contains(rs.Error, "hook reward.score: reward 1e+308 is outside the range a reward may take, finite and within ±1e+06") {
			t.Errorf("score %+v: want the range error", rs)
		}
	}
	if rec.Reward != 1 || rec.Outcome != rundir.OutcomePassed {
		t.Errorf("rollout %s with reward %v, want passed with the verifier's 1", rec.Outcome, rec.Reward)
	}
}

// testPlugin loads the plugin pkg, real wasm built from source by the
// test, on a runtime of its own, and grants it ops.
func testPlugin(tb testing.TB, pkg string, ops ...string) *wasm.Plugin {
	tb.Helper()
	return testPluginOn(tb, wasm.Config{}, pkg, ops...)
}

// testPluginOn is testPlugin on a runtime made with cfg.
func testPluginOn(tb testing.TB, cfg wasm.Config, pkg string, ops ...string) *wasm.Plugin {
	tb.Helper()
	ctx := context.Background()
	cfg.CacheDir = tb.TempDir()
	rt, err := wasm.NewRuntime(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close(ctx) })
	p, err := rt.LoadFile(ctx, wasmtest.Build(tb, pkg))
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Grant(ops); err != nil {
		tb.Fatal(err)
	}
	return p
}

// rewardPlugins loads the toolstats and badreward plugins with what
// [[reward]] grants by default.
func rewardPlugins(t testing.TB) (toolstats, bad *wasm.Plugin) {
	return testPlugin(t, "./plugins/toolstats", abi.OpHostInfo), testPlugin(t, "./host/env/testdata/badreward", abi.OpHostInfo)
}

// TestRewardTrapCostsOnlyItsScore stacks a plugin that traps for real (an
// out-of-bounds memory access no recover catches), one that fails the
// ordinary way and one that works, on rollouts run by the runner's fakes:
// the trap and the error are their own scores' errors, the working score
// stands, every rollout is recorded and the combined reward is right.
func TestRewardTrapCostsOnlyItsScore(t *testing.T) {
	toolstats, bad := rewardPlugins(t)
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Attempts: 2, Concurrency: 2})
	r.Rewards = []scheduler.Scorer{
		&Reward{Name: "stats", Weight: 0.25, Wasm: toolstats},
		&Reward{Name: "trap", Weight: 2, Wasm: bad, Config: json.RawMessage(`{"mode":"trap"}`)},
		&Reward{Name: "error", Weight: 1, Wasm: bad, Config: json.RawMessage(`{"mode":"error"}`)},
	}
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "ok"}}); err != nil {
		t.Fatal(err)
	}
	recs := r.Store.Records()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, rec := range recs {
		if rec.Outcome != rundir.OutcomePassed || len(rec.Rewards) != 3 {
			t.Fatalf("%s: %+v", rec.RolloutID, rec)
		}
		stats, trap, fail := rec.Rewards[0], rec.Rewards[1], rec.Rewards[2]
		if stats.Error != "" || stats.Reward != 1 {
			t.Errorf("%s: the working reward: %+v", rec.RolloutID, stats)
		}
		if !strings.Contains(trap.Error, "plugin") || !strings.Contains(trap.Error, "out of bounds memory access") {
			t.Errorf("%s: the trap: %+v", rec.RolloutID, trap)
		}
		if !strings.Contains(fail.Error, "badreward fails on purpose") {
			t.Errorf("%s: the ordinary error: %+v", rec.RolloutID, fail)
		}
		if want := 1 + 0.25*1.0; rec.Reward != want {
			t.Errorf("%s: combined reward %v, want %v", rec.RolloutID, rec.Reward, want)
		}
	}
}

// TestRewardUndeclaredOpDenied: a reward plugin calling operations it did
// not declare is denied them, even when the run grants them and serves
// model.complete; the model is never asked.
func TestRewardUndeclaredOpDenied(t *testing.T) {
	_, bad := rewardPlugins(t)
	if err := bad.Grant([]string{abi.OpHostInfo, abi.OpModelComplete}); err != nil {
		t.Fatal(err)
	}
	asked := 0
	rp := &Reward{Name: "undeclared", Weight: 1, Wasm: bad, Config: json.RawMessage(`{"mode":"undeclared"}`),
		Complete: func(context.Context, abi.ModelRequest) (abi.ModelResponse, error) {
			asked++
			return abi.ModelResponse{Content: "SCORE: 10"}, nil
		}}
	s := rp.Score(context.Background(), scheduler.ScoreInput{Task: scheduler.Task{ID: "t"}})
	if s.Error != "" || s.Scores["host_info_denied"] != 1 || s.Scores["model_complete_denied"] != 1 || asked != 0 {
		t.Fatalf("undeclared operations: %+v, model asked %d times", s, asked)
	}
}

// TestJudgeUsage: the tokens a judge's model.complete calls spend are in
// its score, apart from the agent's, also when the judge then fails.
func TestJudgeUsage(t *testing.T) {
	ctx := context.Background()
	judge := testPlugin(t, "./plugins/judge", abi.OpHostInfo, abi.OpModelComplete)
	answer := "Direct.\nSCORE: 7"
	rp := &Reward{Name: "judge", Weight: 1, Wasm: judge, Complete: func(context.Context, abi.ModelRequest) (abi.ModelResponse, error) {
		return abi.ModelResponse{Content: answer, PromptTokens: 100, CompletionTokens: 20}, nil
	}}
	s := rp.Score(ctx, scheduler.ScoreInput{Task: scheduler.Task{ID: "t"}})
	if s.Error != "" || s.Reward != 0.7 || s.Usage == nil || *s.Usage != (agent.Usage{PromptTokens: 100, CompletionTokens: 20}) {
		t.Errorf("judge score %+v (usage %+v)", s, s.Usage)
	}
	answer = "No opinion."
	s = rp.Score(ctx, scheduler.ScoreInput{Task: scheduler.Task{ID: "t"}})
	if s.Error == "" || s.Usage == nil || s.Usage.PromptTokens != 100 {
		t.Errorf("a judge that failed after asking: %+v (usage %+v)", s, s.Usage)
	}
	if s := (&Reward{Name: "stats", Weight: 1, Wasm: judge}).Score(ctx, scheduler.ScoreInput{Task: scheduler.Task{ID: "t"}}); s.Usage != nil {
		t.Errorf("no model call, yet usage %+v", s.Usage)
	}
}

// BenchmarkRewardPlugin: one stacked reward (toolstats) on a 30-turn
// transcript, fresh instance included: the cost a reward plugin adds to a
// rollout.
func BenchmarkRewardPlugin(b *testing.B) {
	ctx := context.Background()
	p := testPlugin(b, "./plugins/toolstats", abi.OpHostInfo)
	type turn struct {
		Tools []map[string]any `json:"tools"`
	}
	var turns []turn
	for i := range 30 {
		turns = append(turns, turn{Tools: []map[string]any{{"name": "terminal", "secs": 0.1, "failed": i%7 == 0}}})
	}
	tr, _ := json.Marshal(map[string]any{"trajectory": map[string]any{"turns": turns, "messages": []any{}}})
	rp := &Reward{Name: "toolstats", Weight: 1, Wasm: p}
	in := scheduler.ScoreInput{Task: scheduler.Task{ID: "t"}, Transcript: tr, Verdict: scheduler.Verdict{Reward: 1, Passed: true}}
	if s := rp.Score(ctx, in); s.Error != "" || s.Scores["tool_calls"] != 30 {
		b.Fatalf("%+v", s)
	}
	b.ResetTimer()
	for b.Loop() {
		rp.Score(ctx, in)
	}
}

// TestVerdictTextIsBounded: a verifier's output over its cap keeps its
// tail and says how long it was; a test's message keeps its head.
func TestVerdictTextIsBounded(t *testing.T) {
	out := strings.Repeat("a", 3*maxVerdictOutput) + "THE END"
	tests := []abi.TestResult{{Name: "t", Message: "HEAD" + strings.Repeat("m", 2*abi.MaxTestMessage)}}
	if err := checkTests(tests); err != nil {
		t.Fatal(err)
	}
	v := verdict(abi.VerifyResponse{Output: out, Tests: tests})
	if len(v.Output) > maxVerdictOutput+200 || !strings.HasSuffix(v.Output, "THE END") || !strings.HasPrefix(v.Output, fmt.Sprintf("proctor: the verifier's output was %d bytes", len(out))) {
		t.Errorf("output of %d bytes: %.100q", len(v.Output), v.Output)
	}
	if m := v.Tests[0].Message; len(m) > abi.MaxTestMessage+100 || !strings.HasPrefix(m, "HEAD") || !strings.Contains(m, "bytes cut]") {
		t.Errorf("message of %d bytes", len(m))
	}
}
