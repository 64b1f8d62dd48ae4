package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/env"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin"
	"github.com/proctor-dev/proctor/host/plugin/oci"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sdk/abi"
)

type pluginCmd struct {
	Inspect inspectCmd `cmd:"" help:"Show a plugin's name, version, sha256, ABI, hooks, capabilities and config schema."`
	Check   checkCmd   `cmd:"" help:"Load a plugin, run describe and tasks.load, and validate what comes back."`
	Push    pushCmd    `cmd:"" help:"Push a plugin to an OCI registry, its manifest as annotations."`
	Pull    pullCmd    `cmd:"" help:"Pull a plugin from an OCI registry into the cache, verified."`
	Build   buildCmd   `cmd:"" help:"Build a plugin written in Python into one .wasm file."`
}

// checkReward scores a made-up rollout with a reward-only plugin: one
// user message, one answer, a passed verdict.
func checkReward(ctx context.Context, g *globals, c *config.Config, p *plugin.Loaded) error {
	m := p.Manifest()
	rp := &env.Reward{Name: m.Name, Weight: 1, Wasm: p.Plugin, Config: c.PluginConfig()}
	if slices.Contains(m.Capabilities, abi.OpModelComplete) {
		fmt.Fprintf(g.stdout, "skip reward.score: the plugin needs model.complete; stack it in a run with a [model] to try it\n")
		return nil
	}
	if slices.Contains(m.OptionalCapabilities, abi.OpModelComplete) {
		// check serves no model: the plugin sees model.complete denied,
		// as in a run that does not grant it.
		fmt.Fprintf(g.stdout, "note model.complete is optional for this plugin and check serves no model: scored as if it were not granted; stack it in a run with a [model] to try the rest\n")
	}
	tr := []byte(`{"task_id":"check","prompt":"Say hello.","trajectory":{"agent":"llm","messages":[{"role":"user","content":"Say hello."},{"role":"assistant","content":"Hello."}],"turns":[{"index":0,"usage":{"prompt_tokens":10,"completion_tokens":2}}],"stop_reason":"done"}}`)
	s := rp.Score(ctx, scheduler.ScoreInput{Task: scheduler.Task{ID: "check"}, Info: scheduler.RolloutInfo{RolloutID: "check#0"}, Transcript: tr,
		Verdict: scheduler.Verdict{Reward: 1, Passed: true}})
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
	rt, err := inspectRuntime(g.ctx)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	f, err := plugins("").Read(g.ctx, pc.File) // a bundled name first, a path otherwise
	if err != nil {
		return err
	}
	b := f.Wasm
	p, err := rt.Load(g.ctx, pc.File, b) // checks it is a plugin before it is shared
	if err != nil {
		return &fault.Usage{Err: err}
	}
	m := p.Manifest()
	digest, err := oci.New(filepath.Join(cacheDir(), "oci")).Push(g.ctx, pc.Ref, b, oci.Meta{
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
	f, err := plugins("").Read(g.ctx, ref)
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

func inspectRuntime(ctx context.Context) (*wasm.Runtime, error) {
	c := &config.Config{}
	c.Env.MemoryMB, c.Env.HookTimeout.Duration = 256, time.Minute
	return newRuntime(ctx, c)
}

type inspectCmd struct {
	Plugin string `arg:"" help:"Bundled name (tb2, swesmith), path of a .wasm file, or oci://registry/repository:tag (or @sha256:...)."`
}

func (i inspectCmd) Run(g *globals) error {
	rt, err := inspectRuntime(g.ctx)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	p, err := plugins("").Load(g.ctx, rt, i.Plugin, "")
	if err != nil {
		return err
	}
	m := p.Manifest()
	fmt.Fprintf(g.stdout, "name          %s\nversion       %s\nsource        %s\nsha256        %s\nabi           v%d\nhooks         %s\ncapabilities  %s\n",
		m.Name, m.Version, p.Source, p.SHA256(), m.ABI, strings.Join(m.Hooks, ", "), strings.Join(m.Capabilities, ", "))
	if len(m.OptionalCapabilities) > 0 {
		fmt.Fprintf(g.stdout, "optional      %s (used only when granted)\n", strings.Join(m.OptionalCapabilities, ", "))
	}
	if m.Description != "" {
		fmt.Fprintf(g.stdout, "description   %s\n", m.Description)
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

func (ch checkCmd) Run(g *globals) error {
	var c *config.Config
	if ch.Config != "" {
		var err error
		c, err = loadConfig(ch.Config, []string{"env.plugin=" + ch.Plugin})
		if err != nil {
			return err
		}
	} else {
		c = &config.Config{}
		// Without a config, a judge's model.complete is allowed to load
		// (check does not call it).
		grants := append(slices.Clone(config.DefaultGrants), abi.OpModelComplete)
		c.Env.Plugin, c.Env.Grants, c.Env.MemoryMB, c.Env.HookTimeout.Duration = ch.Plugin, grants, 256, time.Minute
		c.Env.Config = map[string]any{}
	}
	ctx, cancel := context.WithTimeout(g.ctx, 5*time.Minute)
	defer cancel()
	env, p, rt, err := environment(ctx, c)
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	m := p.Manifest()
	fmt.Fprintf(g.stdout, "ok   describe: %s %s (abi v%d, sha256 %.12s)\n", m.Name, m.Version, m.ABI, p.SHA256())
	if !slices.Contains(m.Hooks, abi.HookTasks) && slices.Contains(m.Hooks, abi.HookReward) {
		return checkReward(ctx, g, c, p)
	}
	tasks, skipped, err := env.Tasks(ctx)
	if err != nil {
		return &fault.Usage{Err: fmt.Errorf("tasks.load: %w", err)}
	}
	fmt.Fprintf(g.stdout, "ok   tasks.load: %d tasks, %d skipped\n", len(tasks), len(skipped))
	for _, s := range skipped {
		fmt.Fprintf(g.stdout, "     skipped %s: %s\n", s.ID, s.Reason)
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
		fmt.Fprintf(g.stdout, "ok   rollout.sandbox for %s: %s, workdir %q\n", tasks[0].ID, what, spec.Workdir)
	}
	return nil
}
