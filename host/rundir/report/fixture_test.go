package report

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/trajectory"
)

// Hostile text a model or a dataset could produce; the report must show it
// as text.
const (
	hostileScript = `</script><script>window.pwned = 1</script>`
	hostileHTML   = `<img src=x onerror="window.pwned = 1"><!-- <b>bold</b>`
)

// fixture describes a generated run directory.
type fixture struct {
	tasks, attempts, turns int
	finished               bool
	hostile                bool // put hostile text in a task id, a category and a transcript
}

var categories = []string{"file-operations", "debugging", "networking", "data-science"}

// runnerPhases are the phases scheduler.Runner records, in the order they happen.
var runnerPhases = []string{"plugin_start", "sandbox_start", "setup", "agent", "verify", "reward", "teardown", "sandbox_stop"}

// write writes the run directory and returns its summary as summary.json
// holds it.
func (f fixture) write(tb testing.TB, dir string) Summary {
	tb.Helper()
	store, err := rundir.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer store.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 11, 22, 16, 0, 0, 0, time.UTC)
	for task := range f.tasks {
		id := fmt.Sprintf("task-%04d", task)
		cat := categories[task%len(categories)]
		if f.hostile && task == 1 {
			id, cat = "evil"+hostileScript, "cat"+hostileHTML
		}
		skill := rng.Float64()
		for a := range f.attempts {
			rec := rundir.Record{RolloutID: fmt.Sprintf("%s#%d", id, a), TaskID: id, Attempt: a, Category: cat,
				Difficulty: "medium", Seed: rng.Uint64(), Image: "proctor-base:bookworm",
				Phases: map[string]float64{}, StartedAt: start}
			switch x := rng.Float64(); {
			case x < skill*0.9:
				rec.Outcome, rec.Reward = rundir.OutcomePassed, 1
			case x < 0.93:
				rec.Outcome = rundir.OutcomeFailed
			case x < 0.97:
				rec.Outcome = rundir.OutcomeAgentTimeout
			default:
				rec.Outcome, rec.ErrorClass, rec.Error = rundir.OutcomeInfraError, rundir.ClassSandbox, "start sandbox: image not found"
			}
			var total float64
			for _, p := range runnerPhases {
				v := rng.ExpFloat64() * map[string]float64{"agent": 60, "verify": 8, "sandbox_start": 2}[p]
				if v == 0 {
					v = rng.Float64() / 10
				}
				rec.Phases[p] = v
				total += v
			}
			rec.FinishedAt = start.Add(time.Duration(total * float64(time.Second)))
			rec.Tests = []abi.TestResult{{Name: "test_output_exists", Status: "passed"}, {Name: "test_output_content", Status: "failed", Message: "assert 'hello' == 'hallo'"}}
			if f.hostile && task == 1 {
				v := rec.Reward
				rec.VerifierReward = &v
				rec.Rewards = []rundir.RewardScore{{Name: "judge" + hostileHTML, Weight: 0.5, Reward: 0.7, Scores: map[string]float64{"score": 7}},
					{Name: "trap", Weight: 1, Error: "plugin trapreward hook reward.score: trap"}}
			}
			if rec.Outcome == rundir.OutcomePassed {
				rec.Tests[1].Status, rec.Tests[1].Message = "passed", ""
			}
			rec.VerifierOutput = strings.Repeat("collected 2 items\n", 3) + "tests/test_outputs.py ..\n2 passed in 0.12s\n"
			tr := f.trajectory(rng, id, a)
			rec.Turns = len(tr.Turns)
			rec.StopReason = tr.StopReason
			rec.Usage = trajectory.Usage{PromptTokens: tr.Usage.PromptTokens, CompletionTokens: tr.Usage.CompletionTokens}
			rec.CostUSD = float64(rec.Usage.PromptTokens)*3e-6 + float64(rec.Usage.CompletionTokens)*15e-6
			name := rundir.TranscriptName(rec.RolloutID, 0)
			if err := store.WriteTranscript(name, map[string]any{"rollout_id": rec.RolloutID, "task_id": id, "seed": rec.Seed,
				"prompt": tr.Messages[1].Content, "system": tr.Messages[0].Content, "trajectory": tr}); err != nil {
				tb.Fatal(err)
			}
			rec.Transcript = "transcripts/" + name
			if err := store.Append(rec); err != nil {
				tb.Fatal(err)
			}
		}
	}
	os.WriteFile(filepath.Join(dir, rundir.ConfigFile), []byte("[run]\n  name = \"fixture\"\n  attempts = "+fmt.Sprint(f.attempts)+"\n"), 0o644)
	man := map[string]any{"proctor_version": "dev", "run_id": "fixture-20261122T160000-00000000", "name": "fixture",
		"started_at": start, "agent": "llm", "backend": "docker", "model": map[string]string{"name": "test-model"},
		"plugin": map[string]string{"name": "tb2", "version": "1.0.0"}}
	if f.finished {
		man["finished_at"] = start.Add(time.Hour)
	}
	if err := rundir.WriteJSONAtomic(filepath.Join(dir, rundir.ManifestFile), man); err != nil {
		tb.Fatal(err)
	}
	s := Summarize(store.Records())
	if f.finished {
		if err := rundir.WriteJSONAtomic(filepath.Join(dir, rundir.SummaryFile), s); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// trajectory is an llm agent's trajectory of f.turns turns: reasoning,
// terminal calls with arguments, and outputs of a few dozen lines.
func (f fixture) trajectory(rng *rand.Rand, task string, attempt int) trajectory.Trajectory {
	tr := trajectory.Trajectory{Agent: "llm", Model: "test-model", Tools: []string{"terminal", "file"}, StopReason: trajectory.StopDone}
	tr.Messages = []trajectory.Message{
		{Role: "system", Content: "You are an agent working in a Linux sandbox. Use the tools to finish the task."},
		{Role: "user", Content: fmt.Sprintf("Task %s (attempt %d): fix the failing tests in /app and make sure `pytest -q` passes.", task, attempt)},
	}
	for i := range f.turns {
		call := trajectory.ToolCall{ID: fmt.Sprintf("call_%d", i), Type: "function",
			Function: trajectory.FunctionCall{Name: "terminal", Arguments: fmt.Sprintf(`{"command": "cd /app && pytest -q tests/test_fix.py -k case_%d"}`, i)}}
		msg := trajectory.Message{Role: "assistant", Content: fmt.Sprintf("Step %d: run the tests again.", i), ToolCalls: []trajectory.ToolCall{call},
			Reasoning: strings.Repeat("The failure points at the parser; check the edge case first. ", 4)}
		var out strings.Builder
		for l := range 20 + rng.IntN(20) {
			fmt.Fprintf(&out, "tests/test_fix.py::test_case_%d_%d PASSED [%3d%%] elapsed %.3fs\n", i, l, l*3, rng.Float64())
		}
		if f.hostile && i == 0 {
			msg.Content += " " + hostileScript + " " + hostileHTML
			out.WriteString(hostileScript + "\n")
		}
		tr.Messages = append(tr.Messages, msg, trajectory.Message{Role: "tool", ToolCallID: call.ID, Name: "terminal", Content: out.String()})
		u := trajectory.Usage{PromptTokens: int64(1500 + 800*i), CompletionTokens: int64(100 + rng.IntN(300))}
		tr.Usage.PromptTokens += u.PromptTokens
		tr.Usage.CompletionTokens += u.CompletionTokens
		tr.Turns = append(tr.Turns, trajectory.Turn{Index: i, Usage: u, ModelSecs: rng.Float64() * 4,
			Tools: []trajectory.ToolTiming{{Name: "terminal", Secs: rng.Float64() * 3}}})
	}
	tr.Messages = append(tr.Messages, trajectory.Message{Role: "assistant", Content: "All tests pass now."})
	tr.Turns = append(tr.Turns, trajectory.Turn{Index: f.turns})
	return tr
}
