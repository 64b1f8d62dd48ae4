// Package rundirtest writes run directories for tests: the records and
// transcripts of rollouts, as a run leaves them.
package rundirtest

import (
	"fmt"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// Rollout is one rollout of a run directory written by Write.
type Rollout struct {
	Task    string
	Attempt int
	Reward  float64
	IDs     bool // the transcript has token ids
	// BreakAt, when positive, adds a second turn whose prompt ids differ
	// from the first turn's prompt and completion at that position.
	BreakAt int
	Rewards []rundir.RewardScore // stacked rewards
	Outcome string               // default passed
}

// Write appends the rollouts' records and transcripts to the run
// directory dir and returns the open store, closed when the test ends.
func Write(t testing.TB, dir string, rs ...Rollout) *rundir.Store {
	t.Helper()
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, r := range rs {
		id := fmt.Sprintf("%s#%d", r.Task, r.Attempt)
		rec := rundir.Record{RolloutID: id, TaskID: r.Task, Attempt: r.Attempt, Outcome: r.Outcome, Reward: r.Reward, Rewards: r.Rewards}
		if rec.Outcome == "" {
			rec.Outcome = rundir.OutcomePassed
		}
		name := rundir.TranscriptName(id, 0)
		tr := Trajectory(r.Task, r.IDs)
		if r.BreakAt > 0 {
			prompt := []int{1, 2, 3, 4, 5, 6, 7}
			prompt[r.BreakAt] = 99
			tr.Messages = append(tr.Messages, trajectory.Message{Role: "assistant", Content: "again"})
			tr.Turns = append(tr.Turns, trajectory.Turn{Index: 1, PromptTokenIDs: prompt, CompletionTokenIDs: []int{8}})
		}
		if err := store.WriteTranscript(name, trajectory.Transcript{RolloutID: id, TaskID: r.Task, Prompt: "solve " + r.Task, Trajectory: tr}); err != nil {
			t.Fatal(err)
		}
		rec.Transcript = rundir.TranscriptsDir + "/" + name
		if err := store.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// Trajectory is a one-turn rollout of the task, with or without the token
// ids of its call.
func Trajectory(task string, ids bool) *trajectory.Trajectory {
	tr := &trajectory.Trajectory{Agent: "llm", Model: "m", StopReason: trajectory.StopDone,
		Messages: []trajectory.Message{{Role: "user", Content: "solve " + task}, {Role: "assistant", Content: "done"}},
		Turns:    []trajectory.Turn{{Index: 0, Usage: trajectory.Usage{PromptTokens: 3, CompletionTokens: 2}}}}
	if ids {
		tr.Turns[0].PromptTokenIDs, tr.Turns[0].CompletionTokenIDs = []int{1, 2, 3}, []int{4, 5}
	}
	return tr
}
