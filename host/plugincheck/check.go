// Package plugincheck holds the checks a plugin author runs before
// sharing a plugin: proctor plugin check (describe, tasks.load, the first
// task's sandbox; or a reward plugin's score of a sample rollout) and
// proctor plugin test (every hook a plugin declares, called as a run calls
// it, with the oracle solving the first tasks and nop not). Each returns
// the list of checks it made; the command prints them.
package plugincheck

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/env"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin"
	"github.com/proctor-dev/proctor/host/plugin/bundled"
	"github.com/proctor-dev/proctor/host/plugin/oci"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/term"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Outcome is how a check ended, as its line starts.
type Outcome string

const (
	OK   Outcome = "ok"
	Warn Outcome = "warn" // worth knowing; fails nothing
	Fail Outcome = "FAIL"
	Skip Outcome = "skip" // not tried, and why
	Note Outcome = "note"
	More Outcome = "" // more of the check above (a skipped task, say)
)

// Check is one check: what was checked, how it ended, and what was found.
type Check struct {
	Name    string
	Outcome Outcome
	Detail  string
}

// String is the check's line, as proctor prints it.
func (c Check) String() string {
	text := c.Name
	if c.Detail != "" {
		text += ": " + c.Detail
	}
	return fmt.Sprintf("%-4s %s", c.Outcome, text)
}

// Counted says whether the check counts towards the total: it passed or
// failed.
func (c Check) Counted() bool { return c.Outcome == OK || c.Outcome == Fail }

// list collects checks.
type list []Check

func (l *list) add(o Outcome, name, format string, args ...any) {
	*l = append(*l, Check{Name: name, Outcome: o, Detail: fmt.Sprintf(format, args...)})
}

// Ref is a plugin reference given on the command line: a relative path
// there is relative to the current directory, not to the config file's
// folder as it would be inside the config.
func Ref(ref string) string {
	if ref == "" || bundled.IsName(ref) || strings.HasPrefix(ref, oci.Scheme) || filepath.IsAbs(ref) {
		return ref
	}
	if abs, err := filepath.Abs(ref); err == nil {
		return abs
	}
	return ref
}

// Config is the config a plugin command runs the plugin ref (from the
// command line) with: the file's, with the plugin in [env], or, without a
// file, the defaults (and model.complete granted, so that a judge loads).
func Config(ref, file string) (*config.Config, error) {
	ref = Ref(ref)
	if file != "" {
		c, err := assemble.LoadConfig(file, nil)
		if err != nil {
			return nil, err
		}
		if i := rewardTable(c, ref); i >= 0 {
			return c, nil // a reward plugin runs with its own [[reward]] table
		}
		c.Env.Plugin, c.Env.SHA256 = ref, ""
		return c, nil
	}
	c := &config.Config{}
	grants := append(slices.Clone(config.DefaultGrants), abi.OpModelComplete)
	c.Env.Plugin, c.Env.Grants, c.Env.MemoryMB, c.Env.HookTimeout.Duration = ref, grants, 256, time.Minute
	c.Env.Config = map[string]any{}
	return c, nil
}

// rewardTable is the index of the config's [[reward]] table that names the
// plugin ref (the same file, or the same reference), or -1.
func rewardTable(c *config.Config, ref string) int {
	for i, rw := range c.Reward {
		if rw.Plugin == ref || c.Resolve(rw.Plugin) == ref || sameFile(c.Resolve(rw.Plugin), ref) {
			return i
		}
	}
	return -1
}

func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// noRewardTable: a reward plugin checked with a config that does not
// stack it.
func noRewardTable(ref, file string) error {
	return &fault.Usage{Err: fmt.Errorf("plugin %s is a reward plugin, and %s has no [[reward]] table for it", ref, file),
		Hint: "add a [[reward]] table with plugin = \"" + ref + "\" (its config goes in [reward.config]), or leave out --config"}
}

// isReward says the plugin only scores: it has reward.score and no tasks.
func isReward(m abi.Manifest) bool {
	return !slices.Contains(m.Hooks, abi.HookTasks) && slices.Contains(m.Hooks, abi.HookReward)
}

// loadReward loads ref and returns it when it is a reward-only plugin (nil
// otherwise), granted what its [[reward]] table in c grants (all it
// declares when c has none).
func loadReward(ctx context.Context, c *config.Config, ref string) (*plugin.Loaded, *wasm.Runtime, error) {
	rt, err := assemble.Runtime(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	p, err := assemble.Plugins(c.BaseDir).Load(ctx, rt, ref, "")
	if err != nil || !isReward(p.Manifest()) {
		rt.Close(ctx)
		return nil, nil, err
	}
	grants := p.Manifest().Capabilities
	if i := rewardTable(c, ref); i >= 0 {
		grants = c.Reward[i].Grants
	}
	if err := p.Grant(grants); err != nil {
		rt.Close(ctx)
		return nil, nil, &fault.Usage{Err: err, Hint: "grant the capabilities in its [[reward]] table: " + assemble.GrantsWith(grants, p.Manifest().Capabilities)}
	}
	return p, rt, nil
}

// Quick loads the plugin ref (from the command line), with the config
// file (none: "") and checks what a run asks of it first: describe, and
// tasks.load and the first task's sandbox for an environment, or
// config.check and reward.score on a sample rollout for a reward plugin.
// A check that fails ends it with the error; the checks before it are
// returned with it.
func Quick(ctx context.Context, h assemble.Host, ref, file string) ([]Check, error) {
	c, err := Config(ref, file)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var l list
	rp, rt, err := loadReward(ctx, c, Ref(ref))
	if err != nil {
		return nil, err
	}
	if rp != nil {
		defer rt.Close(ctx)
		i := rewardTable(c, Ref(ref))
		if file != "" && i < 0 {
			return nil, noRewardTable(ref, file)
		}
		l.described(rp)
		err := l.checkReward(ctx, c, i, rp)
		return l, err
	}
	e, p, rt, err := h.Environment(ctx, c)
	if err != nil {
		return nil, err
	}
	defer rt.Close(ctx)
	l.described(p)
	err = l.checkTasks(ctx, e)
	return l, err
}

// described is check's line on describe.
func (l *list) described(p *plugin.Loaded) {
	m := p.Manifest()
	l.add(OK, "describe", "%s %s (abi v%d.%d, sha256 %.12s)", term.Line(m.Name), term.Line(m.Version), m.ABI, m.ABIMinor, p.SHA256())
}

// checkTasks loads the tasks and asks for the first one's sandbox.
func (l *list) checkTasks(ctx context.Context, e *env.Plugin) error {
	tasks, skipped, err := e.Tasks(ctx)
	if err != nil {
		return &fault.Usage{Err: fmt.Errorf("tasks.load: %w", err)}
	}
	l.add(OK, "tasks.load", "%d tasks, %d skipped", len(tasks), len(skipped))
	for _, s := range skipped {
		l.add(More, "skipped "+term.Line(s.ID), "%s", term.Line(s.Reason))
	}
	if len(tasks) == 0 {
		return nil
	}
	ro, err := e.NewRollout(ctx, tasks[0], scheduler.RolloutInfo{RolloutID: scheduler.RolloutID(tasks[0].ID, 0)})
	if err != nil {
		return &fault.Infra{Err: err}
	}
	defer ro.Close(ctx)
	spec, err := ro.SandboxSpec(ctx)
	if err != nil {
		return &fault.Usage{Err: fmt.Errorf("rollout.sandbox for %s: %w", tasks[0].ID, err)}
	}
	what := spec.Image
	if what == "" || spec.ForceBuild {
		what = fmt.Sprintf("build context of %d bytes", len(spec.BuildContext))
	}
	l.add(OK, "rollout.sandbox for "+term.Line(tasks[0].ID), "%s, workdir %q", term.Line(what), spec.Workdir)
	return nil
}

// checkReward scores a made-up rollout with a reward-only plugin: one
// user message, one answer, a passed verdict, with the config of the
// plugin's [[reward]] table i (none when i < 0).
func (l *list) checkReward(ctx context.Context, c *config.Config, i int, p *plugin.Loaded) error {
	m := p.Manifest()
	cfg := json.RawMessage("{}")
	if i >= 0 {
		cfg = c.RewardConfig(i)
	}
	rp := &env.Reward{Name: m.Name, Weight: 1, Wasm: p.Plugin, Config: cfg}
	if err := rp.CheckConfig(ctx); err != nil {
		return &fault.Usage{Err: fmt.Errorf("config.check: %w", err)}
	}
	if slices.Contains(m.Capabilities, abi.OpModelComplete) {
		l.add(Skip, "reward.score", "the plugin needs model.complete; stack it in a run with a [model] to try it")
		return nil
	}
	if slices.Contains(m.OptionalCapabilities, abi.OpModelComplete) {
		// check serves no model: the plugin sees model.complete denied,
		// as in a run that does not grant it.
		l.add(Note, "model.complete is optional for this plugin and check serves no model", "scored as if it were not granted; stack it in a run with a [model] to try the rest")
	}
	s := rp.Score(ctx, sampleRollout)
	if s.Error != "" {
		return &fault.Usage{Err: fmt.Errorf("reward.score: %s", s.Error)}
	}
	l.add(OK, "reward.score on a sample rollout", "reward %g, scores %v", s.Reward, s.Scores)
	return nil
}
