package export

import (
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// SFTRecord is one line of a chat JSONL for supervised fine-tuning: the
// conversation in OpenAI chat format (with tool calls, tool results and
// reasoning_content), the tools offered, and where it came from.
type SFTRecord struct {
	Messages  []trajectory.Message `json:"messages"`
	Tools     []trajectory.Schema  `json:"tools,omitempty"`
	Reward    float64              `json:"reward"`
	TaskID    string               `json:"task_id"`
	Attempt   int                  `json:"attempt"`
	RolloutID string               `json:"rollout_id"`
	Outcome   string               `json:"outcome"`
	Scores    map[string]float64   `json:"scores,omitempty"`
}

// SFT builds the SFT line of one rollout. It returns false when the
// rollout cannot be training data (see SkipTraining) or its reward is
// below f.MinReward; f's other fields apply to groups only.
func SFT(rec rundir.Record, tr *trajectory.Trajectory, f Filter) (SFTRecord, bool) {
	if SkipTraining(rec, tr) != "" || (f.MinReward != nil && rec.Reward < *f.MinReward) {
		return SFTRecord{}, false
	}
	return SFTRecord{
		Messages: tr.Messages, Tools: schemasOf(tr), Reward: rec.Reward,
		TaskID: rec.TaskID, Attempt: rec.Attempt, RolloutID: rec.RolloutID, Outcome: rec.Outcome, Scores: rec.Scores,
	}, true
}
