// Package env adapts wasm plugins to the scheduler: Plugin is an
// environment plugin as a scheduler.Environment (tasks.load, one fresh
// instance per rollout, its hooks as the rollout's phases), and Reward is a
// stacked [[reward]] plugin as a scheduler.Scorer. The host operations a
// plugin may call (sandbox.exec, sandbox.reset, dataset.read, ...) are bound
// here to the calling rollout's own sandbox and to the run's dataset reader
// and repository cache, and a plugin's failures are classified for the
// rollout's record.
package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Plugin is a scheduler.Environment backed by a wasm plugin.
type Plugin struct {
	Wasm   *wasm.Plugin
	Config json.RawMessage // [env.config] as JSON
	// Dataset serves dataset.read; nil refuses it.
	Dataset func(ctx context.Context, req abi.DatasetRequest) (abi.DatasetResponse, error)
	Info    abi.HostInfo // proctor version, backend; rollout fields are filled per rollout
	// Repos serves repo.checkout; nil refuses it.
	Repos RepoSource
	// AllowHostNetwork lets a plugin's spec ask for network "host".
	AllowHostNetwork bool
	Log              *slog.Logger
}

var _ scheduler.Environment = (*Plugin)(nil)

// RepoSource serves the tree of a repository at a commit as a tar stream
// (see host/repocache). Close reports a failure met while streaming.
type RepoSource interface {
	Archive(ctx context.Context, url, commit string) (io.ReadCloser, string, error)
}

// Tasks runs tasks.load on a throwaway instance.
func (e *Plugin) Tasks(ctx context.Context) ([]scheduler.Task, []abi.Skipped, error) {
	inst, err := e.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(nil, abi.HostInfo{}, false), Log: e.Log})
	if err != nil {
		return nil, nil, err
	}
	defer inst.Close(ctx)
	var resp abi.TasksResponse
	if err := inst.Call(ctx, abi.HookTasks, abi.TasksRequest{Config: e.Config}, &resp); err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	var tasks []scheduler.Task
	for _, t := range resp.Tasks {
		if t.ID == "" || seen[t.ID] {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: t.ID, Reason: "empty or duplicate task id"})
			continue
		}
		seen[t.ID] = true
		raw, _ := json.Marshal(t)
		tasks = append(tasks, scheduler.Task{
			ID: t.ID, Category: t.Category, Difficulty: t.Difficulty,
			AgentTimeout:  time.Duration(t.AgentTimeoutSec * float64(time.Second)),
			VerifyTimeout: time.Duration(t.VerifyTimeoutSec * float64(time.Second)),
			Raw:           raw,
		})
	}
	return tasks, resp.Skipped, nil
}

// NewRollout makes a fresh plugin instance for one rollout.
func (e *Plugin) NewRollout(ctx context.Context, t scheduler.Task, info scheduler.RolloutInfo) (scheduler.Rollout, error) {
	var at abi.Task
	if err := json.Unmarshal(t.Raw, &at); err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	r := &pluginRollout{env: e, req: abi.RolloutRequest{Task: at, Config: e.Config, RolloutID: info.RolloutID, Attempt: info.Attempt, Seed: info.Seed}}
	hi := e.Info
	hi.ABI, hi.RunID, hi.RolloutID, hi.Seed = abi.Version, info.RunID, info.RolloutID, info.Seed
	log := e.Log
	if log == nil {
		log = slog.Default()
	}
	inst, err := e.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(r, hi, false), Seed: info.Seed, Log: log.With("rollout", info.RolloutID)})
	if err != nil {
		return nil, err
	}
	r.inst = inst
	// The oracle acts as the agent: its commands run on the agent's side
	// of an isolated sandbox, and what it starts is the agent's.
	r.fresh = func(ctx context.Context) (*wasm.Instance, error) {
		return e.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(r, hi, true), Seed: info.Seed, Log: log.With("rollout", info.RolloutID)})
	}
	return r, nil
}

type pluginRollout struct {
	env   *Plugin
	inst  *wasm.Instance
	fresh func(context.Context) (*wasm.Instance, error)
	req   abi.RolloutRequest
	sb    sandbox.Sandbox
	reset func(context.Context) (sandbox.Sandbox, error)
	// resetErr is a reset that failed: the rollout's sandbox is in doubt,
	// whatever the plugin made of the error.
	resetErr error
}

// classify tags plugin failures: a hook that failed on its own terms keeps
// its class (or the phase's), anything else (trap, timeout, bad output) is
// the plugin's fault.
func classify(err error) error {
	var pe *wasm.PluginError
	if errors.As(err, &pe) {
		if errors.Is(err, wasm.ErrHookFailed) {
			if pe.Class != "" {
				return scheduler.WithClass(pe.Class, err)
			}
			return err
		}
		return scheduler.WithClass(rundir.ClassPlugin, err)
	}
	return err
}

func (r *pluginRollout) call(ctx context.Context, hook string, in, out any) error {
	return classify(r.inst.Call(ctx, hook, in, out))
}

func (r *pluginRollout) SandboxSpec(ctx context.Context) (sandbox.Spec, error) {
	var s abi.SandboxSpec
	if err := r.call(ctx, abi.HookSandbox, r.req, &s); err != nil {
		return sandbox.Spec{}, err
	}
	return r.convertSpec(s)
}

// convertSpec turns the plugin's spec into a sandbox spec; network "host"
// only when the run allows it.
func (r *pluginRollout) convertSpec(s abi.SandboxSpec) (sandbox.Spec, error) {
	network := sandbox.Network(s.Network)
	switch network {
	case "", sandbox.NetworkNone:
		network = sandbox.NetworkNone
	case sandbox.NetworkHost:
		if !r.env.AllowHostNetwork {
			network = sandbox.NetworkNone
		}
	default:
		return sandbox.Spec{}, scheduler.WithClass(rundir.ClassPlugin, fmt.Errorf("plugin asks for network %q: want none or host", s.Network))
	}
	return sandbox.Spec{
		Image: s.Image, BuildContext: s.BuildContext, Dockerfile: s.Dockerfile, ForceBuild: s.ForceBuild,
		Workdir: s.Workdir, Env: s.Env, User: s.User, CPUs: s.CPUs, MemoryMB: s.MemoryMB, PidsMax: s.PidsMax,
		DiskMB: s.DiskMB, Network: network, Private: s.Private,
	}, nil
}

func (r *pluginRollout) Bind(sb sandbox.Sandbox, reset func(context.Context) (sandbox.Sandbox, error)) {
	r.sb, r.reset = sb, reset
}

func (r *pluginRollout) Setup(ctx context.Context) error {
	return r.call(ctx, abi.HookSetup, r.req, nil)
}

func (r *pluginRollout) Prompt(ctx context.Context) (string, string, error) {
	var p abi.PromptResponse
	err := r.call(ctx, abi.HookPrompt, r.req, &p)
	return p.System, p.User, err
}

// Oracle runs on an instance of its own: it runs under the agent's
// timeout, and a timeout discards the instance it ran on, which must not
// take the verifier's instance with it.
func (r *pluginRollout) Oracle(ctx context.Context) error {
	inst, err := r.fresh(ctx)
	if err != nil {
		return classify(err)
	}
	defer inst.Close(context.WithoutCancel(ctx))
	err = classify(inst.Call(ctx, abi.HookOracle, r.req, nil))
	if errors.Is(err, wasm.ErrUnknown) {
		return scheduler.ErrNoOracle
	}
	return err
}

func (r *pluginRollout) Verify(ctx context.Context, agentTimedOut bool) (scheduler.Verdict, error) {
	var v abi.VerifyResponse
	err := r.call(ctx, abi.HookVerify, abi.VerifyRequest{RolloutRequest: r.req, AgentTimedOut: agentTimedOut}, &v)
	if r.resetErr != nil {
		// The plugin saw the failed reset only as a host error; the
		// rollout's class is the sandbox's (infra_error, retried).
		return scheduler.Verdict{}, r.resetErr
	}
	if err != nil {
		return scheduler.Verdict{}, err
	}
	return verdict(v), nil
}

func verdict(v abi.VerifyResponse) scheduler.Verdict {
	return scheduler.Verdict{Reward: v.Reward, Passed: v.Passed, Scores: v.Scores, Tests: v.Tests, Output: v.Output}
}

func (r *pluginRollout) Teardown(ctx context.Context) error {
	err := r.call(ctx, abi.HookTeardown, r.req, nil)
	if errors.Is(err, wasm.ErrUnknown) {
		return nil
	}
	return err
}

func (r *pluginRollout) Close(ctx context.Context) error { return r.inst.Close(ctx) }

var _ scheduler.Idler = (*pluginRollout)(nil)

// Idle parks the plugin instance while the rollout waits: its next hook
// re-creates it as it was (see wasm.Instance.Park).
func (r *pluginRollout) Idle(ctx context.Context) { r.inst.Park(ctx) }
