package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"

	"github.com/proctor-dev/proctor/host/fault"
)

// Files a process run adds to its run directory.
const (
	groupsFile   = "groups.jsonl"          // Atropos ScoredDataGroup lines: exact tokens only
	messagesFile = "groups.messages.jsonl" // groups without exact tokens (export.MessagesGroup)
	sftFile      = "sft.jsonl"             // chat lines for supervised fine-tuning
	indexFile    = "process.jsonl"         // one line per task written, with the files' ends
)

type processCmd struct {
	Config string   `arg:"" help:"Run configuration (TOML); [process] sets group_size and the filters." type:"path"`
	Set    []string `help:"Override a config key: --set section.key=value (repeatable)." placeholder:"KEY=VALUE" sep:"none"`
	Out    string   `help:"Run directory (default: <run.out_dir>/<run.name>)."`
}

// indexEntry is one line of process.jsonl: a task whose group is decided,
// and where groups.jsonl, groups.messages.jsonl and sft.jsonl ended after
// it. A resume cuts the three files back to the last entry, so a group is
// never written twice nor lost.
type indexEntry struct {
	TaskID      string `json:"task_id"`
	GroupsEnd   int64  `json:"groups_end"`
	MessagesEnd int64  `json:"messages_end"`
	SFTEnd      int64  `json:"sft_end"`
	SFTLines    int    `json:"sft_lines"`
	Kept        bool   `json:"kept"`
	Dropped     string `json:"dropped,omitempty"`
	Tokens      bool   `json:"tokens"`
	NoTokens    string `json:"no_tokens,omitempty"`
	// NoTokensClass is NoTokens' class (export.NoTokensClass).
	NoTokensClass string         `json:"no_tokens_class,omitempty"`
	Rollouts      int            `json:"rollouts"`
	GroupSize     int            `json:"group_size,omitempty"` // [process] group_size when written
	Skipped       map[string]int `json:"skipped,omitempty"`    // the task's rollouts left out, by reason
}

// groupWriter appends a task's group as soon as its last attempt lands.
type groupWriter struct {
	dir    string
	size   int
	filter export.Filter

	mu       sync.Mutex
	groups   *os.File
	messages *os.File
	sft      *os.File
	index    *os.File
	written  map[string]indexEntry
	pending  map[string][]rundir.Record // records of tasks not yet written
	err      error                      // the first write error: nothing is written after it
	stop     func()                     // ends the run, set by open
}

func newGroupWriter() *groupWriter {
	return &groupWriter{written: map[string]indexEntry{}, pending: map[string][]rundir.Record{}}
}

func (p processCmd) Run(g *globals) error {
	w := newGroupWriter()
	hooks := &runHooks{
		config: func(c *config.Config, dir string, prior rundir.Manifest) error {
			// Before anything is written: a resume with another group
			// size would write groups of the wrong size or drop the
			// new rollouts.
			if n, where := recordedGroupSize(dir, prior, c.Process.GroupSize); n != 0 {
				return &fault.Usage{
					Err:  fmt.Errorf("process.group_size is %d, but the run in %s was made with group_size %d (%s)", c.Process.GroupSize, dir, n, where),
					Hint: fmt.Sprintf("resume it with --set process.group_size=%d, or give this group size a new run directory with --out", n),
				}
			}
			c.Run.Attempts = c.Process.GroupSize
			w.size = c.Process.GroupSize
			w.filter = export.Filter{MinReward: c.Process.MinReward, DropEqualScores: c.Process.DropEqualScores, MaxTokens: c.Process.MaxTokens}
			return nil
		},
		start:  w.open,
		record: w.record,
		finish: w.finish,
	}
	return evalCmd{Config: p.Config, Set: p.Set, Out: p.Out}.execute(g, hooks)
}

// open reads what an earlier invocation wrote, cuts torn tails, and writes
// the groups of tasks that finished in results.jsonl but never made it to
// the files (a kill between the two).
func (w *groupWriter) open(dir string, store *rundir.Store, stop func()) error {
	w.dir, w.stop = dir, stop
	var err error
	if w.index, err = os.OpenFile(filepath.Join(dir, indexFile), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return &fault.Infra{Err: err}
	}
	var last indexEntry
	good, err := readIndex(w.index, func(e indexEntry) {
		w.written[e.TaskID] = e
		last = e
	})
	if err != nil {
		return &fault.Infra{Err: fmt.Errorf("%s: %w", w.index.Name(), err)}
	}
	if err := cut(w.index, good); err != nil {
		return &fault.Infra{Err: err}
	}
	if w.groups, err = openAt(filepath.Join(dir, groupsFile), last.GroupsEnd); err != nil {
		return &fault.Infra{Err: err}
	}
	if w.messages, err = openAt(filepath.Join(dir, messagesFile), last.MessagesEnd); err != nil {
		return &fault.Infra{Err: err}
	}
	if w.sft, err = openAt(filepath.Join(dir, sftFile), last.SFTEnd); err != nil {
		return &fault.Infra{Err: err}
	}
	for _, r := range store.Records() {
		if _, done := w.written[r.TaskID]; !done {
			w.pending[r.TaskID] = append(w.pending[r.TaskID], r)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.pending)) {
		if len(w.pending[id]) >= w.size {
			if err := w.writeLocked(id); err != nil {
				return &fault.Infra{Err: err}
			}
		}
	}
	return nil
}

// recordedGroupSize returns the group size the process run in dir was
// made with when it differs from size, and where that is recorded; 0 when
// it is the same or unknown (a new directory). It reads the group_size of
// the first whole entry of process.jsonl, else the process section of
// man, the run's manifest, else whether results.jsonl holds an attempt
// beyond size (a larger group size whose first group was never written).
func recordedGroupSize(dir string, man rundir.Manifest, size int) (int, string) {
	if e, ok := firstIndexEntry(filepath.Join(dir, indexFile)); ok {
		if e.GroupSize != size {
			return e.GroupSize, indexFile
		}
		return 0, ""
	}
	if p := man.Process; p != nil && p.GroupSize > 0 {
		if p.GroupSize != size {
			return p.GroupSize, rundir.ManifestFile
		}
		return 0, ""
	}
	recs, err := rundir.Read(dir)
	if err != nil {
		return 0, "" // none yet; or Open reports it with its own message
	}
	top := -1
	for _, r := range recs {
		top = max(top, r.Attempt)
	}
	if top >= size {
		return top + 1, fmt.Sprintf("%s holds attempt %d", rundir.ResultsFile, top)
	}
	return 0, ""
}

// firstIndexEntry reads the first line of process.jsonl, if it is whole.
func firstIndexEntry(path string) (indexEntry, bool) {
	var e indexEntry
	f, err := os.Open(path)
	if err != nil {
		return e, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &e) != nil {
		return indexEntry{}, false
	}
	return e, true
}

// readIndex calls fn for every whole line and returns the offset after the
// last one (a torn last line is not counted).
func readIndex(f *os.File, fn func(indexEntry)) (int64, error) {
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, err
	}
	var good int64
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		var e indexEntry
		if json.Unmarshal(b[:i], &e) != nil {
			break
		}
		fn(e)
		good += int64(i + 1)
		b = b[i+1:]
	}
	return good, nil
}

func cut(f *os.File, n int64) error {
	if err := f.Truncate(n); err != nil {
		return err
	}
	_, err := f.Seek(n, io.SeekStart)
	return err
}

// openAt opens name for appending after cutting it to n bytes.
func openAt(name string, n int64) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := cut(f, n); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (w *groupWriter) record(rec rundir.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, done := w.written[rec.TaskID]; done || w.err != nil {
		return
	}
	w.pending[rec.TaskID] = append(w.pending[rec.TaskID], rec)
	if len(w.pending[rec.TaskID]) < w.size {
		return
	}
	if err := w.writeLocked(rec.TaskID); err != nil {
		// Every rollout from here on would be run for nothing: stop the
		// run now, finish reports the error.
		w.err = err
		if w.stop != nil {
			w.stop()
		}
	}
}

// writeLocked builds the task's group from its stored records and
// transcripts, appends it (to groups.jsonl with exact tokens, else to
// groups.messages.jsonl) and its SFT lines, syncs, then records the index
// entry.
func (w *groupWriter) writeLocked(taskID string) error {
	recs := w.pending[taskID]
	slices.SortFunc(recs, func(a, b rundir.Record) int { return a.Attempt - b.Attempt })
	trajs, err := export.ReadGroup(w.dir, recs)
	if err != nil {
		return err
	}
	group, info, err := export.Group(recs, trajs, w.filter)
	if err != nil {
		return err
	}
	e := indexEntry{TaskID: taskID, Rollouts: len(recs), GroupSize: w.size, Skipped: info.Skipped,
		Kept: info.Kept, Dropped: info.Dropped, Tokens: info.Tokens, NoTokens: info.NoTokens, NoTokensClass: info.NoTokensClass}
	switch {
	case info.Kept && info.Tokens:
		err = appendJSON(w.groups, group)
	case info.Kept:
		err = appendJSON(w.messages, group.MessagesOnly())
	}
	if err != nil {
		return err
	}
	for i, r := range recs {
		if line, ok := export.SFT(r, trajs[i], w.filter); ok {
			if err := appendJSON(w.sft, line); err != nil {
				return err
			}
			e.SFTLines++
		}
	}
	for _, f := range []*os.File{w.groups, w.messages, w.sft} {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if e.GroupsEnd, err = w.groups.Seek(0, io.SeekCurrent); err != nil {
		return err
	}
	if e.MessagesEnd, err = w.messages.Seek(0, io.SeekCurrent); err != nil {
		return err
	}
	if e.SFTEnd, err = w.sft.Seek(0, io.SeekCurrent); err != nil {
		return err
	}
	if err := appendJSON(w.index, e); err != nil {
		return err
	}
	if err := w.index.Sync(); err != nil {
		return err
	}
	w.written[taskID] = e
	delete(w.pending, taskID)
	return nil
}

func appendJSON(f *os.File, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	bw.Write(b)
	bw.WriteByte('\n')
	return bw.Flush()
}

// finish closes the files and sums up what was written for the manifest.
func (w *groupWriter) finish(man *rundir.Manifest) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	info := &rundir.ProcessInfo{GroupSize: w.size, Dropped: map[string]int{}}
	for _, id := range slices.Sorted(maps.Keys(w.written)) {
		e := w.written[id]
		info.SFT += e.SFTLines
		for why, n := range e.Skipped {
			if info.Skipped == nil {
				info.Skipped = map[string]int{}
			}
			info.Skipped[why] += n
		}
		if !e.Kept {
			info.Dropped[e.Dropped]++
			continue
		}
		if e.Tokens {
			info.Groups++
		} else {
			info.MessagesGroups++
			if info.NoTokens == nil {
				info.NoTokens = map[string]rundir.NoTokensCount{}
			}
			c := info.NoTokens[e.NoTokensClass]
			if c.Groups == 0 {
				c.Example = fmt.Sprintf("task %s: %s", e.TaskID, e.NoTokens)
			}
			c.Groups++
			info.NoTokens[e.NoTokensClass] = c
		}
	}
	switch {
	case info.MessagesGroups == 0 && info.Groups > 0:
		info.Tokens = "exact"
	case info.Groups == 0:
		info.Tokens = "none"
	default:
		info.Tokens = "partial"
	}
	man.Process = info
	for _, f := range []*os.File{w.groups, w.messages, w.sft, w.index} {
		if f != nil {
			f.Close()
		}
	}
	if w.err != nil {
		return fmt.Errorf("write training groups: %w", w.err)
	}
	return nil
}
