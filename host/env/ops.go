package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// maxDownload caps a sandbox.download answer.
const maxDownload = 64 << 20

// hostOps are the host operations of one plugin instance: the sandbox
// ones act on its rollout's sandbox, and only on it.
type hostOps struct {
	env  *Plugin
	r    *pluginRollout // nil for tasks.load, which gets no sandbox
	info abi.HostInfo
	// asAgent binds the sandbox operations to the agent's view of an
	// isolated sandbox: the oracle's instance acts as the agent.
	asAgent bool
}

// ops binds the host operations to one rollout (r may be nil for
// tasks.load, which gets no sandbox); asAgent binds them to the agent's
// view of the sandbox.
func (e *Plugin) ops(r *pluginRollout, info abi.HostInfo, asAgent bool) map[string]wasm.Op {
	h := &hostOps{env: e, r: r, info: info, asAgent: asAgent}
	ops := map[string]wasm.Op{
		abi.OpExec:      h.limited(op(h.exec)),
		abi.OpReset:     h.reset,
		abi.OpReadFile:  h.limited(op(h.readFile)),
		abi.OpWriteFile: h.limited(op(h.writeFile)),
		abi.OpUpload:    h.limited(op(h.upload)),
		abi.OpDownload:  h.limited(op(h.download)),
		abi.OpHostInfo:  h.hostInfo,
	}
	if e.Repos != nil {
		ops[abi.OpRepoCheckout] = h.limited(op(h.repoCheckout))
	}
	if e.Dataset != nil {
		ops[abi.OpDatasetRead] = op(e.Dataset)
	}
	return ops
}

// op makes a host operation of f: the plugin's request is decoded into
// Req (a request that is not one is StatusBadRequest) and f's answer
// encoded as JSON.
func op[Req, Resp any](f func(context.Context, Req) (Resp, error)) wasm.Op {
	return func(ctx context.Context, req []byte) ([]byte, error) {
		var q Req
		if err := json.Unmarshal(req, &q); err != nil {
			return nil, &wasm.OpError{Status: abi.StatusBadRequest, Err: fmt.Errorf("bad request: %v", err)}
		}
		resp, err := f(ctx, q)
		if err != nil {
			return nil, err
		}
		return json.Marshal(resp)
	}
}

// limited remembers the first error of a sandbox operation that says the
// sandbox went over its limit (a disk the agent filled, which a backend
// may learn only when the cluster stops the sandbox, in the middle of
// verification): it is the rollout's outcome, whatever the plugin makes of
// the error.
func (h *hostOps) limited(f wasm.Op) wasm.Op {
	return func(ctx context.Context, req []byte) ([]byte, error) {
		b, err := f(ctx, req)
		if errors.Is(err, sandbox.ErrLimit) && h.r != nil && h.r.limitErr == nil {
			h.r.limitErr = err
		}
		return b, err
	}
}

// done is the answer of an operation that returns nothing: {}.
type done struct{}

// sandbox is the rollout's sandbox, or an error for a hook that has none.
func (h *hostOps) sandbox() (sandbox.Sandbox, error) {
	if h.r == nil || h.r.sb == nil {
		return nil, &wasm.OpError{Status: abi.StatusError, Err: errors.New("no sandbox in this hook: sandbox operations work from rollout.setup on")}
	}
	if h.asAgent {
		return sandbox.AgentView(h.r.sb), nil
	}
	return h.r.sb, nil
}

// exec runs a command fresh: a plugin's command (setup, the verifier)
// never runs with what the agent exported or the directory it left. The
// output kept is at most abi.MaxExecOutput per stream, whatever the plugin
// asks, and at most abi.MaxExecResponse as the answer's JSON.
func (h *hostOps) exec(ctx context.Context, q abi.ExecRequest) (abi.ExecResponse, error) {
	sb, err := h.sandbox()
	if err != nil {
		return abi.ExecResponse{}, err
	}
	res, err := sb.Exec(ctx, q.Cmd, sandbox.ExecOptions{
		Timeout: time.Duration(q.TimeoutMs) * time.Millisecond, Workdir: q.Workdir, Env: q.Env, Stdin: q.Stdin,
		MaxOutput: min(q.MaxOutput, abi.MaxExecOutput), Fresh: true,
	})
	if err != nil {
		return abi.ExecResponse{}, err
	}
	stdout, stderr, cut := fitExec(res.Stdout, res.Stderr)
	return abi.ExecResponse{Stdout: stdout, Stderr: stderr, ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		OOMKilled: res.OOMKilled, Truncated: res.Truncated || cut, DurationMs: res.Duration.Milliseconds()}, nil
}

// reset replaces the rollout's sandbox with a fresh one from the same
// spec. Its request is not read. A failed reset leaves the rollout's
// sandbox in doubt, whatever the plugin makes of the error.
func (h *hostOps) reset(ctx context.Context, _ []byte) ([]byte, error) {
	if _, err := h.sandbox(); err != nil {
		return nil, err
	}
	r := h.r
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
}

// readFile reads a file; a missing one is an answer, not an error.
func (h *hostOps) readFile(ctx context.Context, q abi.ReadFileRequest) (abi.ReadFileResponse, error) {
	sb, err := h.sandbox()
	if err != nil {
		return abi.ReadFileResponse{}, err
	}
	max := q.MaxBytes
	if max <= 0 || max > abi.MaxReadFile {
		max = abi.MaxReadFile
	}
	b, size, err := sb.ReadFile(ctx, q.Path, max)
	if errors.Is(err, sandbox.ErrNotFound) {
		return abi.ReadFileResponse{Missing: true}, nil
	}
	if err != nil {
		return abi.ReadFileResponse{}, err
	}
	return abi.ReadFileResponse{Data: b, Size: size, Truncated: size > int64(len(b))}, nil
}

func (h *hostOps) writeFile(ctx context.Context, q abi.WriteFileRequest) (done, error) {
	sb, err := h.sandbox()
	if err != nil {
		return done{}, err
	}
	return done{}, sb.WriteFile(ctx, q.Path, q.Data, fs.FileMode(q.Mode))
}

// upload extracts a tar into the sandbox; an unsafe archive is the
// plugin's bad request.
func (h *hostOps) upload(ctx context.Context, q abi.UploadRequest) (done, error) {
	sb, err := h.sandbox()
	if err != nil {
		return done{}, err
	}
	if err := sb.Upload(ctx, q.Dir, bytes.NewReader(q.Tar)); err != nil {
		if errors.Is(err, sandbox.ErrUnsafeArchive) {
			return done{}, &wasm.OpError{Status: abi.StatusBadRequest, Err: err}
		}
		return done{}, err
	}
	return done{}, nil
}

// download returns a path of the sandbox as a tar, up to maxDownload.
func (h *hostOps) download(ctx context.Context, q abi.DownloadRequest) (abi.DownloadResponse, error) {
	sb, err := h.sandbox()
	if err != nil {
		return abi.DownloadResponse{}, err
	}
	rc, err := sb.Download(ctx, q.Path)
	if err != nil {
		return abi.DownloadResponse{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxDownload+1))
	if err != nil {
		return abi.DownloadResponse{}, err
	}
	if len(b) > maxDownload {
		return abi.DownloadResponse{}, &wasm.OpError{Status: abi.StatusTooLarge, Err: fmt.Errorf("download of %s is over %d MiB", q.Path, maxDownload>>20)}
	}
	return abi.DownloadResponse{Tar: b}, nil
}

// hostInfo says which host and rollout this is; its request is not read.
func (h *hostOps) hostInfo(context.Context, []byte) ([]byte, error) {
	return json.Marshal(h.info)
}

// repoCheckout streams a repository at a commit from the run's cache
// into the sandbox.
func (h *hostOps) repoCheckout(ctx context.Context, q abi.RepoCheckoutRequest) (abi.RepoCheckoutResponse, error) {
	sb, err := h.sandbox()
	if err != nil {
		return abi.RepoCheckoutResponse{}, err
	}
	rc, id, err := h.env.Repos.Archive(ctx, q.URL, q.Commit)
	if err != nil {
		return abi.RepoCheckoutResponse{}, err
	}
	err = sb.Upload(ctx, q.Dir, rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return abi.RepoCheckoutResponse{}, fmt.Errorf("check out %s at %s into %s: %w", q.URL, id, q.Dir, err)
	}
	return abi.RepoCheckoutResponse{Commit: id}, nil
}
