package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/results"
	"github.com/proctor-dev/proctor/sandbox"
)

// fakeSandbox records calls; the runner tests exercise scheduling and
// classification, the sandbox backends have their own conformance suite.
type fakeSandbox struct {
	closed atomic.Bool
	files  sync.Map
}

func (f *fakeSandbox) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if f.closed.Load() {
		return sandbox.ExecResult{}, sandbox.ErrClosed
	}
	return sandbox.ExecResult{}, nil
}
func (f *fakeSandbox) WriteFile(ctx context.Context, p string, b []byte, m fs.FileMode) error {
	f.files.Store(p, b)
	return nil
}
func (f *fakeSandbox) ReadFile(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	if b, ok := f.files.Load(p); ok {
		return b.([]byte), int64(len(b.([]byte))), nil
	}
	return nil, 0, sandbox.ErrNotFound
}
func (f *fakeSandbox) Upload(ctx context.Context, dir string, r io.Reader) error { return nil }
func (f *fakeSandbox) Download(ctx context.Context, p string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("")), nil
}
func (f *fakeSandbox) Close(ctx context.Context) error { f.closed.Store(true); return nil }

type fakeBackend struct {
	mu      sync.Mutex
	started []*fakeSandbox
	specs   []sandbox.Spec
	fail    func(spec sandbox.Spec) error
}

func (b *fakeBackend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if b.fail != nil {
		if err := b.fail(spec); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sb := &fakeSandbox{}
	b.started = append(b.started, sb)
	b.specs = append(b.specs, spec)
	return sb, nil
}

func (b *fakeBackend) allClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.started {
		if !s.closed.Load() {
			return false
		}
	}
	return true
}

// fakeEnv: the task id says how the rollout behaves.
type fakeEnv struct{ verifyCalls atomic.Int32 }

type fakeRollout struct {
	env   *fakeEnv
	task  Task
	sb    sandbox.Sandbox
	reset func(context.Context) (sandbox.Sandbox, error)
}

func (e *fakeEnv) NewRollout(ctx context.Context, t Task, info RolloutInfo) (Rollout, error) {
	if strings.HasPrefix(t.ID, "plugin-broken") {
		return nil, errors.New("plugin trapped")
	}
	return &fakeRollout{env: e, task: t}, nil
}
func (r *fakeRollout) SandboxSpec(ctx context.Context) (sandbox.Spec, error) {
	return sandbox.Spec{Image: "img-" + r.task.ID}, nil
}
func (r *fakeRollout) Bind(sb sandbox.Sandbox, reset func(context.Context) (sandbox.Sandbox, error)) {
	r.sb, r.reset = sb, reset
}
func (r *fakeRollout) Setup(ctx context.Context) error {
	if strings.HasPrefix(r.task.ID, "setup-broken") {
		return errors.New("setup script exited 1")
	}
	return nil
}
func (r *fakeRollout) Prompt(ctx context.Context) (string, string, error) {
	return "", "solve " + r.task.ID, nil
}
func (r *fakeRollout) Oracle(ctx context.Context) (OracleResult, error) {
	return OracleResult{}, r.sb.WriteFile(ctx, "/solved", []byte("yes"), 0o644)
}
func (r *fakeRollout) Verify(ctx context.Context, timedOut bool) (Verdict, error) {
	r.env.verifyCalls.Add(1)
	if strings.HasPrefix(r.task.ID, "reset") {
		// Grade in a fresh sandbox: it must not hold what the agent
		// wrote (the agent's closes in the background).
		sb, err := r.reset(ctx)
		if err != nil {
			return Verdict{}, err
		}
		if sb == r.sb {
			return Verdict{}, errors.New("reset returned the agent's sandbox")
		}
		if _, _, err := sb.ReadFile(ctx, "/solved", 0); err == nil {
			return Verdict{}, errors.New("the fresh sandbox holds the agent's file")
		}
		r.sb = sb
		return Verdict{Reward: 1, Passed: true}, nil
	}
	if strings.HasPrefix(r.task.ID, "verify-broken") {
		return Verdict{}, WithClass(results.ClassVerifier, errors.New("no reward written"))
	}
	_, _, err := r.sb.ReadFile(ctx, "/solved", 0)
	if err != nil {
		return Verdict{Reward: 0}, nil
	}
	return Verdict{Reward: 1, Passed: true}, nil
}
func (r *fakeRollout) Teardown(ctx context.Context) error { return nil }
func (r *fakeRollout) Close(ctx context.Context) error    { return nil }

// fakeAgent applies the oracle, or sleeps for tasks named slow-*.
type fakeAgent struct{ running, peak atomic.Int32 }

func (a *fakeAgent) Run(ctx context.Context, in AgentInput) (AgentOutput, error) {
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
		return AgentOutput{Turns: 1}, ctx.Err()
	case strings.HasPrefix(in.Task.ID, "nop"):
		return AgentOutput{}, nil
	}
	time.Sleep(5 * time.Millisecond)
	_, err := in.Oracle(ctx)
	return AgentOutput{Turns: 1, Transcript: map[string]string{"prompt": in.Prompt}}, err
}

func newRunner(t *testing.T, env Environment, be sandbox.Backend, ag Agent, cfg Config) (*Runner, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := results.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.RetryBackoff = time.Millisecond
	return &Runner{Env: env, Backend: be, Agent: ag, Store: st, Config: cfg}, dir
}

func TestRunnerOutcomes(t *testing.T) {
	tasks := []Task{
		{ID: "ok"}, {ID: "nop"}, {ID: "slow", AgentTimeout: 50 * time.Millisecond},
		{ID: "setup-broken"}, {ID: "verify-broken"}, {ID: "plugin-broken"},
	}
	be := &fakeBackend{}
	env := &fakeEnv{}
	r, _ := newRunner(t, env, be, &fakeAgent{}, Config{RunID: "r1", Concurrency: 3, Attempts: 2, Retries: 1})
	st, err := r.Run(context.Background(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ok": results.OutcomePassed, "nop": results.OutcomeFailed, "slow": results.OutcomeAgentTimeout,
		"setup-broken": results.OutcomeInfraError, "verify-broken": results.OutcomeInfraError,
		"plugin-broken": results.OutcomeInfraError,
	}
	wantClass := map[string]string{"setup-broken": results.ClassSetup, "verify-broken": results.ClassVerifier, "plugin-broken": results.ClassPlugin}
	recs := r.Store.Records()
	if len(recs) != len(tasks)*2 || st.Finished != len(tasks)*2 {
		t.Fatalf("got %d records, %d finished; want %d", len(recs), st.Finished, len(tasks)*2)
	}
	for _, rec := range recs {
		if rec.Outcome != want[rec.TaskID] {
			t.Errorf("%s: outcome %s, want %s (err %q)", rec.RolloutID, rec.Outcome, want[rec.TaskID], rec.Error)
		}
		if c := wantClass[rec.TaskID]; c != "" && rec.ErrorClass != c {
			t.Errorf("%s: class %s, want %s", rec.RolloutID, rec.ErrorClass, c)
		}
		if rec.Outcome == results.OutcomeInfraError && rec.Try != 1 {
			t.Errorf("%s: infra error recorded at try %d, want the last try (1)", rec.RolloutID, rec.Try)
		}
		if rec.Outcome != results.OutcomeInfraError && rec.Try != 0 {
			t.Errorf("%s: retried a final outcome", rec.RolloutID)
		}
	}
	if !be.allClosed() {
		t.Error("a sandbox was left open")
	}
	// The slow task's verifier ran after its agent timed out.
	for _, rec := range recs {
		if rec.TaskID == "slow" && rec.Phases["verify"] == 0 && rec.StopReason != "agent_timeout" {
			t.Errorf("slow: verify did not run after the agent timeout: %+v", rec)
		}
	}
	for _, s := range be.specs {
		if s.Labels[sandbox.LabelRun] != "r1" || s.Labels[sandbox.LabelRollout] == "" {
			t.Errorf("sandbox labels %v lack run and rollout ids", s.Labels)
		}
	}
}

func TestRunnerConcurrencyAndResume(t *testing.T) {
	var tasks []Task
	for i := range 20 {
		tasks = append(tasks, Task{ID: fmt.Sprintf("t%02d", i)})
	}
	ag := &fakeAgent{}
	r, dir := newRunner(t, &fakeEnv{}, &fakeBackend{}, ag, Config{RunID: "r", Concurrency: 4})
	if _, err := r.Run(context.Background(), tasks[:10]); err != nil {
		t.Fatal(err)
	}
	if p := ag.peak.Load(); p > 4 || p < 2 {
		t.Errorf("peak concurrency %d, want 2..4", p)
	}
	r.Store.Close()

	// Resume with a wider filter: only the missing ten run.
	st, err := results.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r2 := &Runner{Env: &fakeEnv{}, Backend: &fakeBackend{}, Agent: ag, Store: st, Config: Config{RunID: "r", Concurrency: 4}}
	s, err := r2.Run(context.Background(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	if s.Skipped != 10 || s.Finished != 10 {
		t.Errorf("resume: skipped %d finished %d, want 10 and 10", s.Skipped, s.Finished)
	}
	seen := map[string]int{}
	for _, rec := range st.Records() {
		seen[rec.RolloutID]++
	}
	if len(seen) != 20 {
		t.Errorf("%d identities recorded, want 20", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s recorded %d times", id, n)
		}
	}
}

func TestRunnerInterruptRecordsNothingInFlight(t *testing.T) {
	tasks := []Task{{ID: "slow-a"}, {ID: "slow-b"}, {ID: "slow-c"}}
	be := &fakeBackend{}
	r, _ := newRunner(t, &fakeEnv{}, be, &fakeAgent{}, Config{RunID: "r", Concurrency: 2})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	st, err := r.Run(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Interrupted {
		t.Error("run not marked interrupted")
	}
	if n := len(r.Store.Records()); n != 0 {
		t.Errorf("%d interrupted rollouts recorded; they must be left for a resume", n)
	}
	if !be.allClosed() {
		t.Error("interrupted rollouts left sandboxes open")
	}
}

// cancelScorer stands for Ctrl-C while a stacked reward scores: it cancels
// the run and reports what a plugin cut short reports.
type cancelScorer struct{ cancel context.CancelFunc }

func (s cancelScorer) Score(ctx context.Context, in ScoreInput) results.RewardScore {
	s.cancel()
	return results.RewardScore{Name: "judge", Weight: 1, Error: ctx.Err().Error()}
}

// TestRunnerInterruptWhileScoring: a rollout interrupted during its
// reward phase is not recorded (its scores would be "context canceled"
// and a resume would skip it).
func TestRunnerInterruptWhileScoring(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, _ := newRunner(t, &fakeEnv{}, &fakeBackend{}, &fakeAgent{}, Config{RunID: "r"})
	r.Rewards = []Scorer{cancelScorer{cancel}}
	st, err := r.Run(ctx, []Task{{ID: "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	if recs := r.Store.Records(); len(recs) != 0 || st.Finished != 0 || !st.Interrupted {
		t.Fatalf("interrupted while scoring: %d records (%+v), stats %+v; want none, left for a resume", len(recs), recs, st)
	}
	if r.Store.Done("ok", 0) {
		t.Error("a resume would skip the interrupted rollout")
	}
}

func TestRunnerSandboxStartFailureIsRetried(t *testing.T) {
	var calls atomic.Int32
	be := &fakeBackend{fail: func(sandbox.Spec) error {
		if calls.Add(1) == 1 {
			return fmt.Errorf("engine restarting: %w", sandbox.ErrEngine)
		}
		return nil
	}}
	r, _ := newRunner(t, &fakeEnv{}, be, &fakeAgent{}, Config{RunID: "r", Retries: 2})
	if _, err := r.Run(context.Background(), []Task{{ID: "ok"}}); err != nil {
		t.Fatal(err)
	}
	recs := r.Store.Records()
	if len(recs) != 1 || recs[0].Outcome != results.OutcomePassed || recs[0].Try != 1 {
		t.Fatalf("want one passed record at try 1, got %+v", recs)
	}
}

// TestRunnerResetSandbox: a verifier's reset starts the same spec again,
// and by the end of the rollout both sandboxes are closed;
// a reset that cannot start a sandbox is an infra_error of class sandbox.
func TestRunnerResetSandbox(t *testing.T) {
	be := &fakeBackend{}
	starts := map[string]int{}
	var mu sync.Mutex
	be.fail = func(spec sandbox.Spec) error {
		mu.Lock()
		defer mu.Unlock()
		starts[spec.Image]++
		if spec.Image == "img-reset-broken" && starts[spec.Image] > 1 {
			return fmt.Errorf("engine said no: %w", sandbox.ErrEngine)
		}
		return nil
	}
	r, _ := newRunner(t, &fakeEnv{}, be, &fakeAgent{}, Config{RunID: "r1", Concurrency: 2, Attempts: 1})
	if _, err := r.Run(context.Background(), []Task{{ID: "reset-ok"}, {ID: "reset-broken"}}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.Store.Records() {
		switch rec.TaskID {
		case "reset-ok":
			if rec.Outcome != results.OutcomePassed {
				t.Errorf("reset-ok: %s %s", rec.Outcome, rec.Error)
			}
		case "reset-broken":
			if rec.Outcome != results.OutcomeInfraError || rec.ErrorClass != results.ClassSandbox || !strings.Contains(rec.Error, "reset sandbox") {
				t.Errorf("reset-broken: %s %s %s", rec.Outcome, rec.ErrorClass, rec.Error)
			}
		}
	}
	if len(be.started) != 3 || !be.allClosed() {
		t.Errorf("%d sandboxes started (want 3), all closed: %v", len(be.started), be.allClosed())
	}
	for i, spec := range be.specs {
		if spec.Labels[sandbox.LabelRun] != "r1" || spec.Labels[sandbox.LabelRollout] == "" {
			t.Errorf("sandbox %d has no run labels: %v", i, spec.Labels)
		}
	}
}

// taskEnv gives each rollout a sandbox spec and a verdict of its own.
type taskEnv struct {
	fakeEnv
	spec    sandbox.Spec
	verdict Verdict
}

type taskRollout struct {
	*fakeRollout
	env *taskEnv
}

func (e *taskEnv) NewRollout(ctx context.Context, t Task, info RolloutInfo) (Rollout, error) {
	return &taskRollout{fakeRollout: &fakeRollout{env: &e.fakeEnv, task: t}, env: e}, nil
}
func (r *taskRollout) SandboxSpec(ctx context.Context) (sandbox.Spec, error) { return r.env.spec, nil }
func (r *taskRollout) Verify(ctx context.Context, timedOut bool) (Verdict, error) {
	return r.env.verdict, nil
}

// blockingBackend starts nothing until its context ends.
type blockingBackend struct{}

func (blockingBackend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestRunnerKeepsVerifierLog: the verifier's whole log goes to verifier/
// in the run directory, named by the record, with where the reward came
// from.
func TestRunnerKeepsVerifierLog(t *testing.T) {
	env := &taskEnv{verdict: Verdict{Reward: 1, Passed: true, Output: "tail", Log: "the whole log\n", RewardSource: "/logs/verifier/reward.txt"}}
	r, dir := newRunner(t, env, &fakeBackend{}, &fakeAgent{}, Config{RunID: "r", Concurrency: 1})
	if _, err := r.Run(context.Background(), []Task{{ID: "a/b"}}); err != nil {
		t.Fatal(err)
	}
	rec := r.Store.Records()[0]
	if rec.VerifierLog != "verifier/a_b.0.try0.txt" || rec.RewardSource != "/logs/verifier/reward.txt" || rec.VerifierOutput != "tail" {
		t.Fatalf("%+v", rec)
	}
	if b, err := os.ReadFile(filepath.Join(dir, rec.VerifierLog)); err != nil || string(b) != "the whole log\n" {
		t.Fatalf("%q %v", b, err)
	}
}

// TestRunnerBuildTimeout: a spec's start timeout (a task's
// build_timeout_sec) bounds the sandbox's start, and the error says so.
func TestRunnerBuildTimeout(t *testing.T) {
	env := &taskEnv{spec: sandbox.Spec{Image: "x", StartTimeout: 50 * time.Millisecond}}
	r, _ := newRunner(t, env, blockingBackend{}, &fakeAgent{}, Config{RunID: "r", Concurrency: 1, Timeouts: Timeouts{SandboxStart: time.Minute}})
	if _, err := r.Run(context.Background(), []Task{{ID: "slow-build"}}); err != nil {
		t.Fatal(err)
	}
	rec := r.Store.Records()[0]
	if rec.Outcome != results.OutcomeInfraError || rec.ErrorClass != results.ClassSandbox || !strings.Contains(rec.Error, "the task's build timeout of 50ms passed") {
		t.Fatalf("%+v", rec)
	}
}
