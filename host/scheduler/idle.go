package scheduler

import "context"

// Idler is a Rollout that can let go of what it holds while the scheduler
// waits on something else: a sandbox's start, the agent. The scheduler
// calls Idle before each; the next call of the rollout's methods takes it
// back, so the rollout must not be able to tell (a plugin instance is
// parked: see host/plugin/wasm). At many rollouts in flight, most of them
// wait on their agent, and what they hold meanwhile is most of the host's
// memory.
type Idler interface {
	Idle(ctx context.Context)
}

// idle tells the rollout's environment that it waits.
func (ro *rollout) idle(ctx context.Context) {
	if i, ok := ro.env.(Idler); ok {
		i.Idle(ctx)
	}
}
