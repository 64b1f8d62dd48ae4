package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sandbox"
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

// Config tunes a Runner.
type Config struct {
	RunID            string
	Concurrency      int // rollouts at once (default 1)
	StartConcurrency int // sandbox starts at once (default Concurrency)
	Attempts         int // attempts per task (default 1)
	Retries          int // extra tries of a rollout that ended as infra_error
	RetryBackoff     time.Duration
	Seed             uint64
	Timeouts         Timeouts
	// AgentTimeoutScale multiplies the task's own agent timeout (default 1).
	AgentTimeoutScale float64
	// Spec adjusts every sandbox spec (config overrides, labels); may be nil.
	Spec func(*sandbox.Spec)
	// Cost prices a rollout's token usage; may be nil.
	Cost func(rundir.Usage) float64
	// EnvRewardWeight weighs the environment's reward when Rewards are
	// stacked (default 1).
	EnvRewardWeight *float64
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

	startSem chan struct{}
}

// Stats counts what a Run did.
type Stats struct {
	Planned     int // rollouts this invocation had to run
	Skipped     int // already in results.jsonl
	Finished    int
	Outcomes    map[string]int
	Interrupted bool
}

type job struct {
	task    Task
	attempt int
}

// Run runs every (task, attempt) not yet recorded in the store, at most
// Concurrency at once, longest expected tasks first. It returns when all
// are recorded or ctx is cancelled; a cancelled run records nothing for
// the rollouts it stopped, so a resume runs them again.
func (r *Runner) Run(ctx context.Context, tasks []Task) (Stats, error) {
	c := r.defaults()
	st := Stats{Outcomes: map[string]int{}}
	var jobs []job
	for _, t := range tasks {
		for a := 0; a < c.Attempts; a++ {
			if r.Store.Done(t.ID, a) {
				st.Skipped++
				continue
			}
			jobs = append(jobs, job{t, a})
		}
	}
	slices.SortStableFunc(jobs, func(x, y job) int {
		if d := cmp.Compare(r.agentTimeout(y.task), r.agentTimeout(x.task)); d != 0 {
			return d
		}
		if d := cmp.Compare(x.task.ID, y.task.ID); d != 0 {
			return d
		}
		return cmp.Compare(x.attempt, y.attempt)
	})
	st.Planned = len(jobs)
	r.Progress.Start(len(jobs)+st.Skipped, st.Skipped)

	queue := make(chan job)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for i := 0; i < min(c.Concurrency, max(len(jobs), 1)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				rec, ok := r.runWithRetries(ctx, j)
				if !ok {
					continue // interrupted: leave it for a resume
				}
				err := r.Store.Append(rec)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("record rollout %s: %w", rec.RolloutID, err)
				}
				st.Finished++
				st.Outcomes[rec.Outcome]++
				mu.Unlock()
				r.Progress.Done(rec)
				if err == nil && r.OnRecord != nil {
					r.OnRecord(rec)
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		select {
		case queue <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	st.Interrupted = ctx.Err() != nil
	r.Progress.Finish()
	return st, firstErr
}

func (r *Runner) defaults() Config {
	c := &r.Config
	c.Concurrency = max(c.Concurrency, 1)
	if c.StartConcurrency <= 0 {
		c.StartConcurrency = c.Concurrency
	}
	c.Attempts = max(c.Attempts, 1)
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 2 * time.Second
	}
	if c.AgentTimeoutScale == 0 {
		c.AgentTimeoutScale = 1
	}
	if r.startSem == nil {
		r.startSem = make(chan struct{}, c.StartConcurrency)
	}
	if r.Progress == nil {
		r.Progress = nopProgress{}
	}
	if r.Log == nil {
		r.Log = slog.Default()
	}
	return *c
}

func (r *Runner) agentTimeout(t Task) time.Duration {
	d := r.Config.Timeouts.Agent
	if t.AgentTimeout > 0 {
		d = time.Duration(float64(t.AgentTimeout) * r.Config.AgentTimeoutScale)
	}
	return d
}

func (r *Runner) verifyTimeout(t Task) time.Duration {
	if t.VerifyTimeout > 0 {
		return t.VerifyTimeout
	}
	return r.Config.Timeouts.Verify
}

// runWithRetries runs one identity until it has a final outcome: anything
// but infra_error, or infra_error after Retries more tries.
func (r *Runner) runWithRetries(ctx context.Context, j job) (rundir.Record, bool) {
	var rec rundir.Record
	for try := 0; ; try++ {
		var ok bool
		rec, ok = r.rollout(ctx, j, try)
		if !ok {
			return rec, false
		}
		if rec.Outcome != rundir.OutcomeInfraError || try >= r.Config.Retries {
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
