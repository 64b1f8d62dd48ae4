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
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/internal/clip"
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
	// Network is the run's [sandbox] network: what a task that asks for
	// the internet gets. "auto": the backend's ordinary network; "host":
	// the host's; "none" (and ""): nothing, and its record says so.
	Network string
	// NoDefaultNetwork says why the backend's ordinary network would give
	// a sandbox nothing ("" when it works); in auto mode a task's network
	// is then withheld, with that reason in its record.
	NoDefaultNetwork string
	Log              *slog.Logger
}

var _ scheduler.Environment = (*Plugin)(nil)

// RepoSource serves the tree of a repository at a commit as a tar stream
// (see host/repocache). Close reports a failure met while streaming.
type RepoSource interface {
	Archive(ctx context.Context, url, commit string) (io.ReadCloser, string, error)
}

// hostInfo is what host.info answers: base with the contract's versions
// and this host's features.
func hostInfo(base abi.HostInfo) abi.HostInfo {
	base.ABI, base.ABIMinor, base.Features = abi.Version, abi.Minor, wasm.Features()
	return base
}

// checkConfig runs config.check on a throwaway instance when the plugin
// has the hook (ABI v1.1); a plugin without it is not asked.
func checkConfig(ctx context.Context, p *wasm.Plugin, ops map[string]wasm.Op, log *slog.Logger, config json.RawMessage) error {
	if !slices.Contains(p.Manifest().Hooks, abi.HookConfig) {
		return nil
	}
	inst, err := p.Instantiate(ctx, wasm.InstanceConfig{Ops: ops, Log: log})
	if err != nil {
		return err
	}
	defer inst.Close(ctx)
	return inst.Call(ctx, abi.HookConfig, abi.ConfigRequest{Config: config}, nil)
}

// CheckConfig asks the plugin whether [env.config] is valid, before any
// rollout (config.check; nil when the plugin does not have the hook).
func (e *Plugin) CheckConfig(ctx context.Context) error {
	return checkConfig(ctx, e.Wasm, e.ops(nil, hostInfo(e.Info), false), e.Log, e.Config)
}

// Tasks runs tasks.load on a throwaway instance. Its answer is held to
// the host's bounds (tasks.go): a task over one is listed skipped with the
// reason, and more tasks than a run takes fail the hook.
func (e *Plugin) Tasks(ctx context.Context) ([]scheduler.Task, []abi.Skipped, error) {
	inst, err := e.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(nil, hostInfo(e.Info), false), Log: e.Log})
	if err != nil {
		return nil, nil, err
	}
	defer inst.Close(ctx)
	in, err := json.Marshal(abi.TasksRequest{Config: e.Config})
	if err != nil {
		return nil, nil, err
	}
	out, err := inst.CallRaw(ctx, abi.HookTasks, in)
	if err != nil {
		return nil, nil, err
	}
	resp, err := decodeTasks(out)
	if err != nil {
		return nil, nil, &wasm.PluginError{Plugin: e.Wasm.Name(), Hook: abi.HookTasks, Kind: wasm.ErrBadOutput, Err: err}
	}
	seen := map[string]bool{}
	var tasks []scheduler.Task
	for _, t := range resp.Tasks {
		if why := taskOverBounds(t); why != "" {
			resp.skip(abi.Skipped{ID: clip.Text(t.ID, 64), Reason: why})
			continue
		}
		if t.ID == "" || seen[t.ID] {
			resp.skip(abi.Skipped{ID: t.ID, Reason: "empty or duplicate task id"})
			continue
		}
		seen[t.ID] = true
		t.Broken = clip.Text(t.Broken, abi.MaxErrorText)
		raw, _ := json.Marshal(t)
		tasks = append(tasks, scheduler.Task{
			ID: t.ID, Category: t.Category, Difficulty: t.Difficulty,
			AgentTimeout:     time.Duration(t.AgentTimeoutSec * float64(time.Second)),
			VerifyTimeout:    time.Duration(t.VerifyTimeoutSec * float64(time.Second)),
			AgentTimeoutFrom: t.AgentTimeoutFrom, VerifyTimeoutFrom: t.VerifyTimeoutFrom,
			Raw:    raw,
			Broken: t.Broken,
		})
	}
	return tasks, resp.skipped(), nil
}

// NewRollout makes a fresh plugin instance for one rollout.
func (e *Plugin) NewRollout(ctx context.Context, t scheduler.Task, info scheduler.RolloutInfo) (scheduler.Rollout, error) {
	var at abi.Task
	if err := json.Unmarshal(t.Raw, &at); err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	r := &pluginRollout{env: e, req: abi.RolloutRequest{Task: at, Config: e.Config, RolloutID: info.RolloutID, Attempt: info.Attempt, Seed: info.Seed}}
	hi := hostInfo(e.Info)
	hi.RunID, hi.RolloutID, hi.Seed = info.RunID, info.RolloutID, info.Seed
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
	// limitErr is a sandbox operation that failed because the sandbox
	// went over its limit: the agent's outcome (sandbox.ErrLimit),
	// whatever the plugin made of the error.
	limitErr error
	// withheld says why the task's sandbox did not get the network it
	// asked for.
	withheld string
}

// classify tags plugin failures: a hook that failed on its own terms keeps
// its class when it is one of the contract's (abi.Classes), takes the
// phase's when it has none, and is the plugin's fault otherwise; anything
// else (trap, timeout, bad output) is the plugin's fault too.
func classify(err error) error {
	var pe *wasm.PluginError
	if errors.As(err, &pe) {
		if errors.Is(err, wasm.ErrHookFailed) {
			switch {
			case pe.Class == "":
				return err
			case slices.Contains(abi.Classes(), pe.Class):
				return scheduler.WithClass(pe.Class, err)
			}
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

// convertSpec turns the plugin's spec into a sandbox spec, with the
// network the run gives the task.
func (r *pluginRollout) convertSpec(s abi.SandboxSpec) (sandbox.Spec, error) {
	wants := false
	switch s.Network {
	case "", string(sandbox.NetworkNone):
	case abi.NetworkInternet, string(sandbox.NetworkHost):
		wants = true
	default:
		return sandbox.Spec{}, scheduler.WithClass(rundir.ClassPlugin, fmt.Errorf("plugin asks for network %q: want none or %s", s.Network, abi.NetworkInternet))
	}
	network, build, withheld := r.env.networkFor(wants)
	r.withheld = withheld
	return sandbox.Spec{
		Image: s.Image, BuildContext: s.BuildContext, Dockerfile: s.Dockerfile, ForceBuild: s.ForceBuild, BuildHint: s.BuildHint,
		Workdir: s.Workdir, Env: s.Env, User: s.User, AgentUser: s.AgentUser, CPUs: s.CPUs, MemoryMB: s.MemoryMB, PidsMax: s.PidsMax,
		DiskMB: s.DiskMB, DiskInodes: s.DiskInodes, Network: network, BuildNetwork: build, Private: s.Private,
		StartTimeout: time.Duration(s.BuildTimeoutSec * float64(time.Second)), StartTimeoutFrom: s.BuildTimeoutFrom,
	}, nil
}

// networkFor decides the network of a sandbox whose task asks for the
// internet (wants) or not, and of its image's build, which gets the run's
// network whatever the task asks, as Harbor's builds do. withheld says why
// a task that asked got nothing.
func (e *Plugin) networkFor(wants bool) (run, build sandbox.Network, withheld string) {
	build = sandbox.NetworkNone
	switch e.Network {
	case "host":
		build = sandbox.NetworkHost
	case "auto":
		if e.NoDefaultNetwork == "" {
			build = sandbox.NetworkDefault
		}
	}
	switch {
	case !wants:
		return sandbox.NetworkNone, build, ""
	case build != sandbox.NetworkNone:
		return build, build, ""
	case e.Network == "auto":
		return sandbox.NetworkNone, build, "the task asks for the internet; " + e.NoDefaultNetwork + `; [sandbox] network = "host" gives it the host's network`
	}
	return sandbox.NetworkNone, build, `the task asks for the internet; [sandbox] network = "none" withholds it`
}

// NetworkWithheld says why the rollout's sandbox did not get the network
// its task asked for ("" when it did, or did not ask).
func (r *pluginRollout) NetworkWithheld() string { return r.withheld }

func (r *pluginRollout) Bind(sb sandbox.Sandbox, reset func(context.Context) (sandbox.Sandbox, error)) {
	r.sb, r.reset = sb, reset
}

func (r *pluginRollout) Setup(ctx context.Context) error {
	return r.call(ctx, abi.HookSetup, r.req, nil)
}

func (r *pluginRollout) Prompt(ctx context.Context) (string, string, error) {
	var p abi.PromptResponse
	if err := r.call(ctx, abi.HookPrompt, r.req, &p); err != nil {
		return "", "", err
	}
	if err := checkPrompt(p.System, p.User); err != nil {
		return "", "", r.refuse(abi.HookPrompt, err)
	}
	return p.System, p.User, nil
}

// refuse is a hook's answer over one of the host's bounds: the plugin's
// fault (class plugin), naming the plugin and the hook.
func (r *pluginRollout) refuse(hook string, err error) error {
	return scheduler.WithClass(rundir.ClassPlugin, fmt.Errorf("plugin %s hook %s: %w", r.env.Wasm.Name(), hook, err))
}

// oracleGrace is how long the oracle's hook may go on past the agent's
// deadline: the solution's own command stops at that deadline, and the
// hook then reads what it printed.
const oracleGrace = 30 * time.Second

// Oracle runs on an instance of its own: it runs under the agent's
// timeout, and a timeout discards the instance it ran on, which must not
// take the verifier's instance with it. Its request carries in
// Task.AgentTimeoutSec what is left of the agent's timeout, so that the
// solution's command stops at the agent's deadline and the hook, given
// oracleGrace more, keeps what it printed.
func (r *pluginRollout) Oracle(ctx context.Context) (scheduler.OracleResult, error) {
	inst, err := r.fresh(ctx)
	if err != nil {
		return scheduler.OracleResult{}, classify(err)
	}
	defer inst.Close(context.WithoutCancel(ctx))
	req := r.req
	if dl, ok := ctx.Deadline(); ok {
		req.Task.AgentTimeoutSec = max(time.Until(dl).Seconds(), 1)
	}
	hctx, cancel := withGrace(ctx, oracleGrace)
	defer cancel()
	var o abi.OracleResponse
	err = classify(inst.Call(hctx, abi.HookOracle, req, &o))
	if errors.Is(err, wasm.ErrUnknown) {
		return scheduler.OracleResult{}, scheduler.ErrNoOracle
	}
	res := scheduler.OracleResult{Output: capLog(o.Output), ExitCode: o.ExitCode}
	switch {
	case r.limitErr != nil:
		// The oracle acts as the agent: over the limit is its outcome.
		return res, r.limitErr
	case err == nil && o.TimedOut:
		return res, fmt.Errorf("the reference solution %w; what it printed until then is kept", scheduler.ErrAgentTimeout)
	}
	return res, err
}

// withGrace is ctx, but when ctx's deadline passes it goes on for grace
// more; any other end of ctx (Ctrl-C) ends it at once.
func withGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	g, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(grace))
	stop := context.AfterFunc(ctx, func() {
		if ctx.Err() != context.DeadlineExceeded {
			cancel()
		}
	})
	return g, func() { stop(); cancel() }
}

func (r *pluginRollout) Verify(ctx context.Context, agentTimedOut bool) (scheduler.Verdict, error) {
	var v abi.VerifyResponse
	err := r.call(ctx, abi.HookVerify, abi.VerifyRequest{RolloutRequest: r.req, AgentTimedOut: agentTimedOut}, &v)
	if r.resetErr != nil {
		// The plugin saw the failed reset only as a host error; the
		// rollout's class is the sandbox's (infra_error, retried).
		return scheduler.Verdict{}, r.resetErr
	}
	if r.limitErr != nil {
		return scheduler.Verdict{}, r.limitErr
	}
	if err != nil {
		return scheduler.Verdict{}, err
	}
	if err := checkReward(v.Reward, v.Scores); err != nil {
		return scheduler.Verdict{}, r.refuse(abi.HookVerify, err)
	}
	if err := checkTests(v.Tests); err != nil {
		return scheduler.Verdict{}, r.refuse(abi.HookVerify, err)
	}
	return verdict(v), nil
}

// Bounds on the text of a verdict, which every record of the run keeps (in
// results.jsonl and in memory): a verifier's output is what the tests
// printed, and the agent decides much of that. Test messages are cut by
// checkTests.
const (
	maxVerdictOutput = 1 << 20 // the verifier's output: its tail is kept
	maxRewardSource  = 4 << 10 // where the reward came from: its head is kept
)

func verdict(v abi.VerifyResponse) scheduler.Verdict {
	if n := len(v.Output); n > maxVerdictOutput {
		v.Output = fmt.Sprintf("proctor: the verifier's output was %d bytes; its last %d follow\n", n, maxVerdictOutput) + strings.ToValidUTF8(v.Output[n-maxVerdictOutput:], "")
	}
	return scheduler.Verdict{Reward: v.Reward, Passed: v.Passed, Scores: v.Scores, Tests: v.Tests, Output: v.Output,
		Log: capLog(v.Log), RewardSource: clip.Text(v.RewardSource, maxRewardSource), Failure: clip.Text(v.Failure, maxFailure)}
}

// maxFailure caps the reason a verifier reached no reward, which the
// record keeps as its error.
const maxFailure = 64 << 10

// maxLog caps a verifier log or an oracle's output the host keeps of a
// plugin's answer (abi.MaxVerifyLog, with room for a plugin's own cut
// marker).
const maxLog = abi.MaxVerifyLog + 4096

// capLog cuts s to maxLog, saying so.
func capLog(s string) string {
	if len(s) <= maxLog {
		return s
	}
	return s[:maxLog] + "\n[proctor: the plugin sent more than the ABI's limit; the rest is cut]\n"
}

// MaxReward bounds what a plugin may give as a reward or a named score:
// finite, and within ±MaxReward. Far more than any reward scale needs, it
// keeps every sum of a run (weights, means over rollouts) finite.
const MaxReward = 1e6

// checkReward refuses a reward or a named score outside ±MaxReward, saying
// which and what it was, and more named scores than the host keeps.
func checkReward(reward float64, scores map[string]float64) error {
	if !inRange(reward) {
		return fmt.Errorf("reward %g is outside the range a reward may take, finite and within ±%g", reward, float64(MaxReward))
	}
	return checkScores(scores)
}

func inRange(x float64) bool { return x >= -MaxReward && x <= MaxReward } // false for NaN

func (r *pluginRollout) Teardown(ctx context.Context) error {
	err := r.call(ctx, abi.HookTeardown, r.req, nil)
	if errors.Is(err, wasm.ErrUnknown) {
		return nil
	}
	return err
}

func (r *pluginRollout) Close(ctx context.Context) error { return r.inst.Close(ctx) }

var _ scheduler.Idler = (*pluginRollout)(nil)

// Idle lets the plugin instance be parked while the rollout waits, where
// many are in flight: its next hook re-creates it as it was (see
// wasm.Instance.Idle).
func (r *pluginRollout) Idle(ctx context.Context) { r.inst.Idle(ctx) }
