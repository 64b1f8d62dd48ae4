package host

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/results"
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
	Cost func(results.Usage) float64
	// EnvRewardWeight weighs the environment's reward when Rewards are
	// stacked (default 1).
	EnvRewardWeight *float64
}

// Runner runs the rollouts of one run.
type Runner struct {
	Env      Environment
	Backend  sandbox.Backend
	Agent    Agent
	Store    *results.Store
	Progress Progress
	Log      *slog.Logger
	Config   Config
	// Rewards are stacked reward plugins, scored after verification.
	Rewards []Scorer
	// OnRecord, when set, sees every record once it is stored; it may be
	// called from several goroutines at once.
	OnRecord func(results.Record)

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
func (r *Runner) runWithRetries(ctx context.Context, j job) (results.Record, bool) {
	var rec results.Record
	for try := 0; ; try++ {
		var ok bool
		rec, ok = r.rollout(ctx, j, try)
		if !ok {
			return rec, false
		}
		if rec.Outcome != results.OutcomeInfraError || try >= r.Config.Retries {
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

// rollout runs one try. ok is false when ctx was cancelled (Ctrl-C): the
// rollout is then not recorded.
func (r *Runner) rollout(ctx context.Context, j job, try int) (rec results.Record, ok bool) {
	t := j.task
	id := RolloutID(t.ID, j.attempt)
	rec = results.Record{
		RolloutID:  id,
		TaskID:     t.ID,
		Attempt:    j.attempt,
		Try:        try,
		Category:   t.Category,
		Difficulty: t.Difficulty,
		Seed:       seedFor(r.Config.Seed, t.ID, j.attempt, try),
		StartedAt:  time.Now().UTC(),
		Phases:     map[string]float64{},
	}
	p := &phaser{rec: &rec, prog: r.Progress, id: id}
	r.Progress.Started(id)
	defer func() { rec.FinishedAt = time.Now().UTC() }()

	fail := func(class string, err error) (results.Record, bool) {
		if ctx.Err() != nil {
			return rec, false
		}
		rec.Outcome = results.OutcomeInfraError
		rec.ErrorClass = classOf(err, class)
		rec.Error = err.Error()
		return rec, true
	}
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}

	info := RolloutInfo{RunID: r.Config.RunID, RolloutID: id, TaskID: t.ID, Attempt: j.attempt, Seed: rec.Seed}
	t0 := time.Now()
	ro, err := r.Env.NewRollout(ctx, t, info)
	rec.Phases["plugin_start"] = time.Since(t0).Seconds()
	if err != nil {
		return fail(results.ClassPlugin, fmt.Errorf("start plugin for task %s: %w", t.ID, err))
	}
	defer func() {
		cctx, cancel := cleanup()
		defer cancel()
		_ = ro.Close(cctx)
	}()

	// Sandbox start.
	var sb sandbox.Sandbox
	var spec sandbox.Spec
	start := func(ctx context.Context) (sandbox.Sandbox, error) {
		select {
		case r.startSem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-r.startSem }()
		if spec.StartTimeout <= 0 {
			return r.Backend.Start(ctx, spec)
		}
		sctx, cancel := context.WithTimeout(ctx, spec.StartTimeout)
		defer cancel()
		sb, err := r.Backend.Start(sctx, spec)
		if err != nil && sctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			err = fmt.Errorf("the task's build timeout of %s passed: %w", spec.StartTimeout, err)
		}
		return sb, err
	}
	err = p.run(ctx, "sandbox_start", r.Config.Timeouts.SandboxStart, func(ctx context.Context) (err error) {
		spec, err = ro.SandboxSpec(ctx)
		if err != nil {
			if classOf(err, "") == "" {
				err = WithClass(results.ClassPlugin, err)
			}
			return err
		}
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		if r.Config.Spec != nil {
			r.Config.Spec(&spec)
		}
		spec.Labels[sandbox.LabelRun] = r.Config.RunID
		spec.Labels[sandbox.LabelRollout] = id
		rec.Image, rec.Network = spec.Image, string(spec.Network)
		if w, ok := ro.(interface{ NetworkWithheld() string }); ok {
			rec.NetworkWithheld = w.NetworkWithheld()
		}
		sb, err = start(ctx)
		return err
	})
	if err != nil {
		return fail(results.ClassSandbox, phaseError("start sandbox", err))
	}
	// A reset (a verifier that grades in a sandbox the agent never touched)
	// starts the same spec again; the agent's sandbox closes in the
	// background meanwhile, and the deferred Close waits for it after
	// closing the new one.
	var closing sync.WaitGroup
	closeBox := func(sb sandbox.Sandbox) {
		cctx, cancel := cleanup()
		defer cancel()
		if err := sb.Close(cctx); err != nil {
			r.Log.Warn("close sandbox", "rollout", id, "err", err)
		}
	}
	defer func() {
		t0 := time.Now()
		closeBox(sb)
		closing.Wait()
		rec.Phases["sandbox_stop"] = time.Since(t0).Seconds()
	}()
	ro.Bind(sb, func(ctx context.Context) (sandbox.Sandbox, error) {
		nsb, err := start(ctx)
		if err != nil {
			return nil, WithClass(results.ClassSandbox, fmt.Errorf("reset sandbox: %w", err))
		}
		old := sb
		sb = nsb
		closing.Go(func() { closeBox(old) })
		return nsb, nil
	})
	if d, ok := sb.(interface{ ImageDigest() string }); ok {
		rec.ImageDigest = d.ImageDigest()
	}

	if err := p.run(ctx, "setup", r.Config.Timeouts.Setup, ro.Setup); err != nil {
		return fail(results.ClassSetup, phaseError("setup", err))
	}
	var system, user string
	if err := p.run(ctx, "setup", r.Config.Timeouts.Setup, func(ctx context.Context) (err error) {
		system, user, err = ro.Prompt(ctx)
		return err
	}); err != nil {
		return fail(results.ClassPlugin, phaseError("format prompt", err))
	}

	// Agent: its timeout is an outcome, not an error; verification still runs.
	var out AgentOutput
	agentTimedOut := false
	agentErr := p.run(ctx, "agent", r.agentTimeout(t), func(actx context.Context) error {
		var err error
		out, err = r.Agent.Run(actx, AgentInput{
			RolloutID: id, Task: t, Attempt: j.attempt, System: system, Prompt: user, Sandbox: sandbox.AgentView(sb), Seed: rec.Seed,
			Oracle: ro.Oracle,
		})
		if actx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			agentTimedOut = true
			return nil
		}
		return err
	})
	rec.Turns, rec.Usage, rec.StopReason = out.Turns, out.Usage, out.StopReason
	if r.Config.Cost != nil {
		rec.CostUSD = r.Config.Cost(out.Usage)
	}
	if agentTimedOut {
		rec.StopReason = "agent_timeout"
	}
	if ctx.Err() != nil {
		return rec, false
	}
	if out.Transcript != nil {
		name := results.TranscriptName(id, try)
		if err := r.Store.WriteTranscript(name, out.Transcript); err != nil {
			r.Log.Warn("write transcript", "rollout", id, "err", err)
		} else {
			rec.Transcript = "transcripts/" + name
		}
	}
	if errors.Is(agentErr, sandbox.ErrLimit) {
		return r.overLimit(rec, agentErr), true
	}
	if agentErr != nil {
		return fail(results.ClassAgent, phaseError("agent", agentErr))
	}

	var v Verdict
	var sealNote string
	if err := p.run(ctx, "verify", r.verifyTimeout(t), func(ctx context.Context) (err error) {
		// The agent's turn ends: the verifier's folders start empty and
		// out of reach of anything the agent left running.
		if iso, ok := sb.(sandbox.Isolated); ok {
			if sealNote, err = iso.Seal(ctx); errors.Is(err, sandbox.ErrLimit) {
				return err
			} else if err != nil {
				return WithClass(results.ClassSandbox, fmt.Errorf("seal the sandbox for verification: %w", err))
			}
		}
		v, err = ro.Verify(ctx, agentTimedOut)
		return err
	}); errors.Is(err, sandbox.ErrLimit) {
		return r.overLimit(rec, err), true
	} else if err != nil {
		return fail(results.ClassVerifier, phaseError("verify", err))
	}
	if sealNote != "" {
		v.Output = "proctor: " + sealNote + "\n" + v.Output
	}
	rec.Reward, rec.Scores, rec.Tests, rec.VerifierOutput, rec.RewardSource = v.Reward, v.Scores, v.Tests, v.Output, v.RewardSource
	if v.Log != "" {
		name := results.VerifierLogName(id, try)
		if err := r.Store.WriteVerifierLog(name, v.Log); err != nil {
			r.Log.Warn("write verifier log", "rollout", id, "err", err)
		} else {
			rec.VerifierLog = results.VerifierLogDir + "/" + name
		}
	}
	if len(r.Rewards) > 0 {
		p.run(ctx, "reward", 0, func(ctx context.Context) error {
			// Encoded here, only for stacked rewards: a transcript with
			// token ids runs to megabytes.
			var transcript json.RawMessage
			if out.Transcript != nil {
				transcript, _ = json.Marshal(out.Transcript)
			}
			in := ScoreInput{Task: t, Info: RolloutInfo{RunID: r.Config.RunID, RolloutID: id, TaskID: t.ID, Attempt: j.attempt, Seed: rec.Seed},
				Transcript: transcript, Verdict: v}
			for _, s := range r.Rewards {
				rec.Rewards = append(rec.Rewards, s.Score(ctx, in))
			}
			return nil
		})
		envReward, w := v.Reward, 1.0
		if r.Config.EnvRewardWeight != nil {
			w = *r.Config.EnvRewardWeight
		}
		rec.VerifierReward = &envReward
		rec.Reward = Combine(v.Reward, w, rec.Rewards)
		if ctx.Err() != nil {
			// Interrupted while scoring: the scores may say "context
			// canceled" instead of what the plugins think. Leave the
			// rollout for a resume rather than record it.
			return rec, false
		}
	}

	if err := p.run(ctx, "teardown", r.Config.Timeouts.Teardown, ro.Teardown); err != nil {
		r.Log.Warn("teardown", "rollout", id, "err", err)
	}
	switch {
	case v.Passed:
		rec.Outcome = results.OutcomePassed
	case agentTimedOut:
		rec.Outcome = results.OutcomeAgentTimeout
	default:
		rec.Outcome = results.OutcomeFailed
	}
	return rec, true
}

// overLimit records a rollout whose agent went over a sandbox limit (its
// disk): the agent's outcome, failed without verification.
func (r *Runner) overLimit(rec results.Record, err error) results.Record {
	rec.Outcome = results.OutcomeFailed
	rec.StopReason = "sandbox_limit"
	rec.VerifierOutput = "proctor: not verified: " + err.Error()
	return rec
}

// phaser runs a phase under its timeout and records its duration.
type phaser struct {
	rec  *results.Record
	prog Progress
	id   string
}

func (p *phaser) run(ctx context.Context, phase string, timeout time.Duration, f func(context.Context) error) error {
	p.prog.Phase(p.id, phase)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	err := f(ctx)
	p.rec.Phases[phase] += time.Since(start).Seconds()
	if err != nil && ctx.Err() == context.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (phase timeout %s)", err, timeout)
	} else if err != nil && errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
		err = fmt.Errorf("%s took longer than %s: %w", phase, timeout, err)
	}
	return err
}
