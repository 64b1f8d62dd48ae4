package export

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
)

// TestTranscriptOverTheCap: a transcript over rundir.MaxTranscript (a
// sparse file here, so no disk is used) is left unread: its rollout is
// skipped as transcript_too_large and the export goes on; one that names
// a file outside transcripts/ is refused.
func TestTranscriptOverTheCap(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, rundir.TranscriptsDir), 0o755)
	f, err := os.Create(filepath.Join(dir, rundir.TranscriptsDir, "big.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(rundir.MaxTranscript + 1)
	f.Close()
	recs := []rundir.Record{{TaskID: "a", RolloutID: "a#0", Outcome: rundir.OutcomePassed, Transcript: "transcripts/big.json"}}
	trajs, err := ReadGroup(dir, recs)
	if err != nil {
		t.Fatal(err)
	}
	if why := SkipTraining(recs[0], trajs[0]); why != SkipTooLarge || !strings.Contains(trajs[0].Error, "MiB, over the 256 MiB proctor reads of one") {
		t.Fatalf("skip %q, error %q", why, trajs[0].Error)
	}
	recs[0].Transcript = "transcripts/../../outside.json"
	if _, err := ReadGroup(dir, recs); err == nil || !strings.Contains(err.Error(), "is outside transcripts/") {
		t.Fatalf("a transcript outside the run: %v", err)
	}
}
