package run

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
	"github.com/proctor-dev/proctor/host/rundir/rundirtest"
)

// processFiles opens the training files on dir as a process run does at
// start (writing the groups of finished tasks), then finishes them.
func processFiles(t *testing.T, dir string, store *rundir.Store, size int) *rundir.ProcessInfo {
	t.Helper()
	g := &grouper{sink: NewGroupFiles(export.Filter{}), size: size}
	if err := g.open(dir, store.Records()); err != nil {
		t.Fatal(err)
	}
	g.start(nil, 1)
	info, err := g.finish()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// lines is the lines of the file at path; none for an empty or missing
// file.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// TestProcessSkipsRewardErrors: a rollout on which a stacked reward
// plugin failed is neither in its group nor in sft.jsonl, and the
// manifest counts it.
func TestProcessSkipsRewardErrors(t *testing.T) {
	dir := t.TempDir()
	judge := []rundir.RewardScore{{Name: "judge", Weight: 1, Error: "reward plugin judge: trap"}}
	store := rundirtest.Write(t, dir,
		rundirtest.Rollout{Task: "a", Attempt: 0, Reward: 1, IDs: true},
		rundirtest.Rollout{Task: "a", Attempt: 1, Reward: 0.5, IDs: true, Rewards: judge},
		rundirtest.Rollout{Task: "b", Attempt: 0, Reward: 0, IDs: true, Outcome: rundir.OutcomeInfraError},
		rundirtest.Rollout{Task: "b", Attempt: 1, Reward: 1, IDs: true})
	info := processFiles(t, dir, store, 2)
	if info.Skipped[export.SkipRewardError] != 1 || info.Skipped[export.SkipInfraError] != 1 || info.SFT != 2 {
		t.Fatalf("manifest process: %+v", info)
	}
	for _, l := range lines(t, filepath.Join(dir, rundir.SFTFile)) {
		var r export.SFTRecord
		json.Unmarshal([]byte(l), &r)
		if r.RolloutID == "a#1" {
			t.Errorf("sft.jsonl has the rollout whose reward plugin failed")
		}
	}
	for _, l := range lines(t, filepath.Join(dir, rundir.GroupsFile)) {
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
	store := rundirtest.Write(t, dir,
		rundirtest.Rollout{Task: "a", Attempt: 0, Reward: 1, IDs: true}, rundirtest.Rollout{Task: "a", Attempt: 1, Reward: 0, IDs: true},
		rundirtest.Rollout{Task: "b", Attempt: 0, Reward: 1}, rundirtest.Rollout{Task: "b", Attempt: 1, Reward: 0},
		rundirtest.Rollout{Task: "c", Attempt: 0, Reward: 0, IDs: true}, rundirtest.Rollout{Task: "c", Attempt: 1, Reward: 1, IDs: true})
	info := processFiles(t, dir, store, 2)
	if info.Groups != 2 || info.MessagesGroups != 1 || info.SFT != 6 || info.Tokens != "partial" {
		t.Fatalf("manifest process: %+v", info)
	}
	files := []string{rundir.GroupsFile, rundir.MessagesFile, rundir.SFTFile}
	want := map[string]string{}
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		want[f] = string(b)
	}
	if n := strings.Count(want[rundir.MessagesFile], "\n"); n != 1 || strings.Contains(want[rundir.MessagesFile], `"tokens"`) {
		t.Fatalf("%s: %d lines\n%s", rundir.MessagesFile, n, want[rundir.MessagesFile])
	}
	// groups.jsonl holds only valid ScoredDataGroups: tokens and masks for
	// every rollout.
	for _, l := range lines(t, filepath.Join(dir, rundir.GroupsFile)) {
		var g export.ScoredDataGroup
		if err := json.Unmarshal([]byte(l), &g); err != nil || len(g.Scores) != 2 || len(g.Tokens) != 2 || len(g.Masks) != 2 {
			t.Fatalf("%s line without tokens or masks: %v %s", rundir.GroupsFile, err, l)
		}
	}
	for _, kept := range []int{2, 1, 0} { // index entries left: after c, after b, after a
		idx := lines(t, filepath.Join(dir, rundir.IndexFile))
		os.WriteFile(filepath.Join(dir, rundir.IndexFile), []byte(strings.Join(idx[:kept], "\n")+strings.Repeat("\n", min(kept, 1))+`{"task_id":"x","gro`), 0o644)
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
		if n := len(lines(t, filepath.Join(dir, rundir.IndexFile))); n != 3 {
			t.Fatalf("%d entries kept: %d index entries after the resume", kept, n)
		}
	}
}

// TestProcessNoTokensByClass: the manifest counts groups without exact
// tokens by class, with one full reason as an example, not one entry per
// rollout, turn and position.
func TestProcessNoTokensByClass(t *testing.T) {
	dir := t.TempDir()
	store := rundirtest.Write(t, dir,
		rundirtest.Rollout{Task: "a", Attempt: 0, IDs: true}, rundirtest.Rollout{Task: "a", Attempt: 1, IDs: true},
		rundirtest.Rollout{Task: "b", Attempt: 0}, rundirtest.Rollout{Task: "b", Attempt: 1},
		rundirtest.Rollout{Task: "c", Attempt: 0, IDs: true}, rundirtest.Rollout{Task: "c", Attempt: 1},
		rundirtest.Rollout{Task: "d", Attempt: 0, IDs: true, BreakAt: 1}, rundirtest.Rollout{Task: "d", Attempt: 1, IDs: true},
		rundirtest.Rollout{Task: "e", Attempt: 0, IDs: true}, rundirtest.Rollout{Task: "e", Attempt: 1, IDs: true, BreakAt: 4})
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
	recs := rundirtest.Write(t, dir,
		rundirtest.Rollout{Task: "a", Attempt: 0, IDs: true}, rundirtest.Rollout{Task: "a", Attempt: 1, IDs: true},
		rundirtest.Rollout{Task: "b", Attempt: 0, IDs: true}, rundirtest.Rollout{Task: "b", Attempt: 1, IDs: true}).Records()
	files := NewGroupFiles(export.Filter{})
	g := &grouper{sink: files, size: 2}
	if err := g.open(dir, nil); err != nil { // nothing pending at the start
		t.Fatal(err)
	}
	var stops atomic.Int32
	g.start(func() { stops.Add(1) }, 1)
	files.groups.Close() // the disk goes away
	for _, r := range recs {
		g.add(r)
	}
	_, err := g.finish()
	if err == nil || !strings.Contains(err.Error(), "write training groups") {
		t.Fatalf("finish: %v", err)
	}
	if n := stops.Load(); n != 1 {
		t.Fatalf("stop called %d times, want once", n)
	}
	if n := len(lines(t, filepath.Join(dir, rundir.IndexFile))); n != 0 {
		t.Errorf("%d groups recorded after the write error", n)
	}
}

// FuzzReadIndex: a torn or garbled process.jsonl never yields an offset
// past a whole line.
func FuzzReadIndex(f *testing.F) {
	f.Add([]byte(`{"task_id":"a","groups_end":10,"sft_end":20}` + "\n" + `{"task_id":"b","gro`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "i")
		os.WriteFile(p, b, 0o644)
		fh, _ := os.Open(p)
		defer fh.Close()
		n := 0
		good, err := readIndex(fh, func(indexEntry) { n++ })
		if err != nil || good > int64(len(b)) || good > 0 && b[good-1] != '\n' || strings.Count(string(b[:good]), "\n") != n {
			t.Fatalf("good %d, %d entries, err %v", good, n, err)
		}
	})
}
