package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/host"
	"github.com/proctor-dev/proctor/host/config"
)

type pluginCmd struct {
	Inspect inspectCmd `cmd:"" help:"Show a plugin's name, version, sha256, ABI, hooks, capabilities and config schema."`
	Check   checkCmd   `cmd:"" help:"Load a plugin, run describe and tasks.load, and validate what comes back."`
}

type inspectCmd struct {
	Plugin string `arg:"" help:"Bundled name (tb2, swesmith) or path of a .wasm file."`
}

func (i inspectCmd) Run(g *globals) error {
	c := &config.Config{}
	c.Env.MemoryMB, c.Env.HookTimeout.Duration = 256, time.Minute
	rt, err := newRuntime(g.ctx, c)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	p, err := loadPlugin(g.ctx, rt, i.Plugin, "", "")
	if err != nil {
		return err
	}
	m := p.Manifest()
	fmt.Fprintf(g.stdout, "name          %s\nversion       %s\nsource        %s\nsha256        %s\nabi           v%d\nhooks         %s\ncapabilities  %s\n",
		m.Name, m.Version, p.source, p.SHA256(), m.ABI, strings.Join(m.Hooks, ", "), strings.Join(m.Capabilities, ", "))
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
		c.Env.Plugin, c.Env.Grants, c.Env.MemoryMB, c.Env.HookTimeout.Duration = ch.Plugin, config.DefaultGrants, 256, time.Minute
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
	tasks, skipped, err := env.Tasks(ctx)
	if err != nil {
		return &usageError{err: fmt.Errorf("tasks.load: %w", err)}
	}
	fmt.Fprintf(g.stdout, "ok   tasks.load: %d tasks, %d skipped\n", len(tasks), len(skipped))
	for _, s := range skipped {
		fmt.Fprintf(g.stdout, "     skipped %s: %s\n", s.ID, s.Reason)
	}
	if len(tasks) > 0 {
		ro, err := env.NewRollout(ctx, tasks[0], host.RolloutInfo{RolloutID: host.RolloutID(tasks[0].ID, 0)})
		if err != nil {
			return &infraError{err: err}
		}
		defer ro.Close(ctx)
		spec, err := ro.SandboxSpec(ctx)
		if err != nil {
			return &usageError{err: fmt.Errorf("rollout.sandbox for %s: %w", tasks[0].ID, err)}
		}
		what := spec.Image
		if what == "" || spec.ForceBuild {
			what = fmt.Sprintf("build context of %d bytes", len(spec.BuildContext))
		}
		fmt.Fprintf(g.stdout, "ok   rollout.sandbox for %s: %s, workdir %q\n", tasks[0].ID, what, spec.Workdir)
	}
	return nil
}
