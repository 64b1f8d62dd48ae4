package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/report"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Environment is the run's environment: the scheduler's, and the tasks
// it offers.
type Environment interface {
	scheduler.Environment
	Tasks(ctx context.Context) ([]scheduler.Task, []abi.Skipped, error)
}

// Parts are what a run is made of, built by the caller.
type Parts struct {
	Backend sandbox.Backend
	Prune   Pruner // nil: the backend leaves nothing behind
	Env     Environment
	EnvInfo rundir.PluginInfo // which environment plugin bytes run
	// ScoringKeys are the keys of [env.config] that decide how a rollout
	// is scored (the plugin's manifest says which); a resume that changes
	// one is refused. Nil: every key.
	ScoringKeys []string
	Rewards     []scheduler.Scorer
	// RewardInfos say which reward plugin bytes run, one per Rewards.
	RewardInfos []rundir.PluginInfo
	Agent       scheduler.Agent
}

// Result is what an Execute did.
type Result struct {
	RunID   string
	Dir     string
	Stats   scheduler.Stats
	Summary report.Summary
}

// Execute runs what the run directory is missing. It returns a nil Result
// when the run did not start (the tasks, a resume guard or the manifest
// failed); otherwise a Result, with an error when the run could not record
// or write what it did.
func (r *Run) Execute(ctx context.Context, p Parts) (*Result, error) {
	if r.resumed && p.Prune != nil {
		r.prune(ctx, p.Prune, false)
	}
	tasks, err := r.tasks(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := r.start(p, tasks); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var g *grouper
	if r.process {
		if g, err = r.openGroups(stop); err != nil {
			return nil, err
		}
	}
	runner := r.scheduler(p)
	if g != nil {
		runner.OnRecord = g.add
	}
	var st scheduler.Stats
	var runErr error
	if r.driver != nil {
		st, runErr = r.driver.Drive(runCtx, runner, tasks)
	} else {
		st, runErr = runner.Run(runCtx, tasks)
	}
	if p.Prune != nil {
		// Also after Ctrl-C: cleaning up is not what was interrupted.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		r.prune(cctx, p.Prune, true)
		cancel()
	}
	sum, err := r.finish(st, g)
	if runErr == nil {
		runErr = err
	}
	res := &Result{RunID: r.man.RunID, Dir: r.dir, Stats: st, Summary: sum}
	switch {
	case runErr != nil && fault.Hint(runErr) != "":
		return res, runErr // a driver's fault that says what to do
	case runErr != nil:
		return res, &fault.Infra{Err: runErr, Hint: "results so far are in " + r.dir + "; fix the cause and run the same command again to resume"}
	}
	return res, nil
}

// prune removes the run's sandboxes that nothing holds: before a resume,
// those an earlier, killed invocation left; once the rollouts are over
// (end), any whose removal failed (the engine restarting under a start),
// rather than leave them for a resume or `sandbox prune`.
func (r *Run) prune(ctx context.Context, prune Pruner, end bool) {
	what, level := "leftover sandboxes of the interrupted run", ""
	if end {
		what, level = "sandboxes of the run whose removal had failed", "warning"
	}
	n, err := prune(ctx, r.man.RunID)
	switch {
	case err != nil:
		r.notify(Notice{"warning", fmt.Sprintf("remove %s: %v (proctor sandbox prune --run %s removes them later)", what, err, r.man.RunID)})
	case n > 0:
		r.notify(Notice{level, fmt.Sprintf("removed %d %s", n, what)})
	}
}

// tasks loads the environment's tasks and records those it skipped.
func (r *Run) tasks(ctx context.Context, p Parts) ([]scheduler.Task, error) {
	tasks, skipped, err := p.Env.Tasks(ctx)
	if err != nil {
		return nil, &fault.Usage{Err: fmt.Errorf("load tasks: %w", err), Hint: "check [env.config] against the plugin's documentation (proctor plugin inspect " + r.cfg.Env.Plugin + ")"}
	}
	if len(tasks) == 0 {
		return nil, &fault.Usage{Err: errors.New("the config selects no tasks"), Hint: "check the task filters in [env.config]; `proctor tasks` lists what is selected"}
	}
	if n := len(tasks) * r.cfg.Run.Attempts; r.driver == nil && n > config.MaxRollouts {
		return nil, &fault.Usage{Err: fmt.Errorf("run.attempts = %d times %d tasks is %d rollouts, over the %d a run plans", r.cfg.Run.Attempts, len(tasks), n, config.MaxRollouts),
			Hint: "lower run.attempts, or select fewer tasks in [env.config] and run the rest as another run"}
	}
	r.man.SkippedTasks = nil
	for _, s := range skipped {
		r.man.SkippedTasks = append(r.man.SkippedTasks, map[string]string{"id": s.ID, "reason": s.Reason})
	}
	return tasks, nil
}

// start refuses a resume with other plugin bytes, warns of skipped and
// broken tasks, then writes the manifest and the resolved config: what is
// about to run.
func (r *Run) start(p Parts, tasks []scheduler.Task) error {
	c, rewards := r.cfg, p.RewardInfos
	if r.resumed {
		if err := samePlugins(r.dir, r.man, p.EnvInfo, rewards); err != nil {
			return err
		}
		if err := sameScoring(r.dir, c, p.ScoringKeys, len(r.store.Records())); err != nil {
			return err
		}
		rewards = keepRecorded(r.man.Rewards, rewards)
	}
	r.man.ProctorVersion = r.version
	r.man.Plugin, r.man.Rewards = p.EnvInfo, rewards
	r.man.Agent, r.man.Backend, r.man.ConfigHash = c.Agent.Kind, c.Sandbox.Backend, c.Hash()
	if c.Agent.Kind == "llm" || judged(c) {
		r.man.Model = map[string]string{"base_url": c.Model.BaseURL, "name": c.Model.Name}
	}
	for _, s := range r.man.SkippedTasks {
		r.notify(Notice{"warning", fmt.Sprintf("task %s skipped by the plugin: %s", s["id"], s["reason"])})
	}
	for _, t := range tasks {
		if t.Broken != "" {
			r.notify(Notice{"warning", fmt.Sprintf("task %s is broken, its rollouts will be infra errors: %s", t.ID, t.Broken)})
		}
	}
	r.started = true
	if err := rundir.WriteManifest(r.dir, r.man); err != nil {
		return &fault.Infra{Err: err}
	}
	if resolved, err := c.Resolved(); err == nil {
		if err := rundir.WriteFileAtomic(filepath.Join(r.dir, rundir.ConfigFile), resolved); err != nil {
			return &fault.Infra{Err: err}
		}
	}
	return nil
}

// judged reports whether a [[reward]] plugin is granted the run's model.
func judged(c *config.Config) bool {
	return slices.ContainsFunc(c.Reward, func(rw config.Reward) bool { return slices.Contains(rw.Grants, abi.OpModelComplete) })
}

// scheduler is the run's scheduler, configured from [run], [sandbox],
// [env] and [model] prices.
func (r *Run) scheduler(p Parts) *scheduler.Runner {
	c := r.cfg
	return &scheduler.Runner{
		Env: p.Env, Backend: p.Backend, Agent: p.Agent, Store: r.store, Rewards: p.Rewards, Progress: r.progress,
		Config: scheduler.Config{
			RunID: r.man.RunID, Concurrency: c.Run.Concurrency, StartConcurrency: c.Run.SandboxStartConcurrency,
			Prestart: prestart(c), GroupSize: groupSize(r.process, c),
			Attempts: c.Run.Attempts, Retries: c.Run.Retries, Seed: c.Run.Seed,
			AgentTimeoutScale: c.Run.AgentTimeoutScale, EnvRewardWeight: c.Env.RewardWeight,
			VerifierFailureIsInfra: c.Run.VerifierFailure == config.VerifierInfraError,
			Timeouts: scheduler.Timeouts{
				SandboxStart: c.Run.SandboxStartTimeout.Duration, Setup: c.Run.SetupTimeout.Duration,
				Agent: c.Run.AgentTimeout.Duration, Verify: c.Run.VerifyTimeout.Duration, Teardown: c.Run.TeardownTimeout.Duration,
			},
			Spec: specOverrides(c.Sandbox),
			Cost: Cost(c.Model.Prices),
		},
	}
}

// prestart is how many sandboxes start ahead (0 for a config built
// without its defaults).
func prestart(c *config.Config) int {
	if c.Run.Prestart == nil {
		return 0
	}
	return *c.Run.Prestart
}

// groupSize is a process run's group size, 0 in an eval.
func groupSize(process bool, c *config.Config) int {
	if !process {
		return 0
	}
	return c.Process.GroupSize
}

// specOverrides applies [sandbox] limits and pull to every sandbox spec;
// disk_mb and disk_inodes are only the defaults for tasks that set no
// disk limit.
func specOverrides(sb config.Sandbox) func(*sandbox.Spec) {
	return func(s *sandbox.Spec) {
		if sb.CPUs > 0 {
			s.CPUs = sb.CPUs
		}
		if sb.MemoryMB > 0 {
			s.MemoryMB = sb.MemoryMB
		}
		if sb.PidsMax > 0 {
			s.PidsMax = sb.PidsMax
		}
		if s.DiskMB <= 0 {
			s.DiskMB = sb.DiskMB // a task's own limit wins
		}
		if s.DiskInodes <= 0 {
			s.DiskInodes = sb.DiskInodes
		}
		s.Pull = sb.Pull
	}
}

// Cost prices a rollout's tokens with [model] prices, in US dollars.
func Cost(prices config.Prices) func(agent.Usage) float64 {
	return func(u agent.Usage) float64 { return prices.Cost(u.PromptTokens, u.CachedTokens, u.CompletionTokens) }
}

// finish writes what the run did: summary.json, the manifest (image
// digests, finished_at unless interrupted, a process run's account) and
// report.html.
func (r *Run) finish(st scheduler.Stats, g *grouper) (report.Summary, error) {
	recs := r.store.Records()
	for _, rec := range recs {
		if rec.ImageDigest != "" {
			if r.man.ImageDigests == nil {
				r.man.ImageDigests = map[string]string{}
			}
			name := rec.Image
			if name == "" {
				name = "task:" + rec.TaskID
			}
			r.man.ImageDigests[name] = rec.ImageDigest
		}
	}
	sum := report.SummarizeIn(r.dir, recs)
	var err error
	if werr := rundir.WriteJSONAtomic(filepath.Join(r.dir, rundir.SummaryFile), sum); werr != nil {
		err = &fault.Infra{Err: werr}
	}
	if !st.Interrupted {
		now := time.Now().UTC()
		r.man.FinishedAt = &now
	}
	if g != nil {
		info, gerr := g.finish()
		r.man.Process = info
		if err == nil {
			err = gerr
		}
	}
	if r.driver != nil {
		r.driver.Account(&r.man)
	}
	rundir.WriteManifest(r.dir, r.man)
	// After the manifest, so the page knows whether the run finished.
	if werr := r.writeReport(); werr != nil {
		r.notify(Notice{"warning", fmt.Sprintf("write %s: %v", rundir.ReportFile, werr)})
	}
	return sum, err
}

// writeReport writes report.html into the run directory.
func (r *Run) writeReport() error {
	var buf bytes.Buffer
	if err := report.WriteHTML(&buf, r.dir, report.HTMLOptions{}); err != nil {
		return err
	}
	return rundir.WriteFileAtomic(filepath.Join(r.dir, rundir.ReportFile), buf.Bytes())
}
