package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/trajectory"
)

// Timeouts bound each phase of a rollout. Zero means no limit beyond the
// run's context, except Agent and Verify, which fall back to the task's.
type Timeouts struct {
	SandboxStart time.Duration
	Setup        time.Duration
	Agent        time.Duration
	Verify       time.Duration
	Teardown     time.Duration
}

// Config tunes a Runner. A run's values come from its config file, and
// config.Config is where their defaults are filled in: the Runner takes
// them as they are, and refuses a Concurrency or Attempts below 1.
type Config struct {
	RunID            string
	Concurrency      int // rollouts at once
	StartConcurrency int // sandbox starts at once; 0 or less: only Concurrency bounds them
	Attempts         int // attempts per task
	Retries          int // extra tries of a rollout that ended as infra_error
	// RetryBackoff is the wait before the first retry, doubled for each
	// next one (0: 2s).
	RetryBackoff time.Duration
	Seed         uint64
	Timeouts     Timeouts
	// AgentTimeoutScale multiplies the task's own agent timeout.
	AgentTimeoutScale float64
	// Spec adjusts every sandbox spec (config overrides, labels); may be nil.
	Spec func(*sandbox.Spec)
	// Cost prices a rollout's token usage; may be nil.
	Cost func(trajectory.Usage) float64
	// EnvRewardWeight weighs the environment's reward when Rewards are
	// stacked (nil: 1).
	EnvRewardWeight *float64
	// Prestart is how many rollouts may have their sandbox started ahead
	// of their turn, while others run (0: none).
	Prestart int
	// GroupSize, in a process run, is how many attempts of a task form a
	// group; a group's sandboxes are started ahead together.
	GroupSize int
	// VerifierFailureIsInfra records a verifier that reached no reward
	// (Verdict.Failure, or verification past its timeout) as an
	// infra_error of class verifier, retried, instead of the outcome
	// verifier_failed with reward 0 (Harbor's, never retried).
	VerifierFailureIsInfra bool
}

// Runner runs the rollouts of one run.
type Runner struct {
	Env      Environment
	Backend  sandbox.Backend
	Agent    Agent
	Store    *rundir.Store
	Progress Progress
	Log      *slog.Logger
	Config   Config
	// Rewards are stacked reward plugins, scored after verification.
	Rewards []Scorer
	// OnRecord, when set, sees every record once it is stored; it may be
	// called from several goroutines at once.
	OnRecord func(rundir.Record)

	startSem *semaphore.Weighted
	ahead    *ahead // the pool of the current Run; nil when Prestart is 0
	stopErr  atomic.Pointer[error]
}

// halt ends the run with err, as a record that cannot be stored does: no
// rollout starts after it, the running ones are cancelled and left for a
// resume. The first error wins.
func (r *Runner) halt(err error) { r.stopErr.CompareAndSwap(nil, &err) }

// halted is the error that ended the run, nil while none has.
func (r *Runner) halted() error {
	if p := r.stopErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats counts what a Run did.
type Stats struct {
	Planned     int // rollouts this invocation had to run
	Skipped     int // already in results.jsonl
	Finished    int
	Outcomes    map[string]int
	Interrupted bool
}

// job is one identity to run. It points into the run's task list: a run
// may plan a million of them.
type job struct {
	task    *Task
	attempt int
}

// Run runs every (task, attempt) not yet recorded in the store, at most
// Concurrency at once, longest expected tasks first. It returns when all
// are recorded or ctx is cancelled; a cancelled run records nothing for
// the rollouts it stopped, so a resume runs them again. The first record
// that cannot be stored ends the run: no rollout starts after it, the
// running ones are cancelled at once (their work could not be kept) and
// left for a resume, and Run returns that error.
func (r *Runner) Run(ctx context.Context, tasks []Task) (Stats, error) {
	if err := r.prepare(); err != nil {
		return Stats{}, err
	}
	c := r.Config
	jobs, skipped := r.plan(tasks, c.Attempts)
	t := &tally{Stats: Stats{Planned: len(jobs), Skipped: skipped, Outcomes: map[string]int{}}}
	if rp, ok := r.Progress.(Resumer); ok && skipped > 0 {
		rp.Recorded(r.Store.Records())
	}
	r.Progress.Start(len(jobs)+skipped, skipped)

	// stop ends when ctx does or a record fails; the rollouts run on it,
	// so a failed record cancels the ones running.
	g, stop := errgroup.WithContext(ctx)
	g.SetLimit(c.Concurrency)
	if c.Prestart > 0 {
		r.ahead = r.startAhead(ctx, stop, jobs)
		defer func() {
			r.ahead.close(ctx)
			r.ahead = nil
		}()
	}
	for _, j := range jobs {
		if stop.Err() != nil {
			break
		}
		g.Go(func() error {
			if stop.Err() != nil {
				return nil // the run ended while this job waited for its turn
			}
			rec, ok := r.runWithRetries(stop, j)
			if !ok {
				return r.halted() // interrupted: leave it for a resume
			}
			return r.record(rec, t)
		})
	}
	err := g.Wait()
	t.Interrupted = ctx.Err() != nil
	r.Progress.Finish()
	return t.Stats, err
}

// plan lists the identities not yet recorded, longest expected first, and
// counts those that are.
func (r *Runner) plan(tasks []Task, attempts int) (jobs []job, skipped int) {
	for i := range tasks {
		t := &tasks[i]
		for a := 0; a < attempts; a++ {
			if r.Store.Done(t.ID, a) {
				skipped++
				continue
			}
			jobs = append(jobs, job{t, a})
		}
	}
	slices.SortStableFunc(jobs, func(x, y job) int {
		if d := cmp.Compare(r.agentLimit(*y.task).d, r.agentLimit(*x.task).d); d != 0 {
			return d
		}
		if d := cmp.Compare(x.task.ID, y.task.ID); d != 0 {
			return d
		}
		return cmp.Compare(x.attempt, y.attempt)
	})
	return jobs, skipped
}

// tally is a run's Stats as the jobs finish.
type tally struct {
	mu sync.Mutex
	Stats
}

// record appends rec to the store, counts it and tells Progress and
// OnRecord.
func (r *Runner) record(rec rundir.Record, t *tally) error {
	err := r.Store.Append(rec)
	t.mu.Lock()
	t.Finished++
	t.Outcomes[rec.Outcome]++
	t.mu.Unlock()
	r.Progress.Done(rec)
	if err != nil {
		return fmt.Errorf("record rollout %s: %w", rec.RolloutID, err)
	}
	if r.OnRecord != nil {
		r.OnRecord(rec)
	}
	return nil
}

// prepare checks the Config and fills in what the Runner needs.
func (r *Runner) prepare() error {
	c := &r.Config
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("scheduler: concurrency is %d, want at least 1", c.Concurrency)
	case c.Attempts < 1:
		return fmt.Errorf("scheduler: attempts is %d, want at least 1", c.Attempts)
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 2 * time.Second
	}
	if r.startSem == nil {
		starts := c.StartConcurrency
		if starts <= 0 {
			starts = c.Concurrency
		}
		r.startSem = semaphore.NewWeighted(int64(starts))
	}
	if r.Progress == nil {
		r.Progress = nopProgress{}
	}
	if r.Log == nil {
		r.Log = slog.Default()
	}
	return nil
}

// runWithRetries runs one identity until it has a final outcome: anything
// but infra_error, or infra_error after Retries more tries, or a dataset
// error (class dataset: the row names what does not exist), which another
// try cannot change.
func (r *Runner) runWithRetries(ctx context.Context, j job) (rundir.Record, bool) {
	var rec rundir.Record
	for try := 0; ; try++ {
		var ok bool
		rec, ok = r.rollout(ctx, j, try)
		if !ok {
			return rec, false
		}
		if rec.Outcome != rundir.OutcomeInfraError || rec.ErrorClass == rundir.ClassDataset || try >= r.Config.Retries {
			return rec, true
		}
		r.Log.Warn("rollout infra error, retrying", "rollout", rec.RolloutID, "try", try+1, "class", rec.ErrorClass, "err", rec.Error)
		select {
		case <-time.After(r.Config.RetryBackoff << try):
		case <-ctx.Done():
			return rec, false
		}
	}
}

// RolloutID names an identity: "<task>#<attempt>".
func RolloutID(taskID string, attempt int) string {
	return fmt.Sprintf("%s#%d", taskID, attempt)
}

// seedFor derives a rollout's seed from the run seed and its identity, so
// a rerun of the same identity and try gets the same seed.
func seedFor(run uint64, taskID string, attempt, try int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d/%d", run, taskID, attempt, try)
	return h.Sum64()
}
