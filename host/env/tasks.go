package env

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/proctor-dev/proctor/internal/clip"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// maxSkippedKept is how many skipped tasks a run lists one by one (each is
// a warning and a line of the manifest); the rest are counted in one entry.
const maxSkippedKept = 1000

// tasksAnswer is a tasks.load answer, decoded without holding more than a
// run takes.
type tasksAnswer struct {
	Tasks   []abi.Task
	Skipped []abi.Skipped
	more    int // skipped tasks past maxSkippedKept
}

// decodeTasks decodes a TasksResponse one task at a time, refusing a list
// of more than abi.MaxTasks before it is held whole.
func decodeTasks(b []byte) (*tasksAnswer, error) {
	var raw struct {
		Tasks   json.RawMessage `json:"tasks"`
		Skipped json.RawMessage `json:"skipped"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("hook output is not the expected JSON: %v", err)
	}
	a := &tasksAnswer{}
	err := eachElement(raw.Tasks, func(dec *json.Decoder) error {
		if len(a.Tasks) == abi.MaxTasks {
			return fmt.Errorf("the plugin lists over %d tasks, the most a run takes (abi.MaxTasks): select fewer in [env.config]", abi.MaxTasks)
		}
		var t abi.Task
		if err := dec.Decode(&t); err != nil {
			return fmt.Errorf("task %d is not a task: %v", len(a.Tasks), err)
		}
		a.Tasks = append(a.Tasks, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = eachElement(raw.Skipped, func(dec *json.Decoder) error {
		var s abi.Skipped
		if err := dec.Decode(&s); err != nil {
			return fmt.Errorf("skipped task %d is not a skipped task: %v", len(a.Skipped)+a.more, err)
		}
		a.skip(s)
		return nil
	})
	return a, err
}

// eachElement calls f with a decoder at each element of the JSON array b
// (null or absent: none).
func eachElement(b json.RawMessage, f func(*json.Decoder) error) error {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return errors.New("hook output is not the expected JSON: want an array")
	}
	for dec.More() {
		if err := f(dec); err != nil {
			return err
		}
	}
	return nil
}

// skip lists s, or counts it past maxSkippedKept.
func (a *tasksAnswer) skip(s abi.Skipped) {
	if len(a.Skipped) == maxSkippedKept {
		a.more++
		return
	}
	s.ID, s.Reason = clip.Text(s.ID, abi.MaxTaskField), clip.Text(s.Reason, abi.MaxErrorText)
	a.Skipped = append(a.Skipped, s)
}

// skipped lists the skipped tasks, the ones past maxSkippedKept as one.
func (a *tasksAnswer) skipped() []abi.Skipped {
	if a.more == 0 {
		return a.Skipped
	}
	return append(a.Skipped, abi.Skipped{ID: fmt.Sprintf("(%d more)", a.more),
		Reason: fmt.Sprintf("%d more tasks were skipped; a run lists the first %d", a.more, maxSkippedKept)})
}

// taskOverBounds says which of the host's bounds the task is over ("" for
// none): its id, category, difficulty or tags.
func taskOverBounds(t abi.Task) string {
	for _, f := range []struct{ what, s string }{{"id", t.ID}, {"category", t.Category}, {"difficulty", t.Difficulty}} {
		if len(f.s) > abi.MaxTaskField {
			return fmt.Sprintf("the task's %s is %d bytes, over the %d it may be (abi.MaxTaskField)", f.what, len(f.s), abi.MaxTaskField)
		}
	}
	if len(t.Tags) > abi.MaxTags {
		return fmt.Sprintf("the task has %d tags, over the %d it may have (abi.MaxTags)", len(t.Tags), abi.MaxTags)
	}
	for _, tag := range t.Tags {
		if len(tag) > abi.MaxTaskField {
			return fmt.Sprintf("a tag of the task is %d bytes, over the %d it may be (abi.MaxTaskField)", len(tag), abi.MaxTaskField)
		}
	}
	return ""
}
