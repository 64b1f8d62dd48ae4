package plugincheck

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/env"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin"
	hostrun "github.com/proctor-dev/proctor/host/run"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Options says what plugin test runs.
type Options struct {
	Ref    string // the plugin, as given on the command line
	Config string // the run config file: [env.config] and [sandbox], or the plugin's [[reward]] table
	Tasks  int    // how many of the first tasks the oracle and nop agents run (and rollouts scored)
	RunDir string // a run directory whose recorded rollouts a reward plugin scores ("": a sample)
	Out    string // where the conformance runs go ("": a temporary folder, removed)
	// RunOptions are the options of the conformance runs (the version
	// their manifests record).
	RunOptions []hostrun.Option
}

// Test is the conformance test an author runs before sharing a plugin:
// every hook it declares is called as a run would call it. An error ends
// it (the checks before it are returned with it); a failed check does
// not.
func Test(ctx context.Context, h assemble.Host, o Options) ([]Check, error) {
	if o.Tasks < 1 {
		return nil, &fault.Usage{Err: fmt.Errorf("--tasks %d: test at least one task", o.Tasks)}
	}
	c, err := Config(o.Ref, o.Config)
	if err != nil {
		return nil, err
	}
	ref := Ref(o.Ref)
	t := &tester{Options: o, host: h}
	rp, rt, err := loadReward(ctx, c, ref)
	if err != nil {
		return nil, err
	}
	if rp != nil {
		defer rt.Close(ctx)
		i := rewardTable(c, ref)
		if i < 0 {
			return nil, noRewardTable(o.Ref, o.Config)
		}
		t.describe(rp)
		err := t.testReward(ctx, c, i, rp)
		return t.checks, err
	}
	err = t.testEnvironment(ctx, c)
	return t.checks, err
}

// tester runs one plugin test.
type tester struct {
	Options
	host   assemble.Host
	checks list
}

// describe checks what describe said.
func (t *tester) describe(p *plugin.Loaded) {
	m := p.Manifest()
	sdk := m.SDK
	if sdk == "" {
		sdk = "an SDK before v1.1"
	}
	t.checks.add(OK, "describe", "%s %s (abi v%d.%d, %s, sha256 %.12s)", m.Name, m.Version, m.ABI, m.ABIMinor, sdk, p.SHA256())
	if m.Name == "" || m.Version == "" {
		t.checks.add(Fail, "describe", "the manifest needs a name and a version (they go in every run's manifest.json)")
	}
	for _, h := range m.Hooks {
		if !slices.Contains(abi.Hooks(), h) {
			t.checks.add(Warn, "describe", "hook %q is not one this proctor calls", h)
		}
	}
	if len(m.ConfigSchema) > 0 && !json.Valid(m.ConfigSchema) {
		t.checks.add(Fail, "describe", "config_schema is not JSON")
	}
}

// testEnvironment: describe, config.check, tasks.load, then the first
// tasks with the oracle (each must pass) and with nop (none may), scored
// as eval scores them.
func (t *tester) testEnvironment(ctx context.Context, c *config.Config) error {
	e, p, rt, err := t.host.Environment(ctx, c)
	if err != nil {
		return err
	}
	t.describe(p)
	m := p.Manifest()
	if slices.Contains(m.Hooks, abi.HookConfig) {
		t.checks.add(OK, "config.check", "[env.config] is valid") // environment ran it
	}
	tasks, skipped, err := e.Tasks(ctx)
	rt.Close(ctx)
	if err != nil {
		t.checks.add(Fail, "tasks.load", "%v", err)
		return nil
	}
	t.checks.add(OK, "tasks.load", "%d tasks, %d skipped", len(tasks), len(skipped))
	for _, s := range skipped {
		t.checks.add(Warn, "tasks.load skipped "+s.ID, "%s", s.Reason)
	}
	if len(tasks) == 0 {
		t.checks.add(Fail, "tasks.load", "no tasks, so no rollout can be tested; check [env.config]")
		return nil
	}
	hasVerify, hasOracle := slices.Contains(m.Hooks, abi.HookVerify), slices.Contains(m.Hooks, abi.HookOracle)
	if !hasVerify {
		t.checks.add(Warn, "no rollout.verify", "every rollout scores 0, so neither the oracle nor nop can be checked")
	}
	if !hasOracle {
		t.checks.add(Warn, "no rollout.oracle", "nothing shows that the tasks can be solved (the oracle agent records an infra_error)")
	}
	dir := t.Out
	if dir == "" {
		if dir, err = os.MkdirTemp("", "proctor-plugin-test-"); err != nil {
			return &fault.Infra{Err: err}
		}
		defer os.RemoveAll(dir)
	}
	kinds := []string{"nop"}
	if hasOracle {
		kinds = []string{"oracle", "nop"}
	}
	for _, kind := range kinds {
		recs, err := t.rollouts(ctx, c, kind, filepath.Join(dir, kind))
		if err != nil {
			return err
		}
		for _, rec := range recs {
			t.judgeRollout(kind, rec, hasVerify)
		}
	}
	return nil
}

// rollouts runs the first --tasks tasks with the agent kind, as eval runs
// them, into dir, and returns their records.
func (t *tester) rollouts(ctx context.Context, c *config.Config, kind, dir string) ([]rundir.Record, error) {
	cc := *c
	cc.Agent.Kind = kind
	cc.Run.Name, cc.Run.Attempts, cc.Run.Retries = "plugin-test-"+kind, 1, 0
	r, err := hostrun.Open(&cc, append([]hostrun.Option{hostrun.WithDir(dir)}, t.RunOptions...)...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	parts, done, err := t.host.Parts(ctx, &cc)
	if err != nil {
		return nil, err
	}
	defer done()
	first := &firstTasks{Environment: parts.Env, n: t.Tasks}
	parts.Env = first
	if _, err := r.Execute(ctx, parts); err != nil {
		return nil, err
	}
	recs, err := rundir.Read(dir)
	slices.SortStableFunc(recs, func(a, b rundir.Record) int {
		return slices.Index(first.ids, a.TaskID) - slices.Index(first.ids, b.TaskID)
	})
	return recs, err
}

// judgeRollout checks one rollout: the oracle's must pass, nop's must not.
func (t *tester) judgeRollout(kind string, rec rundir.Record, hasVerify bool) {
	name, what := kind+" on "+rec.TaskID, fmt.Sprintf("%s (reward %g)", rec.Outcome, rec.Reward)
	for _, rs := range rec.Rewards {
		if rs.Error != "" {
			t.checks.add(Fail, name, "%s: [[reward]] %s: %s", what, rs.Name, rs.Error)
		}
	}
	switch {
	case rec.Outcome == rundir.OutcomeInfraError:
		if kind == "nop" || hasVerify {
			t.checks.add(Fail, name, "%s: %s: %s", what, rec.ErrorClass, firstLines(rec.Error, 8))
		}
	case !hasVerify:
	case rec.Outcome == rundir.OutcomeVerifierFailed:
		t.checks.add(Fail, name, "%s: the verifier reached no reward: %s", what, firstLines(rec.Error, 8))
	case kind == "oracle" && rec.Outcome != rundir.OutcomePassed:
		t.checks.add(Fail, name, "%s: the reference solution does not pass its own verifier: %s", what, firstLines(rec.VerifierOutput, 8))
	case kind == "nop" && rec.Outcome == rundir.OutcomePassed:
		t.checks.add(Fail, name, "%s: the task passes untouched, so its verifier proves nothing", what)
	default:
		t.checks.add(OK, name, "%s", what)
	}
}

// firstLines is s cut to its first n lines.
func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n     ")
}

// firstTasks is the run's environment with only its first n tasks; ids
// are theirs, in order.
type firstTasks struct {
	hostrun.Environment
	n   int
	ids []string
}

func (f *firstTasks) Tasks(ctx context.Context) ([]scheduler.Task, []abi.Skipped, error) {
	tasks, skipped, err := f.Environment.Tasks(ctx)
	tasks = tasks[:min(len(tasks), f.n)]
	for _, t := range tasks {
		f.ids = append(f.ids, t.ID)
	}
	return tasks, skipped, err
}

// testReward: config.check with its [[reward]] table's config, then
// reward.score on recorded rollouts (--run) or a sample one.
func (t *tester) testReward(ctx context.Context, c *config.Config, i int, p *plugin.Loaded) error {
	m := p.Manifest()
	rw := c.Reward[i]
	name := rw.Name
	if name == "" {
		name = m.Name
	}
	rp := &env.Reward{Name: name, Weight: *rw.Weight, Wasm: p.Plugin, Config: c.RewardConfig(i),
		Info: abi.HostInfo{ProctorVersion: t.host.Version, Backend: c.Sandbox.Backend}}
	if slices.Contains(m.Hooks, abi.HookConfig) {
		if err := rp.CheckConfig(ctx); err != nil {
			t.checks.add(Fail, "config.check", "%v", err)
			return nil
		}
		t.checks.add(OK, "config.check", "the [[reward]] table's config is valid")
	} else {
		t.checks.add(Warn, "no config.check", "a misspelt key in [reward.config] shows only when a rollout is scored")
	}
	if slices.Contains(rw.Grants, abi.OpModelComplete) {
		complete, err := assemble.JudgeModel(c, openai.NewLimiter(c.Model.MaxConcurrent))
		if err != nil {
			return err
		}
		rp.Complete = complete
	} else if slices.Contains(m.Capabilities, abi.OpModelComplete) {
		t.checks.add(Warn, "the plugin needs model.complete", "grant it in its [[reward]] table, with a [model], to score")
		return nil
	}
	inputs, err := t.recorded()
	if err != nil {
		return err
	}
	for _, in := range inputs {
		s := rp.Score(ctx, in)
		switch {
		case s.Error != "":
			t.checks.add(Fail, "reward.score on "+in.Info.RolloutID, "%s", firstLines(s.Error, 8))
		case math.IsNaN(s.Reward) || math.IsInf(s.Reward, 0):
			t.checks.add(Fail, "reward.score on "+in.Info.RolloutID, "reward %g is not a number", s.Reward)
		default:
			t.checks.add(OK, "reward.score on "+in.Info.RolloutID, "reward %g, scores %v", s.Reward, s.Scores)
		}
	}
	return nil
}

// sampleRollout is a made-up rollout (one user message, one answer, a
// passed verdict) that check and test score reward plugins on.
var sampleRollout = scheduler.ScoreInput{Task: scheduler.Task{ID: "sample"}, Info: scheduler.RolloutInfo{RolloutID: "sample#0", TaskID: "sample"},
	Transcript: []byte(sampleTranscript), Verdict: scheduler.Verdict{Reward: 1, Passed: true}}

const sampleTranscript = `{"rollout_id":"sample#0","task_id":"sample","seed":0,"prompt":"Say hello.","system":"","trajectory":{"agent":"llm","model":"sample","messages":[{"role":"user","content":"Say hello."},{"role":"assistant","content":"Hello."}],"turns":[{"index":0,"usage":{"prompt_tokens":10,"completion_tokens":2},"model_secs":0.5}],"stop_reason":"done","usage":{"prompt_tokens":10,"completion_tokens":2}}}`

// recorded is what reward.score is tried on: the first --tasks rollouts of
// the --run directory with a transcript, or the sample.
func (t *tester) recorded() ([]scheduler.ScoreInput, error) {
	if t.RunDir == "" {
		return []scheduler.ScoreInput{sampleRollout}, nil
	}
	recs, err := rundir.Read(t.RunDir)
	if err != nil {
		return nil, &fault.Usage{Err: err, Hint: "give --run the directory a run wrote (runs/<name>)"}
	}
	var out []scheduler.ScoreInput
	for _, rec := range recs {
		if rec.Transcript == "" || rec.Outcome == rundir.OutcomeInfraError {
			continue
		}
		tr, err := rundir.ReadTranscript(t.RunDir, rec.Transcript)
		if err != nil {
			return nil, &fault.Usage{Err: fmt.Errorf("rollout %s: %w", rec.RolloutID, err)}
		}
		raw, _ := json.Marshal(abi.Task{ID: rec.TaskID, Category: rec.Category, Difficulty: rec.Difficulty})
		out = append(out, scheduler.ScoreInput{Task: scheduler.Task{ID: rec.TaskID, Category: rec.Category, Difficulty: rec.Difficulty, Raw: raw},
			Info:       scheduler.RolloutInfo{RolloutID: rec.RolloutID, TaskID: rec.TaskID, Attempt: rec.Attempt, Seed: rec.Seed},
			Transcript: tr, Verdict: scheduler.Verdict{Reward: verifierReward(rec), Passed: rec.Outcome == rundir.OutcomePassed, Scores: rec.Scores, Tests: rec.Tests, Output: rec.VerifierOutput}})
		if len(out) == t.Tasks {
			break
		}
	}
	if len(out) == 0 {
		return nil, &fault.Usage{Err: fmt.Errorf("%s has no recorded rollout with a transcript", t.RunDir)}
	}
	return out, nil
}

// verifierReward is the environment's own reward of a record.
func verifierReward(rec rundir.Record) float64 {
	if rec.VerifierReward != nil {
		return *rec.VerifierReward
	}
	return rec.Reward
}
