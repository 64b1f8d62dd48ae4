package assemble

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"regexp"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/miniswe"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/agent/terminus"
	"github.com/proctor-dev/proctor/agent/terminus/tmuxbin"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
)

// tmuxDir is where the docker backend binds the static tmux.
const tmuxDir = "/.proctor-tmux"

// referenceAgent builds Terminus-2 or mini-swe-agent. Its model is the
// endpoint, or, when [agent] script names one, a recorded run replayed.
func referenceAgent(c *config.Config, lim *openai.Limiter) (scheduler.Agent, error) {
	newModel, err := referenceModel(c, lim)
	if err != nil {
		return nil, err
	}
	return agentFunc(func(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
		inner := newModel(in)
		model := faultModel{inner}
		var tr agent.Trajectory
		var err error
		if c.Agent.Kind == config.KindTerminus2 {
			a := &terminus.Agent{Model: model, Name: c.Model.Name, Opts: terminusOptions(c, in)}
			tr, err = a.Run(ctx, in.Sandbox, in.Prompt)
		} else {
			a := &miniswe.Agent{Model: model, Name: c.Model.Name, Opts: miniOptions(c)}
			tr, err = a.Run(ctx, in.Sandbox, in.Prompt)
		}
		if s, ok := inner.(agent.Sampler); ok {
			sp := s.Sampling()
			tr.Sampling = &sp
		}
		out := scheduler.AgentOutput{Transcript: transcript(in, tr), Turns: len(tr.Turns), StopReason: tr.StopReason, Usage: tr.Usage}
		var mf *modelFault
		switch {
		case err == nil:
		case errors.As(err, &mf):
			err = scheduler.WithClass(rundir.ClassModel, err)
		case errors.Is(err, sandbox.ErrGone) || errors.Is(err, sandbox.ErrClosed):
			err = scheduler.WithClass(rundir.ClassSandbox, err)
		}
		return out, err
	}), nil
}

// referenceModel is the endpoint's client per rollout, or a replay of
// [agent] script (a script or a recorded run's transcript).
func referenceModel(c *config.Config, lim *openai.Limiter) (func(scheduler.AgentInput) agent.Model, error) {
	if c.Agent.Script != "" {
		script, err := agent.LoadScript(c.Resolve(c.Agent.Script))
		if err != nil {
			return nil, &fault.Usage{Err: err, Hint: "agent.script is relative to the config file's folder"}
		}
		return func(scheduler.AgentInput) agent.Model { return &agent.Replay{Script: script} }, nil
	}
	if _, set := c.Model.ExtraBody["parallel_tool_calls"]; c.Agent.Kind == config.KindMiniSWEAgent && !set {
		// swebench.yaml's model_kwargs: parallel_tool_calls: true.
		cc := *c
		cc.Model.ExtraBody = map[string]any{"parallel_tool_calls": true}
		maps.Copy(cc.Model.ExtraBody, c.Model.ExtraBody)
		c = &cc
	}
	return models(c, lim)
}

// faultModel marks the model's failures (after the client's retries), so
// that a rollout they end is the model's infra_error, not the agent's.
type faultModel struct{ agent.Model }

func (m faultModel) Complete(ctx context.Context, msgs []agent.Message, tools []agent.Schema) (agent.Reply, error) {
	r, err := m.Model.Complete(ctx, msgs, tools)
	if err != nil && !errors.Is(err, agent.ErrContextLength) && ctx.Err() == nil {
		err = &modelFault{err}
	}
	return r, err
}

type modelFault struct{ err error }

func (e *modelFault) Error() string { return e.err.Error() }
func (e *modelFault) Unwrap() error { return e.err }

var socketName = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// terminusOptions maps [agent.terminus_2] to the agent's options. On the
// local backend the session gets a tmux server and a log folder of its
// own: the machine's /tmp and / are shared.
func terminusOptions(c *config.Config, in scheduler.AgentInput) terminus.Options {
	t := c.Agent.Terminus2
	o := terminus.Options{
		Parser: t.ParserName, MaxTurns: c.Agent.MaxTurns, PaneWidth: t.TmuxPaneWidth, PaneHeight: t.TmuxPaneHeight,
		NoSummarize: !*t.EnableSummarize, ProactiveThreshold: t.ProactiveSummarizationThreshold,
		MaxInputTokens: t.MaxInputTokens, MaxOutputTokens: t.MaxOutputTokens,
		InterleavedThinking: t.InterleavedThinking, NoRecording: !*t.RecordTerminalSession,
		Tmux: terminus.Tmux{Dir: tmuxDir, Binary: tmuxbin.Binary},
	}
	if l, ok := in.Sandbox.(interface{ Root() string }); ok {
		o.Socket = "proctor-" + socketName.ReplaceAllString(in.RolloutID, "_")
		o.LogDir = l.Root() + "/logs/agent"
	}
	return o
}

// miniOptions maps [agent.mini_swe_agent] to the agent's options.
func miniOptions(c *config.Config) miniswe.Options {
	m := c.Agent.MiniSWEAgent
	prices := c.Model.Prices
	return miniswe.Options{StepLimit: c.Agent.MaxTurns, CostLimit: m.CostLimit, FormatLimit: m.MaxConsecutiveFormatErrors,
		Cwd: m.Cwd, Timeout: time.Duration(m.Timeout) * time.Second,
		Cost: func(u agent.Usage) float64 { return prices.Cost(u.PromptTokens, u.CachedTokens, u.CompletionTokens) }}
}

// tmuxBind is the docker backend's option that binds the static tmux in,
// for a Terminus-2 run; without one built, a warning: tasks whose image
// has tmux still run.
func tmuxBind(c *config.Config) []docker.Option {
	if c.Agent.Kind != config.KindTerminus2 {
		return nil
	}
	dir, err := tmuxbin.Find()
	if err != nil {
		slog.Warn("terminus-2: no static tmux on this machine; tasks whose image has no tmux will fail (build it once with `make tmux`)")
		return nil
	}
	return []docker.Option{docker.WithReadOnlyDir(dir, tmuxDir)}
}
