package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"time"

	"github.com/proctor-dev/proctor/host/results"
	"github.com/proctor-dev/proctor/host/wasm"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// PluginEnv is an Environment backed by a wasm plugin.
type PluginEnv struct {
	Plugin *wasm.Plugin
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

var _ Environment = (*PluginEnv)(nil)

// RepoSource serves the tree of a repository at a commit as a tar stream
// (see host/repocache). Close reports a failure met while streaming.
type RepoSource interface {
	Archive(ctx context.Context, url, commit string) (io.ReadCloser, string, error)
}

// Tasks runs tasks.load on a throwaway instance.
func (e *PluginEnv) Tasks(ctx context.Context) ([]Task, []abi.Skipped, error) {
	inst, err := e.Plugin.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(nil, abi.HostInfo{}, false), Log: e.Log})
	if err != nil {
		return nil, nil, err
	}
	defer inst.Close(ctx)
	var resp abi.TasksResponse
	if err := inst.Call(ctx, abi.HookTasks, abi.TasksRequest{Config: e.Config}, &resp); err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	var tasks []Task
	for _, t := range resp.Tasks {
		if t.ID == "" || seen[t.ID] {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: t.ID, Reason: "empty or duplicate task id"})
			continue
		}
		seen[t.ID] = true
		raw, _ := json.Marshal(t)
		tasks = append(tasks, Task{
			ID: t.ID, Category: t.Category, Difficulty: t.Difficulty,
			AgentTimeout:  time.Duration(t.AgentTimeoutSec * float64(time.Second)),
			VerifyTimeout: time.Duration(t.VerifyTimeoutSec * float64(time.Second)),
			Raw:           raw,
			Broken:        t.Broken,
		})
	}
	return tasks, resp.Skipped, nil
}

// NewRollout makes a fresh plugin instance for one rollout.
func (e *PluginEnv) NewRollout(ctx context.Context, t Task, info RolloutInfo) (Rollout, error) {
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
	inst, err := e.Plugin.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(r, hi, false), Seed: info.Seed, Log: log.With("rollout", info.RolloutID)})
	if err != nil {
		return nil, err
	}
	r.inst = inst
	// The oracle acts as the agent: its commands run on the agent's side
	// of an isolated sandbox, and what it starts is the agent's.
	r.fresh = func(ctx context.Context) (*wasm.Instance, error) {
		return e.Plugin.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(r, hi, true), Seed: info.Seed, Log: log.With("rollout", info.RolloutID)})
	}
	return r, nil
}

type pluginRollout struct {
	env   *PluginEnv
	inst  *wasm.Instance
	fresh func(context.Context) (*wasm.Instance, error)
	req   abi.RolloutRequest
	sb    sandbox.Sandbox
	reset func(context.Context) (sandbox.Sandbox, error)
	// resetErr is a reset that failed: the rollout's sandbox is in doubt,
	// whatever the plugin made of the error.
	resetErr error
	// withheld says why the task's sandbox did not get the network it
	// asked for.
	withheld string
}

// classify tags plugin failures: a hook that failed on its own terms keeps
// its class (or the phase's), anything else (trap, timeout, bad output) is
// the plugin's fault.
func classify(err error) error {
	var pe *wasm.PluginError
	if errors.As(err, &pe) {
		if errors.Is(err, wasm.ErrHookFailed) {
			if pe.Class != "" {
				return WithClass(pe.Class, err)
			}
			return err
		}
		return WithClass(results.ClassPlugin, err)
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
		return sandbox.Spec{}, WithClass(results.ClassPlugin, fmt.Errorf("plugin asks for network %q: want none or %s", s.Network, abi.NetworkInternet))
	}
	network, build, withheld := r.env.networkFor(wants)
	r.withheld = withheld
	return sandbox.Spec{
		Image: s.Image, BuildContext: s.BuildContext, Dockerfile: s.Dockerfile, ForceBuild: s.ForceBuild,
		Workdir: s.Workdir, Env: s.Env, User: s.User, AgentUser: s.AgentUser, CPUs: s.CPUs, MemoryMB: s.MemoryMB, PidsMax: s.PidsMax,
		DiskMB: s.DiskMB, Network: network, BuildNetwork: build, Private: s.Private,
		StartTimeout: time.Duration(s.BuildTimeoutSec * float64(time.Second)),
	}, nil
}

// networkFor decides the network of a sandbox whose task asks for the
// internet (wants) or not, and of its image's build, which gets the run's
// network whatever the task asks, as Harbor's builds do. withheld says why
// a task that asked got nothing.
func (e *PluginEnv) networkFor(wants bool) (run, build sandbox.Network, withheld string) {
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
	err := r.call(ctx, abi.HookPrompt, r.req, &p)
	return p.System, p.User, err
}

// Oracle runs on an instance of its own: it runs under the agent's
// timeout, and a timeout discards the instance it ran on, which must not
// take the verifier's instance with it.
func (r *pluginRollout) Oracle(ctx context.Context) (OracleResult, error) {
	inst, err := r.fresh(ctx)
	if err != nil {
		return OracleResult{}, classify(err)
	}
	defer inst.Close(context.WithoutCancel(ctx))
	var o abi.OracleResponse
	err = classify(inst.Call(ctx, abi.HookOracle, r.req, &o))
	if errors.Is(err, wasm.ErrUnknown) {
		return OracleResult{}, ErrNoOracle
	}
	if len(o.Output) > maxVerifyLog {
		o.Output = o.Output[:maxVerifyLog] + "\n[proctor: the plugin sent more than the ABI's limit; the rest is cut]\n"
	}
	return OracleResult{Output: o.Output, ExitCode: o.ExitCode}, err
}

func (r *pluginRollout) Verify(ctx context.Context, agentTimedOut bool) (Verdict, error) {
	var v abi.VerifyResponse
	err := r.call(ctx, abi.HookVerify, abi.VerifyRequest{RolloutRequest: r.req, AgentTimedOut: agentTimedOut}, &v)
	if r.resetErr != nil {
		// The plugin saw the failed reset only as a host error; the
		// rollout's class is the sandbox's (infra_error, retried).
		return Verdict{}, r.resetErr
	}
	if err != nil {
		return Verdict{}, err
	}
	return verdict(v), nil
}

func verdict(v abi.VerifyResponse) Verdict {
	tests := make([]results.Test, len(v.Tests))
	for i, t := range v.Tests {
		tests[i] = results.Test{Name: t.Name, Status: t.Status, Message: t.Message}
	}
	log := v.Log
	if len(log) > maxVerifyLog {
		log = log[:maxVerifyLog] + "\n[proctor: the plugin sent more than the ABI's limit; the rest is cut]\n"
	}
	return Verdict{Reward: v.Reward, Passed: v.Passed, Scores: v.Scores, Tests: tests, Output: v.Output, Log: log, RewardSource: v.RewardSource}
}

func (r *pluginRollout) Teardown(ctx context.Context) error {
	err := r.call(ctx, abi.HookTeardown, r.req, nil)
	if errors.Is(err, wasm.ErrUnknown) {
		return nil
	}
	return err
}

func (r *pluginRollout) Close(ctx context.Context) error { return r.inst.Close(ctx) }

// maxVerifyLog caps the verifier log the host keeps of a plugin's answer
// (abi.MaxVerifyLog, with room for a plugin's own cut marker).
const maxVerifyLog = abi.MaxVerifyLog + 4096

// maxDownload caps a sandbox.download answer.
const maxDownload = 64 << 20

// ops binds the host operations to one rollout (r may be nil for
// tasks.load, which gets no sandbox); asAgent binds them to the agent's
// view of the sandbox (the oracle's instance).
func (e *PluginEnv) ops(r *pluginRollout, info abi.HostInfo, asAgent bool) map[string]wasm.Op {
	box := func() (sandbox.Sandbox, error) {
		if r == nil || r.sb == nil {
			return nil, &wasm.OpError{Status: abi.StatusError, Err: errors.New("no sandbox in this hook: sandbox operations work from rollout.setup on")}
		}
		if asAgent {
			return sandbox.AgentView(r.sb), nil
		}
		return r.sb, nil
	}
	decode := func(req []byte, v any) error {
		if err := json.Unmarshal(req, v); err != nil {
			return &wasm.OpError{Status: abi.StatusBadRequest, Err: fmt.Errorf("bad request: %v", err)}
		}
		return nil
	}
	ops := map[string]wasm.Op{
		abi.OpExec: func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.ExecRequest
			if err := decode(req, &q); err != nil {
				return nil, err
			}
			sb, err := box()
			if err != nil {
				return nil, err
			}
			// Fresh: a plugin's command (setup, the verifier) never runs
			// with what the agent exported or the directory it left.
			res, err := sb.Exec(ctx, q.Cmd, sandbox.ExecOptions{
				Timeout: time.Duration(q.TimeoutMs) * time.Millisecond, Workdir: q.Workdir, Env: q.Env, Stdin: q.Stdin, MaxOutput: q.MaxOutput,
				Fresh: true,
			})
			if err != nil {
				return nil, err
			}
			return json.Marshal(abi.ExecResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode, TimedOut: res.TimedOut,
				OOMKilled: res.OOMKilled, Truncated: res.Truncated, DurationMs: res.Duration.Milliseconds()})
		},
		abi.OpReset: func(ctx context.Context, _ []byte) ([]byte, error) {
			if _, err := box(); err != nil {
				return nil, err
			}
			if r.reset == nil {
				return nil, &wasm.OpError{Status: abi.StatusError, Err: errors.New("this runner cannot reset sandboxes")}
			}
			sb, err := r.reset(ctx)
			if err != nil {
				r.resetErr = err
				return nil, err
			}
			r.sb = sb
			return []byte("{}"), nil
		},
		abi.OpReadFile: func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.ReadFileRequest
			if err := decode(req, &q); err != nil {
				return nil, err
			}
			sb, err := box()
			if err != nil {
				return nil, err
			}
			max := q.MaxBytes
			if max <= 0 || max > abi.MaxReadFile {
				max = abi.MaxReadFile
			}
			b, size, err := sb.ReadFile(ctx, q.Path, max)
			if errors.Is(err, sandbox.ErrNotFound) {
				return json.Marshal(abi.ReadFileResponse{Missing: true})
			}
			if err != nil {
				return nil, err
			}
			return json.Marshal(abi.ReadFileResponse{Data: b, Size: size, Truncated: size > int64(len(b))})
		},
		abi.OpWriteFile: func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.WriteFileRequest
			if err := decode(req, &q); err != nil {
				return nil, err
			}
			sb, err := box()
			if err != nil {
				return nil, err
			}
			return []byte("{}"), sb.WriteFile(ctx, q.Path, q.Data, fs.FileMode(q.Mode))
		},
		abi.OpUpload: func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.UploadRequest
			if err := decode(req, &q); err != nil {
				return nil, err
			}
			sb, err := box()
			if err != nil {
				return nil, err
			}
			if err := sb.Upload(ctx, q.Dir, bytes.NewReader(q.Tar)); err != nil {
				if errors.Is(err, sandbox.ErrUnsafeArchive) {
					return nil, &wasm.OpError{Status: abi.StatusBadRequest, Err: err}
				}
				return nil, err
			}
			return []byte("{}"), nil
		},
		abi.OpDownload: func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.DownloadRequest
			if err := decode(req, &q); err != nil {
				return nil, err
			}
			sb, err := box()
			if err != nil {
				return nil, err
			}
			rc, err := sb.Download(ctx, q.Path)
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			b, err := io.ReadAll(io.LimitReader(rc, maxDownload+1))
			if err != nil {
				return nil, err
			}
			if len(b) > maxDownload {
				return nil, &wasm.OpError{Status: abi.StatusTooLarge, Err: fmt.Errorf("download of %s is over %d MiB", q.Path, maxDownload>>20)}
			}
			return json.Marshal(abi.DownloadResponse{Tar: b})
		},
		abi.OpHostInfo: func(ctx context.Context, req []byte) ([]byte, error) {
			return json.Marshal(info)
		},
	}
	if e.Repos != nil {
		ops[abi.OpRepoCheckout] = func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.RepoCheckoutRequest
			if err := decode(req, &q); err != nil {
				return nil, err
			}
			sb, err := box()
			if err != nil {
				return nil, err
			}
			rc, id, err := e.Repos.Archive(ctx, q.URL, q.Commit)
			if err != nil {
				return nil, err
			}
			err = sb.Upload(ctx, q.Dir, rc)
			if cerr := rc.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, fmt.Errorf("check out %s at %s into %s: %w", q.URL, id, q.Dir, err)
			}
			return json.Marshal(abi.RepoCheckoutResponse{Commit: id})
		}
	}
	if e.Dataset != nil {
		ops[abi.OpDatasetRead] = func(ctx context.Context, req []byte) ([]byte, error) {
			var q abi.DatasetRequest
			if err := decode(req, &q); err != nil {
				return nil, err
			}
			resp, err := e.Dataset(ctx, q)
			if err != nil {
				return nil, err
			}
			return json.Marshal(resp)
		}
	}
	return ops
}
