package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
)

// A group's states in serve.jsonl. The last line of a group is its state.
const (
	stateOpen     = "open"     // the first line: the run's group size, before any group
	stateSending  = "sending"  // about to be posted: the intent, before the POST
	stateSent     = "sent"     // the API acknowledged it
	stateDropped  = "dropped"  // never to be sent: a filter, or no exact tokens
	stateRejected = "rejected" // the API refused it (4xx): never sent again
)

// key names a group: one task's rollouts of one epoch, attempts
// epoch*group_size to (epoch+1)*group_size-1.
type key struct {
	task  string
	epoch int
}

func (k key) String() string { return fmt.Sprintf("%s@%d", k.task, k.epoch) }

// entry is one line of serve.jsonl.
type entry struct {
	TaskID    string `json:"task_id"`
	Epoch     int    `json:"epoch"`
	State     string `json:"state"`
	GroupSize int    `json:"group_size"` // [process] group_size: the resume guard
	// Post numbers the POST a sending or sent group went in (a list
	// posts several at once).
	Post     int            `json:"post,omitempty"`
	Rollouts int            `json:"rollouts,omitempty"`
	Scores   []float64      `json:"scores,omitempty"`
	Dropped  string         `json:"dropped,omitempty"` // why, for state dropped
	Reason   string         `json:"reason,omitempty"`  // the long why: no tokens, the API's refusal
	Skipped  map[string]int `json:"skipped,omitempty"` // rollouts left out of the group, by reason
	EnvID    *int           `json:"env_id,omitempty"`
	Endpoint string         `json:"endpoint,omitempty"`
	Ack      string         `json:"ack,omitempty"`
	Step     int            `json:"step,omitempty"` // the trainer's step when it was sent
	// ScoredAt is when the group's last rollout was recorded; SentAt
	// when the API acknowledged it.
	ScoredAt time.Time  `json:"scored_at"`
	SentAt   *time.Time `json:"sent_at,omitempty"`
}

func (e entry) key() key { return key{e.TaskID, e.Epoch} }

// index is serve.jsonl, the crash-safe record of every group decided:
// appended and synced line by line, its torn tail cut on open.
type index struct {
	mu    sync.Mutex
	f     *os.File
	last  map[key]entry // each group's last line
	posts int           // the highest post number
	first *entry        // the first line, for the group-size guard
}

// openIndex reads serve.jsonl of the run directory dir, cutting a torn
// last line.
func openIndex(dir string) (*index, error) {
	f, err := os.OpenFile(filepath.Join(dir, rundir.ServeIndexFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	x := &index{f: f, last: map[key]entry{}}
	err = readJSONL(f, func(b []byte) bool {
		var e entry
		if json.Unmarshal(b, &e) != nil || (e.TaskID == "") != (e.State == stateOpen) {
			return false
		}
		x.add(e)
		return true
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	return x, nil
}

func (x *index) add(e entry) {
	if x.first == nil {
		first := e
		x.first = &first
	}
	if e.State == stateOpen {
		return
	}
	x.last[e.key()] = e
	x.posts = max(x.posts, e.Post)
}

// append writes entries and syncs: when it returns nil they survive a
// crash.
func (x *index) append(es ...entry) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	var buf bytes.Buffer
	for _, e := range es {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	bw := bufio.NewWriter(x.f)
	bw.Write(buf.Bytes())
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", rundir.ServeIndexFile, err)
	}
	if err := x.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", rundir.ServeIndexFile, err)
	}
	for _, e := range es {
		x.add(e)
	}
	return nil
}

// decided reports whether a group has its final state: sent, dropped or
// rejected.
func (x *index) decided(k key) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.last[k]
	return ok && e.State != stateSending
}

// lastOf is a group's last line.
func (x *index) lastOf(k key) (entry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.last[k]
	return e, ok
}

// nextPost numbers a new POST.
func (x *index) nextPost() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.posts++
	return x.posts
}

// entries is each group's last line.
func (x *index) entries() []entry {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]entry, 0, len(x.last))
	for _, e := range x.last {
		out = append(out, e)
	}
	return out
}

func (x *index) close() error { return x.f.Close() }
