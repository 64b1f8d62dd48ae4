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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	inst, err := e.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(nil, abi.HostInfo{}), Log: e.Log})
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
	inst, err := e.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(r, hi), Seed: info.Seed, Log: log.With("rollout", info.RolloutID)})
	if err != nil {
		return nil, err
	}
	r.inst = inst
	r.fresh = func(ctx context.Context) (*wasm.Instance, error) {
		return e.Wasm.Instantiate(ctx, wasm.InstanceConfig{Ops: e.ops(r, hi), Seed: info.Seed, Log: log.With("rollout", info.RolloutID)})
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
		Network: network,
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
	tests := make([]rundir.Test, len(v.Tests))
	for i, t := range v.Tests {
		tests[i] = rundir.Test{Name: t.Name, Status: t.Status, Message: t.Message}
	}
	return scheduler.Verdict{Reward: v.Reward, Passed: v.Passed, Scores: v.Scores, Tests: tests, Output: v.Output}
}

func (r *pluginRollout) Teardown(ctx context.Context) error {
	err := r.call(ctx, abi.HookTeardown, r.req, nil)
	if errors.Is(err, wasm.ErrUnknown) {
		return nil
	}
	return err
}

func (r *pluginRollout) Close(ctx context.Context) error { return r.inst.Close(ctx) }

// maxDownload caps a sandbox.download answer.
const maxDownload = 64 << 20

// ops binds the host operations to one rollout (r may be nil for
// tasks.load, which gets no sandbox).
func (e *Plugin) ops(r *pluginRollout, info abi.HostInfo) map[string]wasm.Op {
	box := func() (sandbox.Sandbox, error) {
		if r == nil || r.sb == nil {
			return nil, &wasm.OpError{Status: abi.StatusError, Err: errors.New("no sandbox in this hook: sandbox operations work from rollout.setup on")}
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
			b, err := sb.ReadFile(ctx, q.Path)
			if errors.Is(err, sandbox.ErrNotFound) {
				return json.Marshal(abi.ReadFileResponse{Missing: true})
			}
			if err != nil {
				return nil, err
			}
			return json.Marshal(abi.ReadFileResponse{Data: b})
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
