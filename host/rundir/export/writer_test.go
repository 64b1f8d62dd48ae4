package export

import (
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/rundirtest"
	"github.com/proctor-dev/proctor/trajectory"
)

// collect is a Writer whose destinations keep what they are given.
type collect struct {
	groups   []ScoredDataGroup
	messages []MessagesGroup
	sft      []SFTRecord
}

func (c *collect) writer(f Filter, messages bool) Writer {
	w := Writer{Filter: f,
		Groups: func(g ScoredDataGroup) error { c.groups = append(c.groups, g); return nil },
		SFT:    func(l SFTRecord) error { c.sft = append(c.sft, l); return nil }}
	if messages {
		w.Messages = func(g MessagesGroup) error { c.messages = append(c.messages, g); return nil }
	}
	return w
}

// TestWriterRoutes: a group with exact token ids goes to Groups, one
// without to Messages (or nowhere when there is none, counted), and each
// rollout that can be training data gives an SFT line; the rest are
// counted by reason.
func TestWriterRoutes(t *testing.T) {
	dir := t.TempDir()
	rundirtest.Write(t, dir,
		rundirtest.Rollout{Task: "tok", Reward: 1, IDs: true}, rundirtest.Rollout{Task: "tok", Attempt: 1, IDs: true},
		rundirtest.Rollout{Task: "msg", Reward: 1}, rundirtest.Rollout{Task: "msg", Attempt: 1, Outcome: rundir.OutcomeInfraError})
	for _, messages := range []bool{true, false} {
		var c collect
		var routed []Routed
		w := c.writer(Filter{}, messages)
		err := EachGroup(dir, func(recs []rundir.Record, trajs []*trajectory.Trajectory) error {
			r, err := w.Write(recs, trajs)
			routed = append(routed, r)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.groups) != 1 || c.groups[0].Tokens == nil || !routed[0].Group.Tokens {
			t.Errorf("messages %v: %d groups with tokens, want the task tok's", messages, len(c.groups))
		}
		if want := map[bool]int{true: 1, false: 0}[messages]; len(c.messages) != want || routed[1].Group.Tokens || !routed[1].Group.Kept {
			t.Errorf("messages %v: %d messages-only groups, want %d (task msg: %+v)", messages, len(c.messages), want, routed[1].Group)
		}
		if len(c.sft) != 3 || routed[0].SFTLines != 2 || routed[1].SFTLines != 1 || routed[1].SFTSkipped[SkipInfraError] != 1 {
			t.Errorf("messages %v: %d SFT lines (%+v)", messages, len(c.sft), routed)
		}
	}
}

// TestWriterSFTOnly: without Groups no group is built; rollouts below
// the minimum reward are counted, not written.
func TestWriterSFTOnly(t *testing.T) {
	dir := t.TempDir()
	rundirtest.Write(t, dir, rundirtest.Rollout{Task: "a", Reward: 1}, rundirtest.Rollout{Task: "a", Attempt: 1})
	floor := 0.5
	var lines []SFTRecord
	w := Writer{Filter: Filter{MinReward: &floor}, SFT: func(l SFTRecord) error { lines = append(lines, l); return nil }}
	err := EachGroup(dir, func(recs []rundir.Record, trajs []*trajectory.Trajectory) error {
		r, err := w.Write(recs, trajs)
		if r.Group.TaskID != "" || r.SFTLines != 1 || r.SFTBelow != 1 {
			t.Errorf("routed %+v", r)
		}
		return err
	})
	if err != nil || len(lines) != 1 || lines[0].Reward != 1 {
		t.Fatalf("%v: %+v", err, lines)
	}
}
