package assemble

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/gateway"
	"github.com/proctor-dev/proctor/agent/installed"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	hostrun "github.com/proctor-dev/proctor/host/run"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sandbox"
)

// installedAgent is the installed agent of c (agent/installed): its CLI,
// installed into the task's image once (the backend's sandboxes get the
// layer), runs in each rollout's sandbox with its model calls going
// through a gateway of the rollout to the run's endpoint, under lim.
func installedAgent(c *config.Config, be sandbox.Backend, lim *openai.Limiter) (scheduler.Agent, sandbox.Backend, error) {
	def, err := installed.Load(c.Agent.Name, c.BaseDir, c.Agent.Version)
	if err != nil {
		return nil, nil, &fault.Usage{Err: fmt.Errorf("[agent] name: %w", err), Hint: "bundled installed agents: " + strings.Join(installed.Bundled(), ", ") + "; docs/agents.md says how to write one"}
	}
	if !gateway.Serves(c.Model.API, def.API) {
		return nil, nil, &fault.Usage{Err: fmt.Errorf("%s speaks %s, and [model] api = %q: the gateway passes a format through to an endpoint of the same, and translates every format to chat", def.Name, def.API, c.Model.API),
			Hint: fmt.Sprintf("set [model] api = %q or \"chat\", for an endpoint that speaks it", def.API)}
	}
	newModel, err := models(c, lim)
	if err != nil {
		return nil, nil, err
	}
	inst := &installed.Installer{CacheDir: filepath.Join(CacheDir(), "npm")}
	r := &installed.Runner{Def: def, API: c.Model.API, Model: c.Model.Name, MaxLogBytes: c.Agent.MaxLogMB << 20, TempDir: os.TempDir(),
		Limits: gateway.Limits{MaxCalls: c.Agent.MaxTurns, MaxTokens: c.Agent.TokenLimit, MaxCostUSD: c.Agent.CostLimitUSD, Cost: hostrun.Cost(c.Model.Prices)}}
	run := agentFunc(func(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
		ep, ok := newModel(in).(gateway.Endpoint)
		if !ok {
			return scheduler.AgentOutput{}, fmt.Errorf("the model client cannot serve a gateway")
		}
		res, err := r.Run(ctx, in.Sandbox, in.Prompt, ep)
		tr := res.Trajectory
		tr.Agent = def.Name
		out := scheduler.AgentOutput{Transcript: transcript(in, tr), Turns: res.Calls, StopReason: tr.StopReason, Usage: tr.Usage}
		if res.Logs != nil {
			if rerr := res.Logs.Rewind(); rerr == nil {
				out.Logs = res.Logs
			} else {
				res.Logs.Close()
			}
		}
		switch {
		case err == nil:
		case tr.StopReason == agent.StopModelError:
			err = scheduler.WithClass(rundir.ClassModel, err)
		default:
			err = scheduler.WithClass(rundir.ClassSandbox, err)
		}
		return out, err
	})
	return run, installed.WithLayer(be, inst.Layer(def)), nil
}
