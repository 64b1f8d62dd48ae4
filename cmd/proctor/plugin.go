package main

import (
	"context"
	"encoding/json"
	"errors"
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

type pluginCmd struct {
	Inspect inspectCmd `cmd:"" help:"Show a plugin's name, version, sha256, ABI, hooks, capabilities and config schema."`
	Check   checkCmd   `cmd:"" help:"Load a plugin, run describe and tasks.load, and validate what comes back."`
	Test    testCmd    `cmd:"" help:"Test a plugin before sharing it: every hook it declares, the oracle solving the first tasks and nop not."`
	New     newCmd     `cmd:"" help:"Write a new plugin module, ready to build, test and run."`
	Push    pushCmd    `cmd:"" help:"Push a plugin to an OCI registry, its manifest as annotations."`
	Pull    pullCmd    `cmd:"" help:"Pull a plugin from an OCI registry into the cache, verified."`
	Build   buildCmd   `cmd:"" help:"Build a plugin written in Python into one .wasm file."`
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

// checkReward scores a made-up rollout with a reward-only plugin: one
// user message, one answer, a passed verdict, with the config of the
// plugin's [[reward]] table i (none when i < 0).
func checkReward(ctx context.Context, g *globals, c *config.Config, i int, p *plugin.Loaded) error {
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
		fmt.Fprintf(g.stdout, "skip reward.score: the plugin needs model.complete; stack it in a run with a [model] to try it\n")
		return nil
	}
	if slices.Contains(m.OptionalCapabilities, abi.OpModelComplete) {
		// check serves no model: the plugin sees model.complete denied,
		// as in a run that does not grant it.
		fmt.Fprintf(g.stdout, "note model.complete is optional for this plugin and check serves no model: scored as if it were not granted; stack it in a run with a [model] to try the rest\n")
	}
	s := rp.Score(ctx, sampleRollout)
	if s.Error != "" {
		return &fault.Usage{Err: fmt.Errorf("reward.score: %s", s.Error)}
	}
	fmt.Fprintf(g.stdout, "ok   reward.score on a sample rollout: reward %g, scores %v\n", s.Reward, s.Scores)
	return nil
}

type pushCmd struct {
	File string `arg:"" help:"A bundled plugin's name (tb2, swesmith) or the path of a .wasm file."`
	Ref  string `arg:"" help:"Where to: [oci://]registry/repository:tag."`
}

func (pc pushCmd) Run(g *globals) error {
	rt, err := assemble.InspectRuntime(g.ctx)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	f, err := assemble.Plugins("").Read(g.ctx, pc.File) // a bundled name first, a path otherwise
	if err != nil {
		return err
	}
	b := f.Wasm
	p, err := rt.Load(g.ctx, pc.File, b) // checks it is a plugin before it is shared
	if err != nil {
		return &fault.Usage{Err: err}
	}
	m := p.Manifest()
	digest, err := oci.New(filepath.Join(assemble.CacheDir(), "oci")).Push(g.ctx, pc.Ref, b, oci.Meta{
		Name: m.Name, Version: m.Version, Description: m.Description, ABI: m.ABI,
		Capabilities: append(slices.Clone(m.Capabilities), m.OptionalCapabilities...),
	})
	if errors.Is(err, oci.ErrUnreachable) {
		return &fault.Infra{Err: err, Hint: "check that the registry is up and reachable, and try again"}
	}
	if err != nil {
		return &fault.Usage{Err: err, Hint: "check the reference and your credentials (docker login)"}
	}
	fmt.Fprintf(g.stdout, "pushed  %s %s\ndigest  %s\nsha256  %s\npin     plugin = \"oci://%s@%s\"\n", m.Name, m.Version, digest, p.SHA256(), repository(pc.Ref), digest)
	return nil
}

// repository is a reference without its scheme, tag and digest.
func repository(ref string) string {
	repo := oci.Strip(ref)
	repo, _, _ = strings.Cut(repo, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i] // drop the tag
	}
	return repo
}

type pullCmd struct {
	Ref string `arg:"" help:"[oci://]registry/repository:tag or @sha256:..."`
}

// Run pulls and verifies the plugin and says what it is from its
// annotations: nothing of the plugin runs.
func (pc pullCmd) Run(g *globals) error {
	ref := pc.Ref
	if !strings.HasPrefix(ref, oci.Scheme) {
		ref = oci.Scheme + ref
	}
	f, err := assemble.Plugins("").Read(g.ctx, ref)
	if err != nil {
		return err
	}
	m := f.Pulled.Meta
	caps := strings.Join(m.Capabilities, ", ")
	if caps == "" {
		caps = "(none)"
	}
	fmt.Fprintf(g.stdout, "pulled  %s %s\nsource  %s\ndigest  %s\nsha256  %s\nabi     v%d\ncaps    %s\ncached  %s\npin     plugin = \"oci://%s@%s\"\n",
		m.Name, m.Version, f.Source, f.Digest, f.SHA256, m.ABI, caps, f.Pulled.Path, repository(ref), f.Digest)
	return nil
}

type inspectCmd struct {
	Plugin string `arg:"" help:"Bundled name (tb2, swesmith), path of a .wasm file, or oci://registry/repository:tag (or @sha256:...)."`
}

func (i inspectCmd) Run(g *globals) error {
	rt, err := assemble.InspectRuntime(g.ctx)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	p, err := assemble.Plugins("").Load(g.ctx, rt, i.Plugin, "")
	if err != nil {
		return err
	}
	m := p.Manifest()
	fmt.Fprintf(g.stdout, "name          %s\nversion       %s\nsource        %s\nsha256        %s\nabi           v%d.%d\n",
		term.Line(m.Name), term.Line(m.Version), p.Source, p.SHA256(), m.ABI, m.ABIMinor)
	if m.SDK != "" {
		fmt.Fprintf(g.stdout, "sdk           %s\n", term.Line(m.SDK))
	}
	fmt.Fprintf(g.stdout, "hooks         %s\ncapabilities  %s\n", term.Line(strings.Join(m.Hooks, ", ")), term.Line(strings.Join(m.Capabilities, ", ")))
	if len(m.OptionalCapabilities) > 0 {
		fmt.Fprintf(g.stdout, "optional      %s (used only when granted)\n", term.Line(strings.Join(m.OptionalCapabilities, ", ")))
	}
	if m.Description != "" {
		fmt.Fprintf(g.stdout, "description   %s\n", term.Line(m.Description))
	}
	if len(m.ConfigSchema) > 0 {
		var v any
		json.Unmarshal(m.ConfigSchema, &v)
		b, _ := json.MarshalIndent(v, "              ", "  ")
		fmt.Fprintf(g.stdout, "config schema %s\n", b)
	}
	return nil
}

type checkCmd struct {
	Plugin string `arg:"" help:"Bundled name or path of a .wasm file."`
	Config string `help:"A run config whose [env.config] is handed to the plugin." type:"path"`
}

// cliPlugin is a plugin reference given on the command line: a relative
// path there is relative to the current directory, not to the config
// file's folder as it would be inside the config.
func cliPlugin(ref string) string {
	if ref == "" || bundled.IsName(ref) || strings.HasPrefix(ref, oci.Scheme) || filepath.IsAbs(ref) {
		return ref
	}
	if abs, err := filepath.Abs(ref); err == nil {
		return abs
	}
	return ref
}

// pluginConfig is the config a plugin command runs the plugin with: the
// file's, with the plugin given on the command line in [env], or, without
// a file, the defaults (and model.complete granted, so that a judge loads).
func pluginConfig(ref, file string) (*config.Config, error) {
	ref = cliPlugin(ref)
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

func (ch checkCmd) Run(g *globals) error {
	c, err := pluginConfig(ch.Plugin, ch.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(g.ctx, 5*time.Minute)
	defer cancel()
	ref := cliPlugin(ch.Plugin)
	if rp, rt, err := loadReward(ctx, c, ref); err != nil {
		return err
	} else if rp != nil {
		defer rt.Close(ctx)
		i := rewardTable(c, ref)
		if ch.Config != "" && i < 0 {
			return noRewardTable(ch.Plugin, ch.Config)
		}
		m := rp.Manifest()
		fmt.Fprintf(g.stdout, "ok   describe: %s %s (abi v%d.%d, sha256 %.12s)\n", term.Line(m.Name), term.Line(m.Version), m.ABI, m.ABIMinor, rp.SHA256())
		return checkReward(ctx, g, c, i, rp)
	}
	env, p, rt, err := host().Environment(ctx, c)
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	m := p.Manifest()
	fmt.Fprintf(g.stdout, "ok   describe: %s %s (abi v%d.%d, sha256 %.12s)\n", term.Line(m.Name), term.Line(m.Version), m.ABI, m.ABIMinor, p.SHA256())
	tasks, skipped, err := env.Tasks(ctx)
	if err != nil {
		return &fault.Usage{Err: fmt.Errorf("tasks.load: %w", err)}
	}
	fmt.Fprintf(g.stdout, "ok   tasks.load: %d tasks, %d skipped\n", len(tasks), len(skipped))
	for _, s := range skipped {
		fmt.Fprintf(g.stdout, "     skipped %s: %s\n", term.Line(s.ID), term.Line(s.Reason))
	}
	if len(tasks) > 0 {
		ro, err := env.NewRollout(ctx, tasks[0], scheduler.RolloutInfo{RolloutID: scheduler.RolloutID(tasks[0].ID, 0)})
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
		fmt.Fprintf(g.stdout, "ok   rollout.sandbox for %s: %s, workdir %q\n", term.Line(tasks[0].ID), term.Line(what), spec.Workdir)
	}
	return nil
}
