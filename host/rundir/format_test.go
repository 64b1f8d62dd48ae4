package rundir_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/report"
	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/trajectory"
)

var update = flag.Bool("update", false, "rewrite testdata/format from the types")

// TestFormatsPinned pins the bytes of what a run directory holds (a
// results.jsonl line, manifest.json, summary.json, a transcript), every
// field set, against testdata/format: directories written by earlier
// releases must read back, and tools that parse them must not break.
// Run with -update only for a deliberate change of format.
func TestFormatsPinned(t *testing.T) {
	start := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	rec := sampleRecord(start)
	line, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	tr := trajectory.Transcript{RolloutID: rec.RolloutID, TaskID: rec.TaskID, Seed: 7, Prompt: "solve it", System: "be careful",
		Trajectory: sampleTrajectory()}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"record.jsonl", append(line, '\n')},
		{"manifest.json", indented(t, sampleManifest(start))},
		{"summary.json", indented(t, report.Summarize([]rundir.Record{rec}))},
		{"transcript.json", indented(t, tr)},
	} {
		path := filepath.Join("testdata", "format", f.name)
		if *update {
			if err := os.WriteFile(path, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.data, want) {
			t.Errorf("%s changed:\n%s\nwant:\n%s", f.name, f.data, want)
		}
	}
}

// indented is how the run writes its JSON files (WriteJSONAtomic).
func indented(t *testing.T, v any) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.json")
	if err := rundir.WriteJSONAtomic(path, v); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sampleRecord(start time.Time) rundir.Record {
	env, judgeUsage := 0.5, trajectory.Usage{PromptTokens: 10, CompletionTokens: 2}
	return rundir.Record{
		RolloutID: "fix-git#1", TaskID: "fix-git", Attempt: 1, Try: 2, Category: "git", Difficulty: "hard",
		Outcome: rundir.OutcomeInfraError, ErrorClass: rundir.ClassVerifier, Error: "verify: no reward written",
		Reward: 0.75, Scores: map[string]float64{"tests": 0.5}, VerifierReward: &env,
		Rewards: []rundir.RewardScore{{Name: "judge", Weight: 0.5, Reward: 1, Scores: map[string]float64{"style": 1}, Error: "", Usage: &judgeUsage},
			{Name: "broken", Weight: 1, Error: "trap"}},
		Tests:          []abi.TestResult{{Name: "test_a", Status: "passed"}, {Name: "test_b", Status: "failed", Message: "assert 1 == 2"}},
		VerifierOutput: "1 passed, 1 failed", Turns: 3,
		Usage:   trajectory.Usage{PromptTokens: 1000, CompletionTokens: 200, CachedTokens: 300, ReasoningTokens: 50},
		CostUSD: 0.0125, Phases: map[string]float64{"agent": 12.5, "verify": 3},
		StartedAt: start, FinishedAt: start.Add(16 * time.Second), Seed: 1234567890123,
		Image: "proctor-base:bookworm", ImageDigest: "sha256:abcd", Transcript: "transcripts/fix-git.1.try2.json", StopReason: "done",
	}
}

func sampleTrajectory() *trajectory.Trajectory {
	temp, seed := 0.7, int64(9)
	return &trajectory.Trajectory{
		Agent: "llm", Model: "m", Tools: []string{"terminal"}, StopReason: trajectory.StopDone, Error: "",
		Messages: []trajectory.Message{{Role: "user", Content: "solve it"},
			{Role: "assistant", Reasoning: "think", ToolCalls: []trajectory.ToolCall{{ID: "c1", Type: "function", Function: trajectory.FunctionCall{Name: "terminal", Arguments: `{"command":"ls"}`}}}},
			{Role: "tool", ToolCallID: "c1", Name: "terminal", Content: "a.txt"}},
		Turns: []trajectory.Turn{{Index: 0, Usage: trajectory.Usage{PromptTokens: 5, CompletionTokens: 3, CachedTokens: 1, ReasoningTokens: 1}, ModelSecs: 0.25,
			Errors: []string{"x"}, PromptTokenIDs: []int{1, 2}, CompletionTokenIDs: []int{3}, CompletionLogprobs: []float64{-0.5}}},
		Usage:    trajectory.Usage{PromptTokens: 5, CompletionTokens: 3, CachedTokens: 1, ReasoningTokens: 1},
		Sampling: &trajectory.Sampling{Temperature: &temp, MaxTokens: 100, Seed: &seed},
	}
}

func sampleManifest(start time.Time) rundir.Manifest {
	fin := start.Add(time.Hour)
	return rundir.Manifest{
		ProctorVersion: "v1.2.3", RunID: "demo-20250102T030405-abcd", Name: "demo", StartedAt: start,
		ResumedAt: []time.Time{start.Add(time.Minute)}, FinishedAt: &fin,
		Plugin:  rundir.PluginInfo{Name: "tb2", Version: "1.0.0", SHA256: "ab12", Source: "oci:reg/tb2@sha256:cd34", Digest: "sha256:cd34"},
		Rewards: []rundir.PluginInfo{{Name: "judge", Version: "0.1", SHA256: "ef56", Source: "file:judge.wasm"}},
		Process: &rundir.ProcessInfo{GroupSize: 2, Groups: 3, MessagesGroups: 1, SFT: 7, Dropped: map[string]int{"min_reward": 1},
			Skipped: map[string]int{"infra_error": 2}, Tokens: "partial",
			NoTokens: map[string]rundir.NoTokensCount{"no_token_ids": {Groups: 1, Example: "task b: no token ids recorded"}}},
		Model: map[string]string{"base_url": "http://127.0.0.1:1/v1", "name": "m"}, Agent: "llm", Backend: "docker",
		ConfigHash: "0123", ImageDigests: map[string]string{"img": "sha256:99"},
		SkippedTasks: []map[string]string{{"id": "x", "reason": "no image"}},
	}
}
