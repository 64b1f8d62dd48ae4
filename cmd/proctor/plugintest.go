package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	hostrun "github.com/proctor-dev/proctor/host/run" // main has its own run
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sdk/abi"
)

type testCmd struct {
	Plugin string `arg:"" help:"Bundled name, path of a .wasm file, or oci:// reference."`
	Config string `required:"" help:"A run config: its [env.config] and [sandbox] for an environment, its [[reward]] table for a reward plugin." type:"existingfile"`
	Tasks  int    `default:"2" help:"How many of the first tasks the oracle and nop agents run."`
	RunDir string `name:"run" help:"A run directory whose recorded rollouts a reward plugin scores (default: a sample rollout)." type:"existingdir"`
	Out    string `help:"Keep the conformance runs in this folder (default: a temporary one, removed)." type:"path"`
}

// errChecksFailed: plugin test ran, and some checks failed.
var errChecksFailed = errors.New("some checks failed")

// checks prints each check's line and counts the failures.
type checks struct {
	w      io.Writer
	n, bad int
}

func (c *checks) ok(format string, args ...any) {
	c.n++
	fmt.Fprintf(c.w, "ok   "+format+"\n", args...)
}
func (c *checks) warn(format string, args ...any) {
	fmt.Fprintf(c.w, "warn "+format+"\n", args...)
}
func (c *checks) fail(format string, args ...any) {
	c.n++
	c.bad++
	fmt.Fprintf(c.w, "FAIL "+format+"\n", args...)
}

// done ends the test: the count, and errChecksFailed when one failed.
func (c *checks) done(stderr io.Writer) error {
	if c.bad > 0 {
		fmt.Fprintf(stderr, "proctor: %d of %d checks failed\n", c.bad, c.n)
		return errChecksFailed
	}
	fmt.Fprintf(c.w, "pass %d checks\n", c.n)
	return nil
}

// Run is the conformance test an author runs before sharing a plugin:
// every hook it declares is called as a run would call it.
func (tc testCmd) Run(g *globals) error {
	if tc.Tasks < 1 {
		return &fault.Usage{Err: fmt.Errorf("--tasks %d: test at least one task", tc.Tasks)}
	}
	c, err := pluginConfig(tc.Plugin, tc.Config)
	if err != nil {
		return err
	}
	ref := cliPlugin(tc.Plugin)
	ck := &checks{w: g.stdout}
	rp, rt, err := loadReward(g.ctx, c, ref)
	if err != nil {
		return err
	}
	if rp != nil {
		defer rt.Close(g.ctx)
		i := rewardTable(c, ref)
		if i < 0 {
			return noRewardTable(tc.Plugin, tc.Config)
		}
		describe(ck, rp)
		if err := tc.testReward(g, ck, c, i, rp); err != nil {
			return err
		}
		return ck.done(g.stderr)
	}
	if err := tc.testEnvironment(g, ck, c); err != nil {
		return err
	}
	return ck.done(g.stderr)
}

// describe checks what describe said.
func describe(ck *checks, p *plugin.Loaded) {
	m := p.Manifest()
	sdk := m.SDK
	if sdk == "" {
		sdk = "an SDK before v1.1"
	}
	ck.ok("describe: %s %s (abi v%d.%d, %s, sha256 %.12s)", m.Name, m.Version, m.ABI, m.ABIMinor, sdk, p.SHA256())
	if m.Name == "" || m.Version == "" {
		ck.fail("describe: the manifest needs a name and a version (they go in every run's manifest.json)")
	}
	for _, h := range m.Hooks {
		if !slices.Contains(abi.Hooks(), h) {
			ck.warn("describe: hook %q is not one this proctor calls", h)
		}
	}
	if len(m.ConfigSchema) > 0 && !json.Valid(m.ConfigSchema) {
		ck.fail("describe: config_schema is not JSON")
	}
}

// testEnvironment: describe, config.check, tasks.load, then the first
// tasks with the oracle (each must pass) and with nop (none may), scored
// as eval scores them.
func (tc testCmd) testEnvironment(g *globals, ck *checks, c *config.Config) error {
	e, p, rt, err := host().Environment(g.ctx, c)
	if err != nil {
		return err
	}
	describe(ck, p)
	m := p.Manifest()
	if slices.Contains(m.Hooks, abi.HookConfig) {
		ck.ok("config.check: [env.config] is valid") // environment ran it
	}
	tasks, skipped, err := e.Tasks(g.ctx)
	rt.Close(g.ctx)
	if err != nil {
		ck.fail("tasks.load: %v", err)
		return nil
	}
	ck.ok("tasks.load: %d tasks, %d skipped", len(tasks), len(skipped))
	for _, s := range skipped {
		ck.warn("tasks.load skipped %s: %s", s.ID, s.Reason)
	}
	if len(tasks) == 0 {
		ck.fail("tasks.load: no tasks, so no rollout can be tested; check [env.config]")
		return nil
	}
	hasVerify, hasOracle := slices.Contains(m.Hooks, abi.HookVerify), slices.Contains(m.Hooks, abi.HookOracle)
	if !hasVerify {
		ck.warn("no rollout.verify: every rollout scores 0, so neither the oracle nor nop can be checked")
	}
	if !hasOracle {
		ck.warn("no rollout.oracle: nothing shows that the tasks can be solved (the oracle agent records an infra_error)")
	}
	dir := tc.Out
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
		recs, err := tc.rollouts(g, c, kind, filepath.Join(dir, kind))
		if err != nil {
			return err
		}
		for _, rec := range recs {
			judgeRollout(ck, kind, rec, hasVerify)
		}
	}
	return nil
}

// rollouts runs the first --tasks tasks with the agent kind, as eval runs
// them, into dir, and returns their records.
func (tc testCmd) rollouts(g *globals, c *config.Config, kind, dir string) ([]rundir.Record, error) {
	cc := *c
	cc.Agent.Kind = kind
	cc.Run.Name, cc.Run.Attempts, cc.Run.Retries = "plugin-test-"+kind, 1, 0
	r, err := hostrun.Open(&cc, hostrun.WithDir(dir), hostrun.WithVersion(fullVersion()))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	parts, done, err := host().Parts(g.ctx, &cc)
	if err != nil {
		return nil, err
	}
	defer done()
	first := &firstTasks{Environment: parts.Env, n: tc.Tasks}
	parts.Env = first
	if _, err := r.Execute(g.ctx, parts); err != nil {
		return nil, err
	}
	recs, err := rundir.Read(dir)
	slices.SortStableFunc(recs, func(a, b rundir.Record) int {
		return slices.Index(first.ids, a.TaskID) - slices.Index(first.ids, b.TaskID)
	})
	return recs, err
}

// judgeRollout checks one rollout: the oracle's must pass, nop's must not.
func judgeRollout(ck *checks, kind string, rec rundir.Record, hasVerify bool) {
	what := fmt.Sprintf("%s on %s: %s (reward %g)", kind, rec.TaskID, rec.Outcome, rec.Reward)
	for _, rs := range rec.Rewards {
		if rs.Error != "" {
			ck.fail("%s: [[reward]] %s: %s", what, rs.Name, rs.Error)
		}
	}
	switch {
	case rec.Outcome == rundir.OutcomeInfraError:
		if kind == "nop" || hasVerify {
			ck.fail("%s: %s: %s", what, rec.ErrorClass, firstLines(rec.Error, 8))
		}
	case !hasVerify:
	case rec.Outcome == rundir.OutcomeVerifierFailed:
		ck.fail("%s: the verifier reached no reward: %s", what, firstLines(rec.Error, 8))
	case kind == "oracle" && rec.Outcome != rundir.OutcomePassed:
		ck.fail("%s: the reference solution does not pass its own verifier: %s", what, firstLines(rec.VerifierOutput, 8))
	case kind == "nop" && rec.Outcome == rundir.OutcomePassed:
		ck.fail("%s: the task passes untouched, so its verifier proves nothing", what)
	default:
		ck.ok("%s", what)
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
func (tc testCmd) testReward(g *globals, ck *checks, c *config.Config, i int, p *plugin.Loaded) error {
	m := p.Manifest()
	rw := c.Reward[i]
	name := rw.Name
	if name == "" {
		name = m.Name
	}
	rp := &env.Reward{Name: name, Weight: *rw.Weight, Wasm: p.Plugin, Config: c.RewardConfig(i),
		Info: abi.HostInfo{ProctorVersion: version, Backend: c.Sandbox.Backend}}
	if slices.Contains(m.Hooks, abi.HookConfig) {
		if err := rp.CheckConfig(g.ctx); err != nil {
			ck.fail("config.check: %v", err)
			return nil
		}
		ck.ok("config.check: the [[reward]] table's config is valid")
	} else {
		ck.warn("no config.check: a misspelt key in [reward.config] shows only when a rollout is scored")
	}
	if slices.Contains(rw.Grants, abi.OpModelComplete) {
		complete, err := assemble.JudgeModel(c, openai.NewLimiter(c.Model.MaxConcurrent))
		if err != nil {
			return err
		}
		rp.Complete = complete
	} else if slices.Contains(m.Capabilities, abi.OpModelComplete) {
		ck.warn("the plugin needs model.complete: grant it in its [[reward]] table, with a [model], to score")
		return nil
	}
	inputs, err := tc.recorded(c)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		s := rp.Score(g.ctx, in)
		switch {
		case s.Error != "":
			ck.fail("reward.score on %s: %s", in.Info.RolloutID, firstLines(s.Error, 8))
		case math.IsNaN(s.Reward) || math.IsInf(s.Reward, 0):
			ck.fail("reward.score on %s: reward %g is not a number", in.Info.RolloutID, s.Reward)
		default:
			ck.ok("reward.score on %s: reward %g, scores %v", in.Info.RolloutID, s.Reward, s.Scores)
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
func (tc testCmd) recorded(c *config.Config) ([]scheduler.ScoreInput, error) {
	if tc.RunDir == "" {
		return []scheduler.ScoreInput{sampleRollout}, nil
	}
	recs, err := rundir.Read(tc.RunDir)
	if err != nil {
		return nil, &fault.Usage{Err: err, Hint: "give --run the directory a run wrote (runs/<name>)"}
	}
	var out []scheduler.ScoreInput
	for _, rec := range recs {
		if rec.Transcript == "" || rec.Outcome == rundir.OutcomeInfraError {
			continue
		}
		tr, err := rundir.ReadTranscript(tc.RunDir, rec.Transcript)
		if err != nil {
			return nil, &fault.Usage{Err: fmt.Errorf("rollout %s: %w", rec.RolloutID, err)}
		}
		raw, _ := json.Marshal(abi.Task{ID: rec.TaskID, Category: rec.Category, Difficulty: rec.Difficulty})
		out = append(out, scheduler.ScoreInput{Task: scheduler.Task{ID: rec.TaskID, Category: rec.Category, Difficulty: rec.Difficulty, Raw: raw},
			Info:       scheduler.RolloutInfo{RolloutID: rec.RolloutID, TaskID: rec.TaskID, Attempt: rec.Attempt, Seed: rec.Seed},
			Transcript: tr, Verdict: scheduler.Verdict{Reward: verifierReward(rec), Passed: rec.Outcome == rundir.OutcomePassed, Scores: rec.Scores, Tests: rec.Tests, Output: rec.VerifierOutput}})
		if len(out) == tc.Tasks {
			break
		}
	}
	if len(out) == 0 {
		return nil, &fault.Usage{Err: fmt.Errorf("%s has no recorded rollout with a transcript", tc.RunDir)}
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
