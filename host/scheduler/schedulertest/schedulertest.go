// Package schedulertest has fakes of the parts a scheduler.Runner drives
// (sandbox backend, environment, agent), for tests of the scheduler and of
// what plugs into it. The sandbox backends have their own conformance
// suite (sandbox/sandboxtest); these fakes exercise scheduling and
// classification.
//
// A task's id says how its rollout behaves: "plugin-broken*" fails to start
// its plugin, "setup-broken*" fails setup, "setup-hang*" waits in setup
// until its deadline, "setup-hook*" fails setup as a plugin hook whose own
// time ran out, "verify-broken*" fails verification with class verifier,
// "verify-noreward*" verifies without reaching a reward, "verify-hang*"
// waits in verification until its deadline, "reset*" grades in a reset
// sandbox, "slow*" runs the agent until its deadline, "nop*" does nothing
// (fails); any other task is solved by the oracle.
package schedulertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sandbox"
)

// Sandbox keeps written files in memory and records whether it was closed.
type Sandbox struct {
	closed atomic.Bool
	files  sync.Map
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Exec runs nothing; it fails once the sandbox is closed.
func (f *Sandbox) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if f.closed.Load() {
		return sandbox.ExecResult{}, sandbox.ErrClosed
	}
	return sandbox.ExecResult{}, nil
}

// WriteFile keeps the file.
func (f *Sandbox) WriteFile(ctx context.Context, p string, b []byte, m fs.FileMode) error {
	f.files.Store(p, b)
	return nil
}

// ReadFile returns a file written before, or sandbox.ErrNotFound.
func (f *Sandbox) ReadFile(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	if b, ok := f.files.Load(p); ok {
		return b.([]byte), int64(len(b.([]byte))), nil
	}
	return nil, 0, sandbox.ErrNotFound
}

// Upload does nothing.
func (f *Sandbox) Upload(ctx context.Context, dir string, r io.Reader) error { return nil }

// Download returns an empty archive.
func (f *Sandbox) Download(ctx context.Context, p string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("")), nil
}

// Close marks the sandbox closed.
func (f *Sandbox) Close(ctx context.Context) error { f.closed.Store(true); return nil }

// Backend starts Sandboxes and remembers them and their specs.
type Backend struct {
	// Fail, when set, may refuse a start.
	Fail func(spec sandbox.Spec) error

	mu      sync.Mutex
	started []*Sandbox
	specs   []sandbox.Spec
}

var _ sandbox.Backend = (*Backend)(nil)

// Start starts a Sandbox unless Fail refuses.
func (b *Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if b.Fail != nil {
		if err := b.Fail(spec); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sb := &Sandbox{}
	b.started = append(b.started, sb)
	b.specs = append(b.specs, spec)
	return sb, nil
}

// Prune closes the sandboxes of the run runID (of every run when it is
// empty) still open, as a backend removes what a killed run left, and
// returns how many it closed.
func (b *Backend) Prune(ctx context.Context, runID string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for i, s := range b.started {
		if (runID == "" || b.specs[i].Labels[sandbox.LabelRun] == runID) && !s.closed.Swap(true) {
			n++
		}
	}
	return n, nil
}

// Abilities: none; its sandboxes run no image and keep nothing apart.
func (b *Backend) Abilities(context.Context) sandbox.Abilities { return sandbox.Abilities{} }

// Started is how many sandboxes were started.
func (b *Backend) Started() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.started)
}

// Specs are the specs of the sandboxes started, in order.
func (b *Backend) Specs() []sandbox.Spec {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]sandbox.Spec(nil), b.specs...)
}

// AllClosed reports whether every sandbox started was closed.
func (b *Backend) AllClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.started {
		if !s.closed.Load() {
			return false
		}
	}
	return true
}

// Env is an environment whose task ids say how rollouts behave.
type Env struct {
	// Open, when set, counts the rollouts' plugin instances made and not
	// yet closed.
	Open *atomic.Int32
	// Verified, when set, is told of each verification: the task, and
	// whether the rollout's agent ran out of time.
	Verified func(task string, timedOut bool)
}

var _ scheduler.Environment = Env{}

type rollout struct {
	env   Env
	task  scheduler.Task
	sb    sandbox.Sandbox
	reset func(context.Context) (sandbox.Sandbox, error)
}

// NewRollout fails for tasks named plugin-broken*.
func (e Env) NewRollout(ctx context.Context, t scheduler.Task, info scheduler.RolloutInfo) (scheduler.Rollout, error) {
	if strings.HasPrefix(t.ID, "plugin-broken") {
		return nil, errors.New("plugin trapped")
	}
	if e.Open != nil {
		e.Open.Add(1)
	}
	return &rollout{env: e, task: t}, nil
}

func (r *rollout) SandboxSpec(ctx context.Context) (sandbox.Spec, error) {
	return sandbox.Spec{Image: "img-" + r.task.ID}, nil
}

func (r *rollout) Bind(sb sandbox.Sandbox, reset func(context.Context) (sandbox.Sandbox, error)) {
	r.sb, r.reset = sb, reset
}

func (r *rollout) Setup(ctx context.Context) error {
	switch {
	case strings.HasPrefix(r.task.ID, "setup-broken"):
		return errors.New("setup script exited 1")
	case strings.HasPrefix(r.task.ID, "setup-hang"):
		<-ctx.Done()
		return fmt.Errorf("plugin fake hook rollout.setup: %w", ctx.Err())
	case strings.HasPrefix(r.task.ID, "setup-hook"):
		return fmt.Errorf("plugin fake hook rollout.setup: no answer within 20ms ([env] hook_timeout): %w", context.DeadlineExceeded)
	}
	return nil
}

func (r *rollout) Prompt(ctx context.Context) (string, string, error) {
	return "", "solve " + r.task.ID, nil
}

func (r *rollout) Oracle(ctx context.Context) (scheduler.OracleResult, error) {
	return scheduler.OracleResult{}, r.sb.WriteFile(ctx, "/solved", []byte("yes"), 0o644)
}

func (r *rollout) Verify(ctx context.Context, timedOut bool) (scheduler.Verdict, error) {
	if r.env.Verified != nil {
		r.env.Verified(r.task.ID, timedOut)
	}
	if strings.HasPrefix(r.task.ID, "reset") {
		// Grade in a fresh sandbox: it must not hold what the agent
		// wrote (the agent's closes in the background).
		sb, err := r.reset(ctx)
		if err != nil {
			return scheduler.Verdict{}, err
		}
		if sb == r.sb {
			return scheduler.Verdict{}, errors.New("reset returned the agent's sandbox")
		}
		if _, _, err := sb.ReadFile(ctx, "/solved", 0); err == nil {
			return scheduler.Verdict{}, errors.New("the fresh sandbox holds the agent's file")
		}
		r.sb = sb
		return scheduler.Verdict{Reward: 1, Passed: true}, nil
	}
	switch {
	case strings.HasPrefix(r.task.ID, "verify-broken"):
		return scheduler.Verdict{}, scheduler.WithClass(rundir.ClassVerifier, errors.New("no reward written"))
	case strings.HasPrefix(r.task.ID, "verify-noreward"):
		return scheduler.Verdict{Failure: "no reward: test.sh wrote neither reward.txt nor reward.json", Output: "tests ran", Log: "tests ran\n"}, nil
	case strings.HasPrefix(r.task.ID, "verify-hang"):
		<-ctx.Done()
		return scheduler.Verdict{}, fmt.Errorf("plugin fake hook rollout.verify: sandbox.exec: %w", ctx.Err())
	}
	if _, _, err := r.sb.ReadFile(ctx, "/solved", 0); err != nil {
		return scheduler.Verdict{Reward: 0}, nil
	}
	return scheduler.Verdict{Reward: 1, Passed: true}, nil
}

func (r *rollout) Teardown(ctx context.Context) error { return nil }
func (r *rollout) Close(ctx context.Context) error {
	if r.env.Open != nil {
		r.env.Open.Add(-1)
	}
	return nil
}

// Agent applies the oracle, waits for its deadline on tasks named slow*,
// does nothing on tasks named nop*, and records how many ran at once.
type Agent struct{ running, peak atomic.Int32 }

var _ scheduler.Agent = (*Agent)(nil)

// Run runs the agent of one rollout.
func (a *Agent) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	n := a.running.Add(1)
	defer a.running.Add(-1)
	for {
		p := a.peak.Load()
		if n <= p || a.peak.CompareAndSwap(p, n) {
			break
		}
	}
	switch {
	case strings.HasPrefix(in.Task.ID, "slow"):
		<-ctx.Done()
		return scheduler.AgentOutput{Turns: 1}, ctx.Err()
	case strings.HasPrefix(in.Task.ID, "nop"):
		return scheduler.AgentOutput{}, nil
	}
	time.Sleep(5 * time.Millisecond)
	_, err := in.Oracle(ctx)
	return scheduler.AgentOutput{Turns: 1, Transcript: map[string]string{"prompt": in.Prompt}}, err
}

// Peak is the most rollouts whose agents ran at once.
func (a *Agent) Peak() int { return int(a.peak.Load()) }

// NewRunner is a Runner of env, be and ag over a new run directory (its
// path is returned), with cfg and a 1 ms retry backoff. A zero
// Concurrency, Attempts or AgentTimeoutScale in cfg is 1.
func NewRunner(t *testing.T, env scheduler.Environment, be sandbox.Backend, ag scheduler.Agent, cfg scheduler.Config) (*scheduler.Runner, string) {
	t.Helper()
	cfg.Concurrency, cfg.Attempts = max(cfg.Concurrency, 1), max(cfg.Attempts, 1)
	if cfg.AgentTimeoutScale == 0 {
		cfg.AgentTimeoutScale = 1
	}
	dir := t.TempDir()
	st, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.RetryBackoff = time.Millisecond
	return &scheduler.Runner{Env: env, Backend: be, Agent: ag, Store: st, Config: cfg}, dir
}
