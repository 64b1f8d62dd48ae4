package rundir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File names inside a run directory.
const (
	ResultsFile    = "results.jsonl"
	SummaryFile    = "summary.json"
	ManifestFile   = "manifest.json"
	ConfigFile     = "config.toml"
	TranscriptsDir = "transcripts"
	VerifierLogDir = "verifier"
	ReportFile     = "report.html"
)

// Files a process run adds to its run directory.
const (
	GroupsFile   = "groups.jsonl"          // Atropos ScoredDataGroup lines: exact tokens only
	MessagesFile = "groups.messages.jsonl" // groups without exact tokens (export.MessagesGroup)
	SFTFile      = "sft.jsonl"             // chat lines for supervised fine-tuning
	IndexFile    = "process.jsonl"         // one line per task written, with the files' ends
)

// Files a serve run (proctor serve) adds to its run directory.
const (
	ServeIndexFile = "serve.jsonl" // one line per group decided: sent, dropped or refused
	EvalsFile      = "evals.jsonl" // one line per evaluation finished
	EvalsDir       = "evals"       // evals/step-N: each evaluation's own run directory
)

// TranscriptName is the file name of a rollout's transcript.
func TranscriptName(rolloutID string, try int) string {
	r := strings.NewReplacer("/", "_", "\\", "_", "#", ".", " ", "_", ":", "_")
	return fmt.Sprintf("%s.try%d.json", r.Replace(rolloutID), try)
}

// VerifierLogName names a rollout's verifier log under verifier/, as
// TranscriptName names its transcript.
func VerifierLogName(rolloutID string, try int) string {
	return strings.TrimSuffix(TranscriptName(rolloutID, try), ".json") + ".txt"
}

// WriteJSONAtomic writes v as indented JSON to path through a temporary
// file and a rename, so readers never see half a file.
func WriteJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return WriteFileAtomic(path, append(b, '\n'))
}

// WriteFileAtomic writes data to path through a temporary file, fsync and
// rename.
func WriteFileAtomic(path string, data []byte) error {
	f, err := CreateAtomic(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Commit()
}

// AtomicFile is a file written under a temporary name in its folder and
// put in place by Commit, so readers never see half of it and a failed
// write leaves nothing behind.
type AtomicFile struct {
	path string
	tmp  *os.File
}

// CreateAtomic starts writing path: Write to it, then Commit, or Abort.
// Abort after Commit does nothing, so it can be deferred.
func CreateAtomic(path string) (*AtomicFile, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &AtomicFile{path: path, tmp: tmp}, nil
}

// Write writes to the temporary file; it fails after Commit or Abort.
func (f *AtomicFile) Write(p []byte) (int, error) {
	if f.tmp == nil {
		return 0, os.ErrClosed
	}
	return f.tmp.Write(p)
}

// Commit syncs the file and renames it to its path, mode 0644; on error
// the temporary file is removed.
func (f *AtomicFile) Commit() error {
	tmp := f.tmp
	if tmp == nil {
		return fmt.Errorf("write %s: %w", f.path, os.ErrClosed)
	}
	f.tmp = nil
	// CreateTemp makes 0600; a run directory is read by others too, as
	// results.jsonl (0644) is.
	err := tmp.Chmod(0o644)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	return nil
}

// Abort removes the temporary file, unless Commit has run.
func (f *AtomicFile) Abort() {
	if f.tmp != nil {
		f.tmp.Close()
		os.Remove(f.tmp.Name())
		f.tmp = nil
	}
}
