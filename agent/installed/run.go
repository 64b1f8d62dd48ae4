package installed

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/gateway"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/mux"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Relayer is a sandbox that carries connections to a port of its loopback
// to the host (an isolated sandbox, through the warden's mux).
type Relayer interface {
	Relay(ctx context.Context) (net.Listener, error)
}

// Stop reasons of an installed agent, besides the gateway's.
const (
	// StopExit: the CLI exited with a status other than 0.
	StopExit = "agent_exit"
)

// Runner runs a definition's CLI in rollouts' sandboxes.
type Runner struct {
	Def *Definition
	// API is the wire format the run's endpoint speaks.
	API string
	// Model is the run's model name.
	Model  string
	Limits gateway.Limits
	// MaxLogBytes caps the agent's logs kept per rollout (default 16 MiB).
	MaxLogBytes int64
	// TempDir holds a rollout's logs until the run directory takes them.
	TempDir string
	Log     *slog.Logger
}

// Result is what a rollout's CLI did.
type Result struct {
	Trajectory agent.Trajectory
	// Calls is how many model calls it made.
	Calls int
	// Logs is a tar of its logs (the gateway's exchanges, its output and
	// its own log files), nil when there are none; the caller closes it.
	Logs *Logs
}

// Run runs the CLI on prompt in sb, its model calls going to ep through a
// gateway of this rollout. An error means the rollout cannot be judged (a
// sandbox that failed, a model endpoint that kept failing); what the CLI
// did, exit status included, is in the result.
func (r *Runner) Run(ctx context.Context, sb sandbox.Sandbox, prompt string, ep gateway.Endpoint) (Result, error) {
	rl, ok := sb.(Relayer)
	if !ok {
		return Result{}, mux.ErrNoRelay
	}
	logs, err := newLogs(r.TempDir, r.maxLogs())
	if err != nil {
		return Result{}, err
	}
	cctx, stopCLI := context.WithCancel(ctx)
	defer stopCLI()
	gw := gateway.New(gateway.Config{API: r.API, Endpoint: ep, Model: r.Model, Token: gateway.NewToken(), Limits: r.Limits,
		OnStop: func(string) { stopCLI() }, Log: logs.gateway, MaxLogBytes: r.maxLogs()})
	l, err := rl.Relay(ctx)
	if err != nil {
		logs.Close()
		return Result{}, fmt.Errorf("relay the model gateway into the sandbox: %w", err)
	}
	srv := &http.Server{Handler: gw, BaseContext: func(net.Listener) context.Context { return ctx }, ReadHeaderTimeout: time.Minute}
	go srv.Serve(l)
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	exec, err := r.start(cctx, sb, prompt, gw, port)
	stop := r.stopReason(ctx, gw, exec, err)
	if err != nil && stop == "" {
		logs.Close()
		return Result{Calls: gw.Calls()}, err
	}
	tr := gw.Trajectory(r.Def.Name, stop)
	if stop == StopExit {
		tr.Error = fmt.Sprintf("%s exited with status %d: %s", r.Def.Name, exec.ExitCode, lastLine(exec.Stderr))
		if exec.OOMKilled {
			tr.Error = fmt.Sprintf("%s was killed for memory (the sandbox's memory_mb): %s", r.Def.Name, lastLine(exec.Stderr))
		}
	}
	res := Result{Trajectory: tr, Calls: gw.Calls(), Logs: logs}
	logs.add(ctx, sb, exec, r.Def.Logs, exec.home)
	if stop == agent.StopModelError {
		return res, gw.Err()
	}
	return res, nil
}

func (r *Runner) maxLogs() int64 {
	if r.MaxLogBytes > 0 {
		return r.MaxLogBytes
	}
	return 16 << 20
}

// stopReason is why the CLI ended: the gateway ended it, the rollout's
// time ran out, or it exited by itself. "" when the sandbox failed.
func (r *Runner) stopReason(ctx context.Context, gw *gateway.Gateway, exec execResult, err error) string {
	switch {
	case gw.StopReason() != "":
		return gw.StopReason()
	case ctx.Err() != nil:
		return agent.StopCancelled
	case err != nil:
		return ""
	case exec.ExitCode == 0:
		return agent.StopDone
	}
	return StopExit
}

// execResult is the CLI's run, and the home it ran in.
type execResult struct {
	sandbox.ExecResult
	home string
}

// start writes the CLI's files and runs it until it exits or ctx ends.
func (r *Runner) start(ctx context.Context, sb sandbox.Sandbox, prompt string, gw *gateway.Gateway, port int) (execResult, error) {
	probe, err := sb.Exec(ctx, `printf '%s\n%s\n' "$HOME" "$(uname -m)"`, sandbox.ExecOptions{Timeout: time.Minute})
	if err != nil {
		return execResult{}, fmt.Errorf("start %s: %w", r.Def.Name, err)
	}
	home, arch, _ := strings.Cut(strings.TrimSpace(probe.Stdout), "\n")
	if home == "" {
		home = "/root"
	}
	v := r.vars(prompt, home, strings.TrimSpace(arch), port, gw)
	for _, f := range r.Def.Run.Files {
		path := expandHome(f.Path, home)
		if err := sb.WriteFile(ctx, path, []byte(v.Replace(f.Content)), 0o600); err != nil {
			return execResult{home: home}, fmt.Errorf("write %s for %s: %w", path, r.Def.Name, err)
		}
	}
	argv := make([]string, len(r.Def.Run.Command))
	for i, a := range r.Def.Run.Command {
		argv[i] = shell.Quote(v.Replace(a))
	}
	env := map[string]string{}
	for k, val := range r.Def.Run.Env {
		env[k] = v.Replace(val)
	}
	r.log().Debug("starting installed agent", "agent", r.Def.Label(), "port", port)
	res, err := sb.Exec(ctx, strings.Join(argv, " ")+" </dev/null", sandbox.ExecOptions{Env: env, MaxOutput: 1 << 20})
	return execResult{ExecResult: res, home: home}, err
}

// vars fills the placeholders of the definition's strings.
func (r *Runner) vars(prompt, home, arch string, port int, gw *gateway.Gateway) *strings.Replacer {
	npm := map[string]string{"x86_64": "x64", "aarch64": "arm64"}[arch]
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	return strings.NewReplacer("{prompt}", prompt, "{model}", r.Model, "{base_url}", base, "{port}", strconv.Itoa(port),
		"{token}", gw.Token(), "{prefix}", Prefix, "{node}", NodePath, "{home}", home, "{arch}", arch, "{npm_arch}", npm)
}

func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// expandHome puts home in place of a leading "~/".
func expandHome(p, home string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return strings.TrimSuffix(home, "/") + "/" + rest
	}
	return p
}

// lastLine is the last non-empty line of s, for a message.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
