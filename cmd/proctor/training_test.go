package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
)

// trainRollout is one rollout of a run directory written by trainRun.
type trainRollout struct {
	task    string
	attempt int
	reward  float64
	ids     bool // the transcript has token ids
	// breakAt, when positive, adds a second turn whose prompt ids differ
	// from the first turn's prompt and completion at that position.
	breakAt int
	rewards []rundir.RewardScore // stacked rewards
	outcome string               // default passed
}

// trainRun appends the rollouts' records and transcripts to the run
// directory dir, as a run leaves them, and returns the open store.
func trainRun(t *testing.T, dir string, rs ...trainRollout) *rundir.Store {
	t.Helper()
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, r := range rs {
		id := fmt.Sprintf("%s#%d", r.task, r.attempt)
		rec := rundir.Record{RolloutID: id, TaskID: r.task, Attempt: r.attempt, Outcome: r.outcome, Reward: r.reward, Rewards: r.rewards}
		if rec.Outcome == "" {
			rec.Outcome = rundir.OutcomePassed
		}
		name := rundir.TranscriptName(id, 0)
		tr := trainTrajectory(r.task, r.ids)
		if r.breakAt > 0 {
			prompt := []int{1, 2, 3, 4, 5, 6, 7}
			prompt[r.breakAt] = 99
			tr.Messages = append(tr.Messages, agent.Message{Role: "assistant", Content: "again"})
			tr.Turns = append(tr.Turns, agent.Turn{Index: 1, PromptTokenIDs: prompt, CompletionTokenIDs: []int{8}})
		}
		if err := store.WriteTranscript(name, agent.Transcript{RolloutID: id, TaskID: r.task, Prompt: "solve " + r.task, Trajectory: tr}); err != nil {
			t.Fatal(err)
		}
		rec.Transcript = "transcripts/" + name
		if err := store.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// trainTrajectory is a one-turn rollout of the task, with or without the
// token ids of its call.
func trainTrajectory(task string, ids bool) *agent.Trajectory {
	tr := &agent.Trajectory{Agent: "llm", Model: "m", StopReason: agent.StopDone,
		Messages: []agent.Message{{Role: "user", Content: "solve " + task}, {Role: "assistant", Content: "done"}},
		Turns:    []agent.Turn{{Index: 0, Usage: agent.Usage{PromptTokens: 3, CompletionTokens: 2}}}}
	if ids {
		tr.Turns[0].PromptTokenIDs, tr.Turns[0].CompletionTokenIDs = []int{1, 2, 3}, []int{4, 5}
	}
	return tr
}

// processFiles opens a group writer on dir as `proctor process` does at
// start (writing the groups of finished tasks), then finishes it.
func processFiles(t *testing.T, dir string, store *rundir.Store, size int) *rundir.ProcessInfo {
	t.Helper()
	w := newGroupWriter()
	w.size = size
	if err := w.open(dir, store, nil); err != nil {
		t.Fatal(err)
	}
	var man rundir.Manifest
	if err := w.finish(&man); err != nil {
		t.Fatal(err)
	}
	return man.Process
}

// TestProcessSkipsRewardErrors: a rollout on which a stacked reward
// plugin failed is neither in its group nor in sft.jsonl, and the
// manifest counts it.
func TestProcessSkipsRewardErrors(t *testing.T) {
	dir := t.TempDir()
	judge := []rundir.RewardScore{{Name: "judge", Weight: 1, Error: "reward plugin judge: trap"}}
	store := trainRun(t, dir,
		trainRollout{task: "a", attempt: 0, reward: 1, ids: true},
		trainRollout{task: "a", attempt: 1, reward: 0.5, ids: true, rewards: judge},
		trainRollout{task: "b", attempt: 0, reward: 0, ids: true, outcome: rundir.OutcomeInfraError},
		trainRollout{task: "b", attempt: 1, reward: 1, ids: true})
	info := processFiles(t, dir, store, 2)
	if info.Skipped[export.SkipRewardError] != 1 || info.Skipped[export.SkipInfraError] != 1 || info.SFT != 2 {
		t.Fatalf("manifest process: %+v", info)
	}
	for _, l := range lines(t, filepath.Join(dir, sftFile)) {
		var r export.SFTRecord
		json.Unmarshal([]byte(l), &r)
		if r.RolloutID == "a#1" {
			t.Errorf("sft.jsonl has the rollout whose reward plugin failed")
		}
	}
	for _, l := range lines(t, filepath.Join(dir, groupsFile)) {
		var g export.ScoredDataGroup
		json.Unmarshal([]byte(l), &g)
		if len(g.Scores) != 1 || g.Scores[0] != 1 {
			t.Errorf("group scores %v, want only the rollouts with a whole reward", g.Scores)
		}
	}
}

// TestProcessResumeCutsEveryFile: a kill after a task's lines were
// appended but before its index entry, with torn tails in every file, is
// resumed by cutting groups.jsonl, groups.messages.jsonl and sft.jsonl
// back to the last entry and writing those tasks again, once.
func TestProcessResumeCutsEveryFile(t *testing.T) {
	dir := t.TempDir()
	store := trainRun(t, dir,
		trainRollout{task: "a", attempt: 0, reward: 1, ids: true}, trainRollout{task: "a", attempt: 1, reward: 0, ids: true},
		trainRollout{task: "b", attempt: 0, reward: 1}, trainRollout{task: "b", attempt: 1, reward: 0},
		trainRollout{task: "c", attempt: 0, reward: 0, ids: true}, trainRollout{task: "c", attempt: 1, reward: 1, ids: true})
	info := processFiles(t, dir, store, 2)
	if info.Groups != 2 || info.MessagesGroups != 1 || info.SFT != 6 || info.Tokens != "partial" {
		t.Fatalf("manifest process: %+v", info)
	}
	files := []string{groupsFile, messagesFile, sftFile}
	want := map[string]string{}
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		want[f] = string(b)
	}
	if n := strings.Count(want[messagesFile], "\n"); n != 1 || strings.Contains(want[messagesFile], `"tokens"`) {
		t.Fatalf("%s: %d lines\n%s", messagesFile, n, want[messagesFile])
	}
	// groups.jsonl holds only valid ScoredDataGroups: tokens and masks for
	// every rollout.
	for _, l := range lines(t, filepath.Join(dir, groupsFile)) {
		var g export.ScoredDataGroup
		if err := json.Unmarshal([]byte(l), &g); err != nil || len(g.Scores) != 2 || len(g.Tokens) != 2 || len(g.Masks) != 2 {
			t.Fatalf("%s line without tokens or masks: %v %s", groupsFile, err, l)
		}
	}
	for _, kept := range []int{2, 1, 0} { // index entries left: after c, after b, after a
		idx := lines(t, filepath.Join(dir, indexFile))
		os.WriteFile(filepath.Join(dir, indexFile), []byte(strings.Join(idx[:kept], "\n")+strings.Repeat("\n", min(kept, 1))+`{"task_id":"x","gro`), 0o644)
		for _, f := range files {
			fh, _ := os.OpenFile(filepath.Join(dir, f), os.O_APPEND|os.O_WRONLY, 0)
			fh.WriteString(`{"torn":[1,2`)
			fh.Close()
		}
		info := processFiles(t, dir, store, 2)
		if info.Groups != 2 || info.MessagesGroups != 1 || info.SFT != 6 {
			t.Fatalf("%d entries kept: manifest process %+v", kept, info)
		}
		for _, f := range files {
			if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != want[f] {
				t.Fatalf("%d entries kept: %s after the resume:\n%s\nwant:\n%s", kept, f, b, want[f])
			}
		}
		if n := len(lines(t, filepath.Join(dir, indexFile))); n != 3 {
			t.Fatalf("%d entries kept: %d index entries after the resume", kept, n)
		}
	}
}

// TestExportAtroposSplitsMessagesOnly: `export --format atropos` writes
// only groups with exact tokens to its output; groups without them go to
// -o's .messages.jsonl sibling (or --messages), and standard output never
// mixes them in: stderr says how many were left out and how to get them.
func TestExportAtroposSplitsMessagesOnly(t *testing.T) {
	dir := t.TempDir()
	trainRun(t, dir,
		trainRollout{task: "a", attempt: 0, reward: 1, ids: true}, trainRollout{task: "a", attempt: 1, reward: 0, ids: true},
		trainRollout{task: "b", attempt: 0, reward: 1}, trainRollout{task: "b", attempt: 1, reward: 0, ids: true})
	valid := func(path string) {
		t.Helper()
		for _, l := range lines(t, path) {
			var g export.ScoredDataGroup
			if err := json.Unmarshal([]byte(l), &g); err != nil || len(g.Tokens) != 2 || len(g.Masks) != 2 || g.Messages[0][0].Content != "solve a" {
				t.Fatalf("%s: not the valid group of task a: %v %s", path, err, l)
			}
		}
	}
	messagesOnly := func(path string) {
		t.Helper()
		l := lines(t, path)
		if len(l) != 1 || strings.Contains(l[0], `"tokens"`) || strings.Contains(l[0], `"masks"`) || !strings.Contains(l[0], `"content":"solve b"`) {
			t.Fatalf("%s: want the messages-only group of task b, got %q", path, l)
		}
	}

	out := filepath.Join(t.TempDir(), "groups.jsonl")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"export", dir, "--format", "atropos", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	valid(out)
	messagesOnly(filepath.Join(filepath.Dir(out), "groups.messages.jsonl"))
	for _, f := range []string{out, filepath.Join(filepath.Dir(out), "groups.messages.jsonl")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644 as process writes", f, fi.Mode().Perm(), err)
		}
	}
	if !strings.Contains(stderr.String(), "1 of 2 groups written to "+out) || !strings.Contains(stderr.String(), "1 group without exact token ids written with messages only to "+filepath.Join(filepath.Dir(out), "groups.messages.jsonl")) {
		t.Errorf("stderr:\n%s", stderr.String())
	}

	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"export", dir, "--format", "atropos"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if l := strings.Split(strings.TrimSpace(stdout.String()), "\n"); len(l) != 1 || !strings.Contains(l[0], `"tokens":[[`) || !strings.Contains(l[0], "solve a") {
		t.Fatalf("standard output mixes in groups without tokens:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "1 group without exact token ids left out of standard output") || !strings.Contains(stderr.String(), "hint: --messages FILE writes them") {
		t.Errorf("stderr:\n%s", stderr.String())
	}

	msgs := filepath.Join(t.TempDir(), "rest.jsonl")
	stdout.Reset()
	if code := run([]string{"export", dir, "--format", "atropos", "--messages", msgs}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	messagesOnly(msgs)
}

// TestProcessNoTokensByClass: the manifest counts groups without exact
// tokens by class, with one full reason as an example, not one entry per
// rollout, turn and position.
func TestProcessNoTokensByClass(t *testing.T) {
	dir := t.TempDir()
	store := trainRun(t, dir,
		trainRollout{task: "a", attempt: 0, ids: true}, trainRollout{task: "a", attempt: 1, ids: true},
		trainRollout{task: "b", attempt: 0}, trainRollout{task: "b", attempt: 1},
		trainRollout{task: "c", attempt: 0, ids: true}, trainRollout{task: "c", attempt: 1},
		trainRollout{task: "d", attempt: 0, ids: true, breakAt: 1}, trainRollout{task: "d", attempt: 1, ids: true},
		trainRollout{task: "e", attempt: 0, ids: true}, trainRollout{task: "e", attempt: 1, ids: true, breakAt: 4})
	info := processFiles(t, dir, store, 2)
	got, _ := json.Marshal(info.NoTokens)
	want := `{"no_token_ids":{"groups":2,"example":"task b: no token ids recorded"},` +
		`"prefix_mismatch":{"groups":2,"example":"task d: rollout d#0: turn 1: its prompt token ids differ from the earlier turns' prompt and completion at token 1 (the chat template re-renders the history, for example without earlier reasoning): the turns are not one sequence"}}`
	if string(got) != want || info.Groups != 1 || info.MessagesGroups != 4 || info.Tokens != "partial" {
		t.Fatalf("manifest process: %+v\nno_tokens %s\nwant      %s", info, got, want)
	}
}

// TestProcessStopsOnWriteError: the first group that cannot be written
// stops the run at once (nothing after it would be kept), no later group
// is written, and finish reports the error.
func TestProcessStopsOnWriteError(t *testing.T) {
	dir := t.TempDir()
	recs := trainRun(t, dir,
		trainRollout{task: "a", attempt: 0, ids: true}, trainRollout{task: "a", attempt: 1, ids: true},
		trainRollout{task: "b", attempt: 0, ids: true}, trainRollout{task: "b", attempt: 1, ids: true}).Records()
	empty, err := rundir.Open(t.TempDir()) // the writer starts with nothing pending
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	w := newGroupWriter()
	w.size = 2
	stops := 0
	if err := w.open(dir, empty, func() { stops++ }); err != nil {
		t.Fatal(err)
	}
	w.groups.Close() // the disk goes away
	for _, r := range recs {
		w.record(r)
	}
	if stops != 1 {
		t.Fatalf("stop called %d times, want once", stops)
	}
	if n := countLines(filepath.Join(dir, indexFile)); n != 0 {
		t.Errorf("%d groups recorded after the write error", n)
	}
	var man rundir.Manifest
	if err := w.finish(&man); err == nil || !strings.Contains(err.Error(), "write training groups") {
		t.Fatalf("finish: %v", err)
	}
}

// TestRunStopsWhenAHookStops: a hook's stop ends eval's run at once (the
// rollouts not yet recorded are left for a resume) and the run fails with
// the hook's error, not as interrupted.
func TestRunStopsWhenAHookStops(t *testing.T) {
	var tasks []string
	for i := range 6 {
		tasks = append(tasks, fmt.Sprintf(`{id = "t%d", text = "x"}`, i))
	}
	cfg := localRun(t, filepath.Join(t.TempDir(), "run.toml"), wasmtest.Build(t, "./plugins/example"), "concurrency = 1", "nop", strings.Join(tasks, ", "))
	out := filepath.Join(t.TempDir(), "run")
	var stop func()
	hooks := &runHooks{
		start:  func(_ string, _ *rundir.Store, s func()) error { stop = s; return nil },
		record: func(rundir.Record) { stop() },
		finish: func(*rundir.Manifest) error { return errors.New("write training groups: groups.jsonl: disk on fire") },
	}
	var stdout, stderr bytes.Buffer
	err := evalCmd{Config: cfg, Out: out}.execute(&globals{stdout: &stdout, stderr: &stderr, ctx: context.Background()}, hooks)
	if exitCode(err) != exitInfra || !strings.Contains(fmt.Sprint(err), "disk on fire") {
		t.Fatalf("exit %d: %v\n%s", exitCode(err), err, stderr.String())
	}
	recs, rerr := rundir.Read(out)
	if rerr != nil || len(recs) != 1 {
		t.Fatalf("%d rollouts recorded (%v), want 1: the run went on after stop", len(recs), rerr)
	}
}
