package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Reward is a reward plugin ([[reward]]) as a scheduler.Scorer: a fresh
// instance per rollout runs reward.score.
type Reward struct {
	Name   string
	Weight float64
	Wasm   *wasm.Plugin
	Config json.RawMessage
	// Complete serves model.complete; nil refuses it.
	Complete func(ctx context.Context, req abi.ModelRequest) (abi.ModelResponse, error)
	Info     abi.HostInfo
	Log      *slog.Logger
}

var _ scheduler.Scorer = (*Reward)(nil)

// CheckConfig asks the plugin whether its [[reward]] table's config is
// valid, before any rollout (config.check; nil when the plugin does not
// have the hook). The plugin gets host.info only: no model.
func (p *Reward) CheckConfig(ctx context.Context) error {
	hi := hostInfo(p.Info)
	ops := map[string]wasm.Op{abi.OpHostInfo: func(context.Context, []byte) ([]byte, error) { return json.Marshal(hi) }}
	return checkConfig(ctx, p.Wasm, ops, p.Log, p.Config)
}

// Score runs the plugin's reward.score hook on its own instance.
func (p *Reward) Score(ctx context.Context, in scheduler.ScoreInput) rundir.RewardScore {
	rs := rundir.RewardScore{Name: p.Name, Weight: p.Weight}
	resp, err := p.score(ctx, in, &rs)
	if err != nil {
		rs.Error = err.Error()
		return rs
	}
	if err := checkReward(resp.Reward, resp.Scores); err != nil {
		rs.Error = fmt.Sprintf("reward plugin %s hook %s: %v", p.Name, abi.HookReward, err)
		return rs
	}
	if !finite(resp.Reward * p.Weight) {
		rs.Error = fmt.Sprintf("reward plugin %s returned reward %g, which times its weight %g is not a finite number", p.Name, resp.Reward, p.Weight)
		return rs
	}
	rs.Reward, rs.Scores = resp.Reward, resp.Scores
	return rs
}

// score runs the hook; the usage of its model calls goes into rs, also
// when the hook then fails.
func (p *Reward) score(ctx context.Context, in scheduler.ScoreInput, rs *rundir.RewardScore) (abi.RewardResponse, error) {
	var at abi.Task
	if err := json.Unmarshal(in.Task.Raw, &at); err != nil {
		at = abi.Task{ID: in.Task.ID, Category: in.Task.Category, Difficulty: in.Task.Difficulty}
	}
	log := p.Log
	if log == nil {
		log = slog.Default()
	}
	hi := hostInfo(p.Info)
	hi.RunID, hi.RolloutID, hi.Seed = in.Info.RunID, in.Info.RolloutID, in.Info.Seed
	ops := map[string]wasm.Op{
		abi.OpHostInfo: func(context.Context, []byte) ([]byte, error) { return json.Marshal(hi) },
	}
	if p.Complete != nil {
		ops[abi.OpModelComplete] = func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.ModelRequest
			if err := json.Unmarshal(req, &q); err != nil || len(q.Messages) == 0 {
				return nil, &wasm.OpError{Status: abi.StatusBadRequest, Err: errors.New("model.complete needs messages")}
			}
			resp, err := p.Complete(ctx, q)
			if err != nil {
				return nil, err
			}
			var u agent.Usage
			if rs.Usage != nil {
				u = *rs.Usage
			}
			u = u.Add(agent.Usage{PromptTokens: resp.PromptTokens, CompletionTokens: resp.CompletionTokens})
			rs.Usage = &u
			return json.Marshal(resp)
		}
	}
	inst, err := p.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: ops, Seed: in.Info.Seed, Log: log.With("rollout", in.Info.RolloutID, "reward", p.Name)})
	if err != nil {
		return abi.RewardResponse{}, err
	}
	defer inst.Close(context.WithoutCancel(ctx))
	req := abi.RewardRequest{Task: at, Config: p.Config, Trajectory: in.Transcript, Verify: abi.VerifyResponse{
		Reward: in.Verdict.Reward, Passed: in.Verdict.Passed, Scores: in.Verdict.Scores, Tests: in.Verdict.Tests, Output: in.Verdict.Output,
	}}
	var resp abi.RewardResponse
	err = inst.Call(ctx, abi.HookReward, req, &resp)
	return resp, err
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
