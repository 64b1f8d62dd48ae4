// Package assemble builds the parts of a run from its config: the plugin
// loader and runtime on proctor's cache folders, the environment plugin
// with its dataset reader and repository cache, the stacked reward
// plugins, the agent with its adapters and models, and the sandbox
// backend. eval, process, serve and plugin test all build runs here, so a
// run is the same whichever command starts it; cmd/proctor keeps the
// flags and the printing.
package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/dataset"
	"github.com/proctor-dev/proctor/host/env"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/repocache"
	hostrun "github.com/proctor-dev/proctor/host/run"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/local"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Host is what the plugins of a run are told of the proctor that runs
// them (abi.HostInfo).
type Host struct {
	Version string // proctor's version
}

// LoadConfig loads the run config at path with the --set overrides, and
// maps config mistakes to usage errors with their hint.
func LoadConfig(path string, sets []string) (*config.Config, error) {
	c, err := config.Load(path, sets)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return nil, &fault.Usage{Err: err, Hint: ce.Hint}
		}
		return nil, &fault.Usage{Err: err}
	}
	return c, nil
}

// CacheDir is proctor's cache folder: $PROCTOR_CACHE_DIR, or proctor in
// the user's cache folder.
func CacheDir() string {
	if d := os.Getenv("PROCTOR_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "proctor-cache")
	}
	return filepath.Join(d, "proctor")
}

// Plugins finds plugins for a config in baseDir (its folder; "" for
// references from the command line).
func Plugins(baseDir string) plugin.Loader {
	return plugin.Loader{BaseDir: baseDir, OCICache: filepath.Join(CacheDir(), "oci")}
}

// Runtime is the plugin runtime of c's [env] limits, which the reward
// plugins share.
func Runtime(ctx context.Context, c *config.Config) (*wasm.Runtime, error) {
	rt, err := wasm.NewRuntime(ctx, wasm.Config{
		CacheDir:       filepath.Join(CacheDir(), "wasm"),
		MemoryLimitMiB: c.Env.MemoryMB,
		HookTimeout:    c.Env.HookTimeout.Duration,
		// Reward plugins share the runtime and the limit.
		HookTimeoutName: "[env] hook_timeout",
	})
	if err != nil {
		return nil, &fault.Infra{Err: fmt.Errorf("plugin runtime: %w", err)}
	}
	return rt, nil
}

// Environment loads the config's plugin and wraps it for the runner, on
// a runtime of its own that the caller closes.
func (h Host) Environment(ctx context.Context, c *config.Config) (*env.Plugin, *plugin.Loaded, *wasm.Runtime, error) {
	rt, err := Runtime(ctx, c)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := Plugins(c.BaseDir).Load(ctx, rt, c.Env.Plugin, c.Env.SHA256)
	if err != nil {
		rt.Close(ctx)
		return nil, nil, nil, err
	}
	if err := p.Grant(c.Env.Grants); err != nil {
		rt.Close(ctx)
		return nil, nil, nil, &fault.Usage{Err: err, Hint: "grant the capabilities in [env]: " + GrantsWith(c.Env.Grants, p.Manifest().Capabilities) + ", or check that this is the plugin you meant"}
	}
	ds := &dataset.Reader{BaseDir: c.BaseDir, Hub: dataset.NewHub(filepath.Join(CacheDir(), "hf")), Named: c.Named()}
	e := &env.Plugin{
		Wasm:    p.Plugin,
		Config:  c.PluginConfig(),
		Dataset: namedDatasets(ds, c.Env.Plugin),
		Repos:   repocache.New(filepath.Join(CacheDir(), "repos")),
		Info:    abi.HostInfo{ProctorVersion: h.Version, Backend: c.Sandbox.Backend},
		Network: c.Sandbox.Network,
		Log:     slog.Default(),
	}
	if err := e.CheckConfig(ctx); err != nil {
		rt.Close(ctx)
		return nil, nil, nil, &fault.Usage{Err: fmt.Errorf("[env.config]: %w", err), Hint: "fix [env.config]; proctor plugin inspect shows the plugin's config schema"}
	}
	return e, p, rt, nil
}

// namedDatasets serves dataset.read from ds, which serves only what the
// config names. A refusal is the plugin's denied operation, and the user
// hears of it even when the plugin swallows the error.
func namedDatasets(ds *dataset.Reader, plugin string) func(context.Context, abi.DatasetRequest) (abi.DatasetResponse, error) {
	return func(ctx context.Context, req abi.DatasetRequest) (abi.DatasetResponse, error) {
		resp, err := ds.Read(ctx, req)
		if de := (*dataset.DeniedError)(nil); errors.As(err, &de) {
			slog.Warn("a plugin asked for a dataset the config does not name: refused", "plugin", plugin, "source", req.Source)
			return resp, &wasm.OpError{Status: abi.StatusDenied, Err: err}
		}
		return resp, err
	}
}

// Parts builds the parts of a run of c: the sandbox backend, the
// environment plugin, the stacked reward plugins and the agent. done
// closes the plugin runtime.
func (h Host) Parts(ctx context.Context, c *config.Config) (parts hostrun.Parts, done func(), err error) {
	be, prune, err := Backend(ctx, c)
	if err != nil {
		return parts, nil, err
	}
	e, p, rt, err := h.Environment(ctx, c)
	if err != nil {
		return parts, nil, err
	}
	done = func() { rt.Close(context.WithoutCancel(ctx)) }
	c.ForPlugin(p.Manifest().Name)
	if c.Sandbox.Network == config.NetworkAuto {
		e.NoDefaultNetwork = be.Abilities(ctx).NoDefaultNetwork
	}
	// One limiter for the run: [model] max_concurrent_requests counts the
	// agent's requests and the judges' together.
	lim := openai.NewLimiter(c.Model.MaxConcurrent)
	scorers, infos, err := h.rewards(ctx, c, rt, lim)
	if err != nil {
		done()
		return parts, nil, err
	}
	var ag scheduler.Agent
	if c.Agent.Kind == "installed" {
		ag, be, err = installedAgent(c, be, lim)
	} else {
		ag, err = agentFor(c, lim)
	}
	if err != nil {
		done()
		return parts, nil, err
	}
	return hostrun.Parts{Backend: be, Prune: prune, Env: e, EnvInfo: PluginInfo(p.Manifest().Name, p), ScoringKeys: p.Manifest().ScoringKeys,
		Rewards: scorers, RewardInfos: infos, Agent: ag}, done, nil
}

// PluginInfo is what the manifest records of a plugin that runs under name.
func PluginInfo(name string, p *plugin.Loaded) rundir.PluginInfo {
	return rundir.PluginInfo{Name: name, Version: p.Manifest().Version, SHA256: p.SHA256(), Source: p.Source, Digest: p.Digest}
}

// Backend makes the sandbox backend c names and checks that it answers.
func Backend(ctx context.Context, c *config.Config) (sandbox.Backend, hostrun.Pruner, error) {
	switch c.Sandbox.Backend {
	case "local":
		return local.Backend{}, local.Backend{}.Prune, nil
	case "kubernetes":
		b, err := Kubernetes(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		return b, b.Prune, nil
	default:
		b, err := docker.New(append(tmuxBind(c), docker.WithIsolation(c.Sandbox.Isolated()))...)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err = b.Ping(pctx)
			cancel()
		}
		if err != nil {
			return nil, nil, &fault.Infra{Err: err, Hint: "start the engine with `make engine`, or set [sandbox] backend = \"local\" for trusted development tasks"}
		}
		return b, b.Prune, nil
	}
}

// agentFor builds the configured agent; an llm agent's requests go
// through lim, the run's limiter.
func agentFor(c *config.Config, lim *openai.Limiter) (scheduler.Agent, error) {
	switch c.Agent.Kind {
	case "oracle":
		return agentFunc(func(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
			tr, err := agent.Oracle(ctx, func(ctx context.Context) (agent.OracleRun, error) {
				res, err := in.Oracle(ctx)
				return agent.OracleRun{Output: res.Output, ExitCode: res.ExitCode}, err
			})
			if errors.Is(err, scheduler.ErrNoOracle) {
				err = scheduler.WithClass(rundir.ClassPlugin, fmt.Errorf("the environment has no oracle for task %s", in.Task.ID))
			}
			return scheduler.AgentOutput{Transcript: transcript(in, tr), StopReason: tr.StopReason}, err
		}), nil
	case "nop":
		return agentFunc(func(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
			tr := agent.Nop()
			return scheduler.AgentOutput{Transcript: transcript(in, tr), StopReason: tr.StopReason}, nil
		}), nil
	case "replay":
		script, err := agent.LoadScript(c.Resolve(c.Agent.Script))
		if err != nil {
			return nil, &fault.Usage{Err: err, Hint: "agent.script is relative to the config file's folder"}
		}
		tools, err := agent.NewToolsetWith(c.Agent.Tools, agent.ToolOptions{CommandTimeout: c.Agent.TerminalTimeout})
		if err != nil {
			return nil, &fault.Usage{Err: err}
		}
		return loopAgent(func(scheduler.AgentInput) agent.Model { return &agent.Replay{Script: script} }, tools, c, "replay"), nil
	case "llm":
		tools, err := agent.NewToolsetWith(c.Agent.Tools, agent.ToolOptions{CommandTimeout: c.Agent.TerminalTimeout})
		if err != nil {
			return nil, &fault.Usage{Err: err}
		}
		newModel, err := models(c, lim)
		if err != nil {
			return nil, err
		}
		return loopAgent(newModel, tools, c, "llm"), nil
	case config.KindTerminus2, config.KindMiniSWEAgent:
		return referenceAgent(c, lim)
	}
	return nil, &fault.Usage{Err: fmt.Errorf("unknown agent kind %q", c.Agent.Kind)}
}

type agentFunc func(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error)

func (f agentFunc) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	return f(ctx, in)
}

func loopAgent(model func(in scheduler.AgentInput) agent.Model, tools *agent.Toolset, c *config.Config, kind string) scheduler.Agent {
	return agentFunc(func(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
		system := c.Agent.SystemPrompt
		if system == "" {
			system = in.System
		}
		l := &agent.Loop{Model: model(in), Tools: tools, MaxTurns: c.Agent.MaxTurns, System: system, Name: c.Model.Name}
		tr, err := l.Run(ctx, in.Sandbox, in.Prompt)
		tr.Agent = kind
		out := scheduler.AgentOutput{Transcript: transcript(in, tr), Turns: len(tr.Turns), StopReason: tr.StopReason, Usage: tr.Usage}
		if err != nil {
			err = scheduler.WithClass(rundir.ClassModel, err)
		}
		return out, err
	})
}

// transcript is what transcripts/<id>.json holds.
func transcript(in scheduler.AgentInput, tr agent.Trajectory) agent.Transcript {
	return agent.Transcript{RolloutID: in.RolloutID, TaskID: in.Task.ID, Seed: in.Seed, Prompt: in.Prompt, System: in.System, Trajectory: &tr}
}

// InspectRuntime is the plugin runtime of commands that load a plugin
// without a run config: inspect, push, build.
func InspectRuntime(ctx context.Context) (*wasm.Runtime, error) {
	c := &config.Config{}
	c.Env.MemoryMB, c.Env.HookTimeout.Duration = 256, time.Minute
	return Runtime(ctx, c)
}

// EvalParts is parts for the evaluations of [serve] steps_per_eval: the
// same plugin with [serve.eval] config in place of [env.config].
func EvalParts(parts hostrun.Parts, c *config.Config) hostrun.Parts {
	if e, ok := parts.Env.(*env.Plugin); ok {
		ev := *e
		ev.Config = c.EvalConfig()
		parts.Env = &ev
	}
	return parts
}
