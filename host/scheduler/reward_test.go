package scheduler_test

import (
	"math"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
)

func TestCombine(t *testing.T) {
	scores := []rundir.RewardScore{{Name: "a", Weight: 0.5, Reward: 0.8}, {Name: "b", Weight: 2, Reward: 1, Error: "trap"}, {Name: "c", Weight: 0.25, Reward: 1}}
	if got := scheduler.Combine(1, 1, scores); got != 1.65 {
		t.Errorf("Combine = %v, want 1.65 (a failed reward counts for nothing)", got)
	}
	if got := scheduler.Combine(1, 0, nil); got != 0 {
		t.Errorf("env weight 0: %v", got)
	}
	huge := []rundir.RewardScore{{Weight: 1, Reward: 1e308}, {Weight: 1, Reward: 1e308}}
	if got := scheduler.Combine(1e308, 1, huge); got != math.MaxFloat64 {
		t.Errorf("a sum past float64: %v, want it clamped to the largest finite value", got)
	}
	if got := scheduler.Combine(-1e308, 2, nil); got != -math.MaxFloat64 {
		t.Errorf("a negative sum past float64: %v", got)
	}
}
