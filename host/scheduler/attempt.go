package scheduler

import (
	"context"

	"github.com/proctor-dev/proctor/host/rundir"
)

// Attempter runs one identity, the attempt of task, to its final outcome
// (an infra_error is retried up to Retries times), stores its record and
// tells Progress and OnRecord, as Run does with each identity it plans.
// ok is false when ctx was cancelled before the rollout had an outcome:
// nothing is recorded, and a later invocation may run the identity again.
// The error is the store's (the record could not be appended), or what
// ended the run (a sandbox start that found the host's files changed).
type Attempter func(ctx context.Context, task Task, attempt int) (rec rundir.Record, ok bool, err error)

// Attempter is for callers that decide themselves which identity runs
// when (proctor serve feeds a trainer as it asks): it checks the Config
// and returns the function that runs one identity. The caller owns the
// concurrency (the Attempter does not wait for a slot; sandbox starts
// still share StartConcurrency) and must not run one identity twice at
// once; Progress.Start and Finish are the caller's to call.
func (r *Runner) Attempter() (Attempter, error) {
	if err := r.prepare(); err != nil {
		return nil, err
	}
	t := &tally{Stats: Stats{Outcomes: map[string]int{}}}
	return func(ctx context.Context, task Task, attempt int) (rundir.Record, bool, error) {
		rec, ok := r.runWithRetries(ctx, job{&task, attempt})
		if !ok {
			return rec, false, r.halted()
		}
		return rec, true, r.record(rec, t)
	}, nil
}
