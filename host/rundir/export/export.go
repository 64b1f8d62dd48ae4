// Package export turns the rollouts of a run directory into training and
// interchange files: Atropos scored data groups (RL), chat JSONL (SFT) and
// Harbor's Agent Trajectory Interchange Format (ATIF).
//
// Everything here is a pure function of a result record and the trajectory
// of its transcript, so a caller can stream: read one task's rollouts,
// convert them, write a line, forget them. Token sequences are built only
// from the token ids the endpoint returned (trajectory.Turn's PromptTokenIDs,
// CompletionTokenIDs, CompletionLogprobs), never by retokenizing text: when
// the ids are missing or do not line up across turns, the group is not a
// ScoredDataGroup but a MessagesGroup, written to its own file
// (MessagesPath), and the reason is returned.
//
// Writer routes a task's group and SFT lines to their destinations, for
// proctor process as each group is decided and for proctor export; Files
// is proctor export's writing of a whole run.
package export

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// ParseTranscript reads a transcript, or a bare trajectory.Trajectory as older
// runs and other tools write it. The bytes are untrusted: anything that is
// not one of the two shapes is an error, never a panic.
func ParseTranscript(b []byte) (*trajectory.Transcript, error) {
	var t trajectory.Transcript
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("not a transcript: %w", err)
	}
	if t.Trajectory != nil {
		return &t, nil
	}
	// No "trajectory": a bare trajectory, or something else.
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	_, hasMsgs := probe["messages"]
	_, hasAgent := probe["agent"]
	if !hasMsgs && !hasAgent {
		return nil, errors.New("neither a transcript (no \"trajectory\") nor a trajectory (no \"messages\" or \"agent\")")
	}
	var tr trajectory.Trajectory
	if err := json.Unmarshal(b, &tr); err != nil {
		return nil, err
	}
	t.Trajectory = &tr
	return &t, nil
}

// ReadTranscript reads and parses the transcript file at path, which is
// in transcripts/ of its run directory.
func ReadTranscript(path string) (*trajectory.Transcript, error) {
	dir := filepath.Dir(filepath.Dir(path))
	return readTranscript(dir, rundir.TranscriptsDir+"/"+filepath.Base(path))
}

// readTranscript reads and parses the transcript name of the run directory
// dir, at most rundir.MaxTranscript of it.
func readTranscript(dir, name string) (*trajectory.Transcript, error) {
	b, err := rundir.ReadTranscript(dir, name)
	if err != nil {
		return nil, err
	}
	t, err := ParseTranscript(b)
	if err != nil {
		return nil, fmt.Errorf("transcript %s: %w", filepath.Join(dir, name), err)
	}
	return t, nil
}

// ReadTrajectory reads the trajectory of a transcript file.
func ReadTrajectory(path string) (*trajectory.Trajectory, error) {
	t, err := ReadTranscript(path)
	if err != nil {
		return nil, err
	}
	return t.Trajectory, nil
}

// stopTooLarge is the stop reason of the stand-in ReadGroup gives for a
// transcript over rundir.MaxTranscript, which Skip tells apart.
const stopTooLarge = "proctor:transcript_too_large"

// Filter selects the groups and rollouts worth training on.
type Filter struct {
	// MinReward, when set, drops groups whose best reward is below it and,
	// in SFT, rollouts whose reward is below it.
	MinReward *float64
	// DropEqualScores drops groups whose rollouts all scored the same: they
	// carry no signal for group-relative methods (GRPO).
	DropEqualScores bool
	// MaxTokens, when positive, drops groups with a rollout of this many
	// tokens or more (by its token ids, or by the last turn's usage when no
	// ids were recorded), as Atropos drops a group with a sequence of
	// len >= max_token_len.
	MaxTokens int
}

// Why a rollout is left out: of every export (Skip), or of training data
// only (SkipTraining).
const (
	SkipInfraError   = "infra_error"   // the rollout never got a fair score
	SkipNoTranscript = "no_transcript" // no trajectory was recorded
	SkipNoModelTurn  = "no_model_turn" // oracle, nop: nothing the model wrote
	// SkipRewardError: a stacked reward plugin failed on the rollout, so
	// its reward was combined without that score and is not the reward
	// the run asked for. Training data only: ATIF still records it.
	SkipRewardError = "reward_error"
	// SkipTooLarge: the transcript is over rundir.MaxTranscript, more
	// than proctor reads of one.
	SkipTooLarge = "transcript_too_large"
)

// SkipTraining says why a rollout cannot be training data (an Atropos
// group's rollout, an SFT line), or "" when it can: Skip's reasons, and a
// stacked reward that failed (SkipRewardError).
func SkipTraining(rec rundir.Record, tr *trajectory.Trajectory) string {
	if why := Skip(rec, tr); why != "" {
		return why
	}
	for _, r := range rec.Rewards {
		if r.Error != "" {
			return SkipRewardError
		}
	}
	return ""
}

// Skip says why a rollout cannot be exported in any format, or "" when it
// can.
func Skip(rec rundir.Record, tr *trajectory.Trajectory) string {
	switch {
	case rec.Outcome == rundir.OutcomeInfraError:
		return SkipInfraError
	case tr == nil:
		return SkipNoTranscript
	case tr.StopReason == stopTooLarge:
		return SkipTooLarge
	}
	for _, m := range tr.Messages {
		if m.Role == "assistant" {
			return ""
		}
	}
	return SkipNoModelTurn
}

// toolSchemasJSON are the definitions of proctor's own tools (hermes-agent's,
// agent/hermes), one JSON object a line, as the llm agent offers them: a
// transcript names these tools (Trajectory.Tools) instead of repeating
// them. A copy, so that exporting needs nothing that runs tools;
// TestToolSchemasAreTheAgents keeps it equal to the agent's, byte for byte
// (go test ./host/rundir/export -run TestToolSchemasAreTheAgents -update).
//
//go:embed toolschemas.jsonl
var toolSchemasJSON []byte

// schemas are toolSchemasJSON by name.
var schemas = sync.OnceValue(func() map[string]trajectory.Schema {
	m := map[string]trajectory.Schema{}
	for _, line := range bytes.Split(bytes.TrimSpace(toolSchemasJSON), []byte("\n")) {
		var s trajectory.Schema
		if err := json.Unmarshal(line, &s); err != nil {
			panic(fmt.Sprintf("export: toolschemas.jsonl: %v", err)) // embedded: a build defect
		}
		m[s.Function.Name] = s
	}
	return m
})

// schemasOf are the tools a rollout's model was offered: the trajectory's
// own definitions, else those of proctor's tools it names.
func schemasOf(tr *trajectory.Trajectory) []trajectory.Schema {
	if len(tr.ToolSchemas) > 0 {
		return tr.ToolSchemas
	}
	return toolSchemas(tr.Tools)
}

// toolSchemas returns the definitions of the named tools that proctor
// knows, in the order named.
func toolSchemas(names []string) []trajectory.Schema {
	var out []trajectory.Schema
	for _, n := range names {
		if s, ok := schemas()[n]; ok {
			out = append(out, s)
		}
	}
	return out
}

// EachGroup reads the run directory dir and calls fn once per task with
// its rollouts (the records of every attempt, by attempt, and their
// trajectories; a nil trajectory when the record names no transcript).
// Tasks come in the order their first record was written; only one task's
// transcripts are in memory at a time.
func EachGroup(dir string, fn func(recs []rundir.Record, trajs []*trajectory.Trajectory) error) error {
	if _, err := os.Stat(filepath.Join(dir, rundir.ResultsFile)); err != nil {
		return fmt.Errorf("%s has no %s: give the directory a run wrote (runs/<name>)", dir, rundir.ResultsFile)
	}
	// Read, not Open: the run may still be writing, and Open would cut
	// the line being written.
	recs, err := rundir.Read(dir)
	if err != nil {
		return err
	}
	var order []string
	byTask := map[string][]rundir.Record{}
	for _, r := range recs {
		if _, ok := byTask[r.TaskID]; !ok {
			order = append(order, r.TaskID)
		}
		byTask[r.TaskID] = append(byTask[r.TaskID], r)
	}
	for _, id := range order {
		group := byTask[id]
		slices.SortStableFunc(group, func(a, b rundir.Record) int { return a.Attempt - b.Attempt })
		trajs, err := ReadGroup(dir, group)
		if err != nil {
			return err
		}
		if err := fn(group, trajs); err != nil {
			return err
		}
		delete(byTask, id)
	}
	return nil
}

// ReadGroup reads the trajectories of a group's records from the run
// directory dir, in the records' order (nil for a record without a
// transcript), a few at once: decoding JSON is most of an export's time.
// A transcript over rundir.MaxTranscript is left unread: its stand-in
// holds no message, and Skip says SkipTooLarge of it.
func ReadGroup(dir string, group []rundir.Record) ([]*trajectory.Trajectory, error) {
	trajs := make([]*trajectory.Trajectory, len(group))
	errs := make([]error, len(group))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, r := range group {
		if r.Transcript == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t, err := readTranscript(dir, r.Transcript)
			var big *rundir.TooLargeError
			switch {
			case errors.As(err, &big):
				trajs[i] = &trajectory.Trajectory{StopReason: stopTooLarge, Error: err.Error()}
			case err != nil:
				errs[i] = err
			default:
				trajs[i] = t.Trajectory
			}
			if errs[i] != nil {
				errs[i] = fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, errs[i])
			}
		}()
	}
	wg.Wait()
	return trajs, errors.Join(errs...)
}
