package export

import (
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// Writer routes the training data of a task's rollouts to where it goes:
// the task's Atropos group to Groups when it has exact token ids, else
// (messages only) to Messages, and each rollout's SFT line to SFT. proctor
// process writes all three as each group is decided (host/run's
// GroupFiles); proctor export writes the groups or the SFT lines of a
// finished run. The destinations encode: process and export write their
// lines each in its own way.
type Writer struct {
	Filter Filter
	// Groups takes the groups with exact token ids; nil: groups are not
	// built.
	Groups func(ScoredDataGroup) error
	// Messages takes the kept groups without exact token ids; nil: they
	// are counted (Routed.Group says so), not written.
	Messages func(MessagesGroup) error
	// SFT takes each rollout's SFT line; nil: none are made.
	SFT func(SFTRecord) error
}

// Routed is what Write made of one task's rollouts.
type Routed struct {
	Group GroupInfo // the group's; zero when Groups is nil
	// The SFT lines written, the rollouts left out of SFT by SkipTraining's
	// reason, and those below Filter.MinReward.
	SFTLines   int
	SFTSkipped map[string]int
	SFTBelow   int
}

// Write routes the rollouts of one task, its records by attempt and their
// trajectories (as EachGroup and ReadGroup give them). An error is the
// group's (Group's) or a destination's.
func (w Writer) Write(recs []rundir.Record, trajs []*trajectory.Trajectory) (Routed, error) {
	var r Routed
	if w.Groups != nil {
		grp, info, err := Group(recs, trajs, w.Filter)
		if err != nil {
			return r, err
		}
		r.Group = info
		switch {
		case info.Kept && info.Tokens:
			err = w.Groups(grp)
		case info.Kept && w.Messages != nil:
			err = w.Messages(grp.MessagesOnly())
		}
		if err != nil {
			return r, err
		}
	}
	if w.SFT == nil {
		return r, nil
	}
	r.SFTSkipped = map[string]int{}
	for i, rec := range recs {
		if why := SkipTraining(rec, trajs[i]); why != "" {
			r.SFTSkipped[why]++
			continue
		}
		line, ok := SFT(rec, trajs[i], w.Filter)
		if !ok {
			r.SFTBelow++
			continue
		}
		if err := w.SFT(line); err != nil {
			return r, err
		}
		r.SFTLines++
	}
	return r, nil
}
