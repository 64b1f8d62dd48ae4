package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
)

// TestSummarizeGroups: a serve run's pass@k is per group (a task's
// attempts of one epoch), k up to the group size, whatever the epochs;
// SummarizeIn finds the group size in serve.jsonl; the text prints pass@k
// in k's order.
func TestSummarizeGroups(t *testing.T) {
	var recs []rundir.Record
	for a := range 24 { // 2 epochs of a group of 12: the first passes 6 of 12, the second none
		o := rundir.OutcomeFailed
		if a < 12 && a%2 == 0 {
			o = rundir.OutcomePassed
		}
		recs = append(recs, rundir.Record{TaskID: "t", Attempt: a, RolloutID: "t#" + string(rune('a'+a)), Outcome: o})
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, rundir.ServeIndexFile), []byte(`{"task_id":"","epoch":0,"state":"open","group_size":12,"scored_at":"2026-01-01T00:00:00Z"}`+"\n"), 0o644)
	s := SummarizeIn(dir, recs)
	if s.GroupSize != 12 || s.Groups != 2 || len(s.PassAtK) != 12 || s.PassAtK["pass@1"] != 0.25 || s.PassAtK["pass@12"] != 0.5 {
		t.Fatalf("group size %d, %d groups, pass@k %v", s.GroupSize, s.Groups, s.PassAtK)
	}
	if plain := SummarizeIn(t.TempDir(), recs); len(plain.PassAtK) != 24 || plain.GroupSize != 0 {
		t.Errorf("a run without serve.jsonl: %d pass@k, group size %d", len(plain.PassAtK), plain.GroupSize)
	}
	var buf bytes.Buffer
	Write(&buf, s, "text")
	out := buf.String()
	if !strings.Contains(out, "groups     2 of up to 12 rollouts") || strings.Index(out, "pass@2 ") > strings.Index(out, "pass@10 ") {
		t.Errorf("text:\n%s", out)
	}
}
