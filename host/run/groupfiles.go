package run

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
)

// GroupFiles is the GroupSink of proctor process: it appends each group
// to groups.jsonl (with exact tokens) or groups.messages.jsonl (without),
// its rollouts to sft.jsonl, syncs them, then records the group in
// process.jsonl with where the three files end. process.jsonl is the
// commit: a resume cuts the three files back to its last entry, so a
// group is never written twice nor lost.
type GroupFiles struct {
	filter export.Filter
	dir    string
	size   int

	groups   *os.File
	messages *os.File
	sft      *os.File
	index    *os.File
	written  map[string]indexEntry
}

var _ GroupSink = (*GroupFiles)(nil)

// NewGroupFiles writes the groups that pass filter.
func NewGroupFiles(filter export.Filter) *GroupFiles {
	return &GroupFiles{filter: filter, written: map[string]indexEntry{}}
}

// indexEntry is one line of process.jsonl: a task whose group is decided,
// and where groups.jsonl, groups.messages.jsonl and sft.jsonl ended after
// it.
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

// Open reads what an earlier invocation wrote and cuts torn tails: the
// three files back to where the last whole entry of process.jsonl says
// they ended.
func (w *GroupFiles) Open(dir string, size int) (map[string]bool, error) {
	w.dir, w.size = dir, size
	var err error
	if w.index, err = os.OpenFile(filepath.Join(dir, rundir.IndexFile), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, err
	}
	var last indexEntry
	good, err := readIndex(w.index, func(e indexEntry) {
		w.written[e.TaskID] = e
		last = e
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", w.index.Name(), err)
	}
	if err := cut(w.index, good); err != nil {
		return nil, err
	}
	if w.groups, err = openAt(filepath.Join(dir, rundir.GroupsFile), last.GroupsEnd); err != nil {
		return nil, err
	}
	if w.messages, err = openAt(filepath.Join(dir, rundir.MessagesFile), last.MessagesEnd); err != nil {
		return nil, err
	}
	if w.sft, err = openAt(filepath.Join(dir, rundir.SFTFile), last.SFTEnd); err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for id := range w.written {
		held[id] = true
	}
	return held, nil
}

// firstIndexEntry reads the first line of the process.jsonl of dir, if it
// is whole.
func firstIndexEntry(dir string) (indexEntry, bool) {
	var e indexEntry
	f, err := os.Open(filepath.Join(dir, rundir.IndexFile))
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
	br := bufio.NewReader(f)
	var good int64
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return good, nil // a torn last line (or none)
		}
		if err != nil {
			return 0, err
		}
		var e indexEntry
		if json.Unmarshal(line, &e) != nil {
			return good, nil
		}
		fn(e)
		good += int64(len(line))
	}
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

// Write builds the task's group from its records and transcripts, has
// export.Writer append it (to groups.jsonl with exact tokens, else to
// groups.messages.jsonl) and its SFT lines, syncs, then records the index
// entry.
func (w *GroupFiles) Write(taskID string, recs []rundir.Record) error {
	trajs, err := export.ReadGroup(w.dir, recs)
	if err != nil {
		return err
	}
	routed, err := export.Writer{Filter: w.filter, Groups: appendTo[export.ScoredDataGroup](w.groups),
		Messages: appendTo[export.MessagesGroup](w.messages), SFT: appendTo[export.SFTRecord](w.sft)}.Write(recs, trajs)
	if err != nil {
		return err
	}
	info := routed.Group
	e := indexEntry{TaskID: taskID, Rollouts: len(recs), GroupSize: w.size, Skipped: info.Skipped, SFTLines: routed.SFTLines,
		Kept: info.Kept, Dropped: info.Dropped, Tokens: info.Tokens, NoTokens: info.NoTokens, NoTokensClass: info.NoTokensClass}
	if err := w.commit(&e); err != nil {
		return err
	}
	w.written[taskID] = e
	return nil
}

// commit syncs the three files and appends e, with where they end, to
// process.jsonl, synced.
func (w *GroupFiles) commit(e *indexEntry) error {
	for _, f := range []*os.File{w.groups, w.messages, w.sft} {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	var err error
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
	return w.index.Sync()
}

// appendTo appends each value to f as a line of JSON.
func appendTo[T any](f *os.File) func(T) error {
	return func(v T) error { return appendJSON(f, v) }
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

// Close closes the files and sums up what was written, over every
// invocation of the run, for the manifest.
func (w *GroupFiles) Close() (*rundir.ProcessInfo, error) {
	info := &rundir.ProcessInfo{GroupSize: w.size, Dropped: map[string]int{}}
	for _, id := range slices.Sorted(maps.Keys(w.written)) {
		count(info, w.written[id])
	}
	switch {
	case info.MessagesGroups == 0 && info.Groups > 0:
		info.Tokens = "exact"
	case info.Groups == 0:
		info.Tokens = "none"
	default:
		info.Tokens = "partial"
	}
	for _, f := range []*os.File{w.groups, w.messages, w.sft, w.index} {
		if f != nil {
			f.Close()
		}
	}
	return info, nil
}

// count adds one task's entry to info.
func count(info *rundir.ProcessInfo, e indexEntry) {
	info.SFT += e.SFTLines
	for why, n := range e.Skipped {
		if info.Skipped == nil {
			info.Skipped = map[string]int{}
		}
		info.Skipped[why] += n
	}
	switch {
	case !e.Kept:
		info.Dropped[e.Dropped]++
	case e.Tokens:
		info.Groups++
	default:
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
