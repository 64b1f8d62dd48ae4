// Package rundir is the run directory: what a run writes and what report,
// view and export read. results.jsonl holds one line per finished rollout,
// appended and fsynced; it is the source of truth, and everything else in
// the directory (manifest.json, summary.json, transcripts, report.html) is
// derived from it or written atomically. A run killed mid-write leaves at
// most a torn last line, which Open cuts off.
//
// Its subpackages read the directory: report (metrics, text, JSON,
// Markdown and HTML reports) and export (Atropos groups, SFT lines, ATIF).
package rundir

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/trajectory"
)

// Outcomes of a rollout.
const (
	OutcomePassed       = "passed"
	OutcomeFailed       = "failed"
	OutcomeAgentTimeout = "agent_timeout"
	OutcomeInfraError   = "infra_error"
	// OutcomeVerifierFailed is a verifier that ran and reached no reward
	// (its tests ran past their timeout, wrote no reward, or an empty or
	// unreadable one): reward 0, counted in every rate, exported with its
	// reward, never retried, as Harbor records such a trial.
	OutcomeVerifierFailed = "verifier_failed"
)

// Classes of infra_error.
const (
	ClassSandbox     = "sandbox"
	ClassPlugin      = "plugin"
	ClassSetup       = "setup"
	ClassVerifier    = "verifier"
	ClassDataset     = "dataset"
	ClassModel       = "model"
	ClassAgent       = "agent"
	ClassInterrupted = "interrupted"
	ClassInternal    = "internal"
)

// RewardScore is one stacked reward's verdict on a rollout. Error is set
// when the reward plugin failed; its score then counts for nothing. Usage
// is what the plugin's model.complete calls spent (a judge's tokens),
// apart from the agent's; nil when it made none.
type RewardScore struct {
	Name   string             `json:"name"`
	Weight float64            `json:"weight"`
	Reward float64            `json:"reward"`
	Scores map[string]float64 `json:"scores,omitempty"`
	Error  string             `json:"error,omitempty"`
	Usage  *trajectory.Usage  `json:"usage,omitempty"`
}

// Record is one line of results.jsonl: the final outcome of one identity
// (task, attempt).
type Record struct {
	RolloutID  string             `json:"rollout_id"`
	TaskID     string             `json:"task_id"`
	Attempt    int                `json:"attempt"`
	Try        int                `json:"try"`
	Category   string             `json:"category,omitempty"`
	Difficulty string             `json:"difficulty,omitempty"`
	Outcome    string             `json:"outcome"`
	ErrorClass string             `json:"error_class,omitempty"`
	Error      string             `json:"error,omitempty"`
	Reward     float64            `json:"reward"`
	Scores     map[string]float64 `json:"scores,omitempty"`
	// With stacked rewards, Reward is the combined reward, VerifierReward
	// the environment's own and Rewards each stacked one.
	VerifierReward *float64           `json:"verifier_reward,omitempty"`
	Rewards        []RewardScore      `json:"rewards,omitempty"`
	Tests          []abi.TestResult   `json:"tests,omitempty"`
	VerifierOutput string             `json:"verifier_output,omitempty"`
	Turns          int                `json:"turns"`
	Usage          trajectory.Usage   `json:"usage"`
	CostUSD        float64            `json:"cost_usd,omitempty"`
	Phases         map[string]float64 `json:"phases"`
	StartedAt      time.Time          `json:"started_at"`
	FinishedAt     time.Time          `json:"finished_at"`
	Seed           uint64             `json:"seed"`
	Image          string             `json:"image,omitempty"`
	ImageDigest    string             `json:"image_digest,omitempty"`
	Transcript     string             `json:"transcript,omitempty"`
	StopReason     string             `json:"stop_reason,omitempty"`

	// VerifierLog names the verifier's whole output in the run directory
	// (verifier/<rollout>.txt); RewardSource says where the reward came
	// from (tb2: the reward file).
	VerifierLog  string `json:"verifier_log,omitempty"`
	RewardSource string `json:"reward_source,omitempty"`
	// AgentLogs names the agent's own logs in the run directory
	// (agent-logs/<rollout>.tar): an installed agent's output, log files
	// and model gateway exchanges.
	AgentLogs string `json:"agent_logs,omitempty"`
	// Network is the network the sandbox had (none, default, host);
	// NetworkWithheld says why a task that asked for the internet did not
	// get it.
	Network         string `json:"network,omitempty"`
	NetworkWithheld string `json:"network_withheld,omitempty"`
}

// Duration is the rollout's wall time.
func (r Record) Duration() time.Duration { return r.FinishedAt.Sub(r.StartedAt) }

type key struct {
	task    string
	attempt int
}

// Store is an open run directory.
type Store struct {
	dir  string
	mu   sync.Mutex
	f    *os.File
	size int64
	recs []Record
	done map[key]bool
}

// Open opens (creating when needed) the run directory dir and reads the
// results recorded so far. A torn last line, left by a kill during a write,
// is cut off; any other unreadable line is an error naming its number.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, TranscriptsDir), 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	path := filepath.Join(dir, ResultsFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{dir: dir, f: f, done: map[key]bool{}}
	good, err := s.load(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if fi, err := f.Stat(); err == nil && fi.Size() != good {
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, fmt.Errorf("cut torn line of %s: %w", path, err)
		}
	}
	s.size = good
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// load reads complete lines and returns the offset after the last one.
func (s *Store) load(r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var off int64
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			// A last line without its newline was cut by a kill: drop it.
			return off, nil
		}
		if err != nil {
			return off, err
		}
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) > 0 {
			var rec Record
			if err := decodeRecord(trimmed, &rec); err != nil || rec.TaskID == "" {
				if _, perr := br.Peek(1); perr == io.EOF {
					return off, nil // torn last line that happened to end in \n
				}
				return off, fmt.Errorf("line %d is not a result record (%v): move the file away to start over, or fix the line", n, err)
			}
			k := key{rec.TaskID, rec.Attempt}
			if !s.done[k] {
				s.done[k] = true
				s.recs = append(s.recs, rec)
			}
		}
		off += int64(len(line))
	}
}

// Read returns the records of the run directory dir without opening it for
// writing, so a run still in progress can be read: a torn last line is left
// alone and ignored.
func Read(dir string) ([]Record, error) {
	path := filepath.Join(dir, ResultsFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &Store{done: map[key]bool{}}
	if _, err := s.load(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s.recs, nil
}

// Dir is the run directory.
func (s *Store) Dir() string { return s.dir }

// Done reports whether (task, attempt) already has a final record.
func (s *Store) Done(taskID string, attempt int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[key{taskID, attempt}]
}

// Records returns a copy of every record, in the order written.
func (s *Store) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.recs...)
}

// ErrDuplicate: the identity already has a record.
var ErrDuplicate = errors.New("rollout already recorded")

// Append writes rec as one line and fsyncs it. On a failed write (a full
// disk) the file is cut back so no partial line stays behind.
func (s *Store) Append(rec Record) error {
	// A number that is not finite is made so first: JSON has none, and the
	// record must not be lost for it.
	rec = rec.finiteCopy()
	b, err := jsonLine(rec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{rec.TaskID, rec.Attempt}
	if s.done[k] {
		return fmt.Errorf("%s: %w", rec.RolloutID, ErrDuplicate)
	}
	// Errors from the file already name it.
	if _, err := s.f.WriteAt(b, s.size); err != nil {
		s.f.Truncate(s.size)
		return err
	}
	if err := s.f.Sync(); err != nil {
		s.f.Truncate(s.size)
		return err
	}
	s.size += int64(len(b))
	s.done[k] = true
	s.recs = append(s.recs, rec)
	return nil
}

func jsonLine(rec Record) ([]byte, error) {
	b, err := json.Marshal(rec)
	return append(b, '\n'), err
}

// Close closes results.jsonl.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// WriteTranscript writes v as JSON under transcripts/, atomically.
func (s *Store) WriteTranscript(name string, v any) error {
	return WriteJSONAtomic(filepath.Join(s.dir, TranscriptsDir, name), v)
}

// WriteAgentLogs writes an agent's logs (a tar, read from r) under
// agent-logs/, atomically.
func (s *Store) WriteAgentLogs(name string, r io.Reader) error {
	dir := filepath.Join(s.dir, AgentLogDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := CreateAtomic(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// WriteVerifierLog writes a verifier's output under verifier/, atomically.
func (s *Store) WriteVerifierLog(name string, log string) error {
	dir := filepath.Join(s.dir, VerifierLogDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, name), []byte(log))
}
