package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/env"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// rewards loads the config's [[reward]] plugins into scorers, on the run's
// plugin runtime, and describes them for the manifest. Judges' requests go
// through lim, the run's limiter, with the agent's.
func (h Host) rewards(ctx context.Context, c *config.Config, rt *wasm.Runtime, lim *openai.Limiter) ([]scheduler.Scorer, []rundir.PluginInfo, error) {
	var scorers []scheduler.Scorer
	var infos []rundir.PluginInfo
	names := map[string]bool{}
	for i, rw := range c.Reward {
		key := fmt.Sprintf("[[reward]] %d (%s)", i+1, rw.Plugin)
		p, err := Plugins(c.BaseDir).Load(ctx, rt, rw.Plugin, rw.SHA256)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", key, err)
		}
		m := p.Manifest()
		if rw.Name == "" {
			rw.Name = m.Name // the plugin's own name unless the table names it
		}
		if names[rw.Name] {
			return nil, nil, &fault.Usage{Err: fmt.Errorf("%s: another [[reward]] is already named %q", key, rw.Name), Hint: "set name = \"...\" in one of them"}
		}
		names[rw.Name] = true
		if !slices.Contains(m.Hooks, abi.HookReward) {
			return nil, nil, &fault.Usage{Err: fmt.Errorf("%s: plugin %s has no %s hook", key, m.Name, abi.HookReward), Hint: "a [[reward]] plugin implements reward.score (sdk.RegisterReward)"}
		}
		if err := p.Grant(rw.Grants); err != nil {
			return nil, nil, &fault.Usage{Err: fmt.Errorf("%s: %w", key, err), Hint: "grant the capabilities in that [[reward]] table: " + GrantsWith(rw.Grants, m.Capabilities) + ", or check that this is the plugin you meant"}
		}
		sp := &env.Reward{Name: rw.Name, Weight: *rw.Weight, Wasm: p.Plugin, Config: c.RewardConfig(i),
			Info: abi.HostInfo{ProctorVersion: h.Version, Backend: c.Sandbox.Backend}, Log: slog.Default()}
		if slices.Contains(rw.Grants, abi.OpModelComplete) {
			complete, err := JudgeModel(c, lim)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", key, err)
			}
			sp.Complete = complete
		}
		if err := sp.CheckConfig(ctx); err != nil {
			return nil, nil, &fault.Usage{Err: fmt.Errorf("%s: config: %w", key, err), Hint: "fix the config of that [[reward]] table; proctor plugin inspect shows the plugin's config schema"}
		}
		scorers = append(scorers, sp)
		infos = append(infos, PluginInfo(rw.Name, p))
	}
	return scorers, infos, nil
}

// GrantsWith is the grants line that adds the declared capabilities to
// those granted, as the config would say it.
func GrantsWith(granted, declared []string) string {
	all := slices.Clone(granted)
	for _, d := range declared {
		if !slices.Contains(all, d) {
			all = append(all, d)
		}
	}
	q := make([]string, len(all))
	for i, g := range all {
		q[i] = fmt.Sprintf("%q", g)
	}
	return "grants = [" + strings.Join(q, ", ") + "]"
}

// JudgeModel serves model.complete with the run's [model]: its endpoint,
// key, limiter and retries, one retry budget per call.
func JudgeModel(c *config.Config, lim *openai.Limiter) (func(context.Context, abi.ModelRequest) (abi.ModelResponse, error), error) {
	if c.Model.Name == "" || c.Model.BaseURL == "" {
		return nil, &fault.Usage{Err: errors.New("model.complete is granted but [model] has no name or base_url"), Hint: "set [model] name and base_url: judges use the run's model client"}
	}
	f, err := modelFactory(c, c.Model.Temperature, lim)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req abi.ModelRequest) (abi.ModelResponse, error) {
		msgs := make([]agent.Message, len(req.Messages))
		for i, m := range req.Messages {
			msgs[i] = agent.Message{Role: m.Role, Content: m.Content}
		}
		reply, err := f.New().Complete(ctx, msgs, nil)
		if err != nil {
			return abi.ModelResponse{}, err
		}
		return abi.ModelResponse{Content: reply.Message.Content, PromptTokens: reply.Usage.PromptTokens, CompletionTokens: reply.Usage.CompletionTokens}, nil
	}, nil
}
