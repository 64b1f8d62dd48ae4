package scheduler

import (
	"context"
	"encoding/json"

	"github.com/proctor-dev/proctor/host/rundir"
)

// ScoreInput is what a stacked reward scores: the task, what the agent did
// and what the environment's verifier decided.
type ScoreInput struct {
	Task       Task
	Info       RolloutInfo
	Transcript json.RawMessage
	Verdict    Verdict
}

// Scorer is one stacked reward. Score never fails the rollout: a failure
// is recorded in the returned score's Error.
type Scorer interface {
	Score(ctx context.Context, in ScoreInput) rundir.RewardScore
}

// Combine is the run's reward: the environment's reward times its weight
// plus each stacked reward times its weight. A stacked reward that failed
// counts for nothing; its error stays in the record. A sum past the range
// of float64 is clamped to its largest finite value, so the record can
// still be written (JSON has no infinity).
func Combine(envReward, envWeight float64, scores []rundir.RewardScore) float64 {
	total := envReward * envWeight
	for _, s := range scores {
		if s.Error == "" {
			total += s.Reward * s.Weight
		}
	}
	return rundir.Finite(total)
}
