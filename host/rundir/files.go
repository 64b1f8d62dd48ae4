package rundir

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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
	AgentLogDir    = "agent-logs"
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
	ServeIndexFile = "serve.jsonl"      // one line per group decided: sent, dropped or refused
	ServeEnvsFile  = "serve-envs.jsonl" // one line per env_id the rollout API gave, and one when it is let go
	EvalsFile      = "evals.jsonl"      // one line per evaluation finished
	EvalsDir       = "evals"            // evals/step-N: each evaluation's own run directory
)

// TranscriptName is the file name of a rollout's transcript: the rollout
// id ("task#attempt") with its last '#' as '.', and every byte of the task
// id but letters, digits, '.', '_' and '-' written %XX, so two rollouts
// never share a file ("a/b" and "a_b" once did). A name that would be too
// long for a file system keeps its head and a hash of the whole id. Runs
// read the name their records hold, so older names stay readable.
func TranscriptName(rolloutID string, try int) string {
	task, attempt := rolloutID, ""
	if i := strings.LastIndexByte(rolloutID, '#'); i >= 0 {
		task, attempt = rolloutID[:i], "."+rolloutID[i+1:]
	}
	var b strings.Builder
	for i := 0; i < len(task); i++ {
		c := task[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	name := b.String()
	if len(name) > maxNameHead {
		sum := sha256.Sum256([]byte(task))
		name = name[:maxNameHead] + "~" + hex.EncodeToString(sum[:8])
	}
	return fmt.Sprintf("%s%s.try%d.json", name, attempt, try)
}

// maxNameHead keeps a transcript's name under 255 bytes, the most most file
// systems allow.
const maxNameHead = 180

// VerifierLogName names a rollout's verifier log under verifier/, as
// TranscriptName names its transcript.
func VerifierLogName(rolloutID string, try int) string {
	return strings.TrimSuffix(TranscriptName(rolloutID, try), ".json") + ".txt"
}

// AgentLogName is the file of a rollout's agent logs (a tar) in
// agent-logs/.
func AgentLogName(rolloutID string, try int) string {
	return strings.TrimSuffix(TranscriptName(rolloutID, try), ".json") + ".tar"
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

// MaxTranscript bounds what a reader of a run directory (report, export, a
// process run's resume) reads of one transcript: what a model wrote is
// untrusted, and one of its answers alone may be 32 MiB.
const MaxTranscript = 256 << 20

// TooLargeError is a transcript over MaxTranscript, left unread.
type TooLargeError struct {
	Path string
	Size int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("transcript %s is %d MiB, over the %d MiB proctor reads of one: read the file itself", e.Path, e.Size>>20, MaxTranscript>>20)
}

// OpenTranscript opens the transcript a record names (name, relative to
// the run directory dir), which must stay inside transcripts/, and returns
// it with its size; one over MaxTranscript is a *TooLargeError.
func OpenTranscript(dir, name string) (*os.File, int64, error) {
	if !filepath.IsLocal(name) || !strings.HasPrefix(filepath.ToSlash(filepath.Clean(name)), TranscriptsDir+"/") {
		return nil, 0, fmt.Errorf("transcript %q is outside %s/", name, TranscriptsDir)
	}
	path := filepath.Join(dir, filepath.FromSlash(name))
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("transcript %s is not a file", path)
	}
	if err == nil && fi.Size() > MaxTranscript {
		err = &TooLargeError{Path: path, Size: fi.Size()}
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// ReadTranscript reads the transcript a record names, as OpenTranscript
// opens it (bounded even if it grows meanwhile).
func ReadTranscript(dir, name string) ([]byte, error) {
	f, _, err := OpenTranscript(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTranscript+1))
	if err == nil && len(b) > MaxTranscript {
		err = &TooLargeError{Path: f.Name(), Size: int64(len(b))}
	}
	return b, err
}

// ServeGroupSize is the group size of the serve run in dir, from the first
// line of its serve.jsonl ({"state": "open", "group_size": N, ...}, written
// before any rollout); 0 when dir holds no serve run.
func ServeGroupSize(dir string) int {
	f, err := os.Open(filepath.Join(dir, ServeIndexFile))
	if err != nil {
		return 0
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 64<<10)).ReadBytes('\n')
	var first struct {
		GroupSize int `json:"group_size"`
	}
	if json.Unmarshal(line, &first) != nil || first.GroupSize < 0 {
		return 0
	}
	return first.GroupSize
}
