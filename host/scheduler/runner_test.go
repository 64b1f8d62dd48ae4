package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
	"github.com/proctor-dev/proctor/sandbox"
)

func TestRunnerOutcomes(t *testing.T) {
	tasks := []scheduler.Task{
		{ID: "ok"}, {ID: "nop"}, {ID: "slow", AgentTimeout: 50 * time.Millisecond},
		{ID: "setup-broken"}, {ID: "verify-broken"}, {ID: "plugin-broken"},
	}
	be := &schedulertest.Backend{}
	var mu sync.Mutex
	timedOutVerified := map[string]int{} // task → verifications told the agent timed out
	env := schedulertest.Env{Verified: func(task string, timedOut bool) {
		if timedOut {
			mu.Lock()
			timedOutVerified[task]++
			mu.Unlock()
		}
	}}
	r, _ := schedulertest.NewRunner(t, env, be, &schedulertest.Agent{}, scheduler.Config{RunID: "r1", Concurrency: 3, Attempts: 2, Retries: 1})
	st, err := r.Run(context.Background(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ok": rundir.OutcomePassed, "nop": rundir.OutcomeFailed, "slow": rundir.OutcomeAgentTimeout,
		"setup-broken": rundir.OutcomeInfraError, "verify-broken": rundir.OutcomeInfraError,
		"plugin-broken": rundir.OutcomeInfraError,
	}
	wantClass := map[string]string{"setup-broken": rundir.ClassSetup, "verify-broken": rundir.ClassVerifier, "plugin-broken": rundir.ClassPlugin}
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
		if rec.Outcome == rundir.OutcomeInfraError && rec.Try != 1 {
			t.Errorf("%s: infra error recorded at try %d, want the last try (1)", rec.RolloutID, rec.Try)
		}
		if rec.Outcome != rundir.OutcomeInfraError && rec.Try != 0 {
			t.Errorf("%s: retried a final outcome", rec.RolloutID)
		}
	}
	if !be.AllClosed() {
		t.Error("a sandbox was left open")
	}
	// The slow task's verifier ran after its agent timed out, and was told
	// so; the record says why the agent stopped.
	for _, rec := range recs {
		if _, verified := rec.Phases["verify"]; rec.TaskID == "slow" && (!verified || rec.StopReason != "agent_timeout") {
			t.Errorf("slow: verify phase recorded %v, stop reason %q; want verified after agent_timeout", verified, rec.StopReason)
		}
	}
	if n := timedOutVerified["slow"]; n != 2 {
		t.Errorf("slow: %d verifications told the agent timed out, want 2 (one per attempt)", n)
	}
	if len(timedOutVerified) != 1 {
		t.Errorf("verifications told of a timeout: %v, want only slow's", timedOutVerified)
	}
	for _, s := range be.Specs() {
		if s.Labels[sandbox.LabelRun] != "r1" || s.Labels[sandbox.LabelRollout] == "" {
			t.Errorf("sandbox labels %v lack run and rollout ids", s.Labels)
		}
	}
}

func TestRunnerConcurrencyAndResume(t *testing.T) {
	var tasks []scheduler.Task
	for i := range 20 {
		tasks = append(tasks, scheduler.Task{ID: fmt.Sprintf("t%02d", i)})
	}
	ag := &schedulertest.Agent{}
	r, dir := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, ag, scheduler.Config{RunID: "r", Concurrency: 4})
	if _, err := r.Run(context.Background(), tasks[:10]); err != nil {
		t.Fatal(err)
	}
	if p := ag.Peak(); p > 4 || p < 2 {
		t.Errorf("peak concurrency %d, want 2..4", p)
	}
	r.Store.Close()

	// Resume with a wider filter: only the missing ten run.
	st, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r2 := &scheduler.Runner{Env: schedulertest.Env{}, Backend: &schedulertest.Backend{}, Agent: ag, Store: st, Config: scheduler.Config{RunID: "r", Concurrency: 4, Attempts: 1, AgentTimeoutScale: 1}}
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
	tasks := []scheduler.Task{{ID: "slow-a"}, {ID: "slow-b"}, {ID: "slow-c"}}
	be := &schedulertest.Backend{}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, be, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Concurrency: 2})
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
	if !be.AllClosed() {
		t.Error("interrupted rollouts left sandboxes open")
	}
}

// cancelScorer stands for Ctrl-C while a stacked reward scores: it cancels
// the run and reports what a plugin cut short reports.
type cancelScorer struct{ cancel context.CancelFunc }

func (s cancelScorer) Score(ctx context.Context, in scheduler.ScoreInput) rundir.RewardScore {
	s.cancel()
	return rundir.RewardScore{Name: "judge", Weight: 1, Error: ctx.Err().Error()}
}

// TestRunnerInterruptWhileScoring: a rollout interrupted during its
// reward phase is not recorded (its scores would be "context canceled"
// and a resume would skip it).
func TestRunnerInterruptWhileScoring(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r"})
	r.Rewards = []scheduler.Scorer{cancelScorer{cancel}}
	st, err := r.Run(ctx, []scheduler.Task{{ID: "ok"}})
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
	be := &schedulertest.Backend{Fail: func(sandbox.Spec) error {
		if calls.Add(1) == 1 {
			return fmt.Errorf("engine restarting: %w", sandbox.ErrEngine)
		}
		return nil
	}}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, be, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Retries: 2})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "ok"}}); err != nil {
		t.Fatal(err)
	}
	recs := r.Store.Records()
	if len(recs) != 1 || recs[0].Outcome != rundir.OutcomePassed || recs[0].Try != 1 {
		t.Fatalf("want one passed record at try 1, got %+v", recs)
	}
}

// TestRunnerResetSandbox: a verifier's reset starts the same spec again,
// and by the end of the rollout both sandboxes are closed;
// a reset that cannot start a sandbox is an infra_error of class sandbox.
func TestRunnerResetSandbox(t *testing.T) {
	be := &schedulertest.Backend{}
	starts := map[string]int{}
	var mu sync.Mutex
	be.Fail = func(spec sandbox.Spec) error {
		mu.Lock()
		defer mu.Unlock()
		starts[spec.Image]++
		if spec.Image == "img-reset-broken" && starts[spec.Image] > 1 {
			return fmt.Errorf("engine said no: %w", sandbox.ErrEngine)
		}
		return nil
	}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, be, &schedulertest.Agent{}, scheduler.Config{RunID: "r1", Concurrency: 2, Attempts: 1})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "reset-ok"}, {ID: "reset-broken"}}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.Store.Records() {
		switch rec.TaskID {
		case "reset-ok":
			if rec.Outcome != rundir.OutcomePassed {
				t.Errorf("reset-ok: %s %s", rec.Outcome, rec.Error)
			}
		case "reset-broken":
			if rec.Outcome != rundir.OutcomeInfraError || rec.ErrorClass != rundir.ClassSandbox || !strings.Contains(rec.Error, "reset sandbox") {
				t.Errorf("reset-broken: %s %s %s", rec.Outcome, rec.ErrorClass, rec.Error)
			}
		}
	}
	if be.Started() != 3 || !be.AllClosed() {
		t.Errorf("%d sandboxes started (want 3), all closed: %v", be.Started(), be.AllClosed())
	}
	for i, spec := range be.Specs() {
		if spec.Labels[sandbox.LabelRun] != "r1" || spec.Labels[sandbox.LabelRollout] == "" {
			t.Errorf("sandbox %d has no run labels: %v", i, spec.Labels)
		}
	}
}

// TestRunnerStopsAtFirstRecordError: a record that cannot be stored (the
// disk is gone) ends the run: no rollout starts after it, the ones
// running finish, and Run returns the error.
func TestRunnerStopsAtFirstRecordError(t *testing.T) {
	var tasks []scheduler.Task
	for i := range 10 {
		tasks = append(tasks, scheduler.Task{ID: fmt.Sprintf("t%02d", i)})
	}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Concurrency: 2})
	r.Store.Close() // every append fails from here on
	st, err := r.Run(context.Background(), tasks)
	if err == nil || !strings.Contains(err.Error(), "record rollout") {
		t.Fatalf("Run: %v, want the record error", err)
	}
	if st.Planned != 10 || st.Finished < 1 || st.Finished > 2 || st.Interrupted {
		t.Errorf("stats %+v: want at most the 2 rollouts running when the first record failed", st)
	}
}

// TestRunnerCancelsRunningAtRecordError: when a record cannot be stored,
// the rollouts still running are cancelled at once, not left to run to
// their end for work the run then throws away: the slow one here would
// wait out its agent timeout (an hour: no machine is that slow to record
// the fast one) and be counted.
func TestRunnerCancelsRunningAtRecordError(t *testing.T) {
	tasks := []scheduler.Task{{ID: "slow", AgentTimeout: time.Hour}, {ID: "fast"}}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Concurrency: 2})
	r.Store.Close() // every append fails from here on
	st, err := r.Run(context.Background(), tasks)
	if err == nil || !strings.Contains(err.Error(), "record rollout fast#0") {
		t.Fatalf("Run: %v, want the record error of fast#0", err)
	}
	if st.Finished != 1 || st.Outcomes[rundir.OutcomeAgentTimeout] != 0 || st.Interrupted {
		t.Errorf("stats %+v: want only fast#0 finished, slow#0 cancelled when its record failed", st)
	}
}

// TestRunnerRefusesImpossibleConfig: the Runner has no defaults of its
// own (config fills them in); a Concurrency or Attempts below 1 is an
// error, not a run that does nothing.
func TestRunnerRefusesImpossibleConfig(t *testing.T) {
	for _, cfg := range []scheduler.Config{{Attempts: 1}, {Concurrency: 1}} {
		st, err := rundir.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		r := &scheduler.Runner{Env: schedulertest.Env{}, Backend: &schedulertest.Backend{}, Agent: &schedulertest.Agent{}, Store: st, Config: cfg}
		if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "ok"}}); err == nil || !strings.Contains(err.Error(), "want at least 1") {
			t.Errorf("config %+v: %v", cfg, err)
		}
		if n := len(st.Records()); n != 0 {
			t.Errorf("config %+v: %d rollouts ran", cfg, n)
		}
		st.Close()
	}
}

// idleEnv records, per rollout, the calls of its environment, its
// agent's run, and the hints that it waits.
type idleEnv struct {
	schedulertest.Env
	mu  sync.Mutex
	log map[string][]string
}

type idleRollout struct {
	scheduler.Rollout
	env *idleEnv
	id  string
}

func (e *idleEnv) note(id, what string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log[id] = append(e.log[id], what)
}

func (e *idleEnv) NewRollout(ctx context.Context, t scheduler.Task, info scheduler.RolloutInfo) (scheduler.Rollout, error) {
	r, err := e.Env.NewRollout(ctx, t, info)
	if err != nil {
		return nil, err
	}
	return &idleRollout{Rollout: r, env: e, id: info.RolloutID}, nil
}

func (r *idleRollout) Idle(ctx context.Context) { r.env.note(r.id, "idle") }
func (r *idleRollout) SandboxSpec(ctx context.Context) (sandbox.Spec, error) {
	r.env.note(r.id, "spec")
	return r.Rollout.SandboxSpec(ctx)
}
func (r *idleRollout) Bind(sb sandbox.Sandbox, reset func(context.Context) (sandbox.Sandbox, error)) {
	r.env.note(r.id, "bind")
	r.Rollout.Bind(sb, reset)
}
func (r *idleRollout) Setup(ctx context.Context) error {
	r.env.note(r.id, "setup")
	return r.Rollout.Setup(ctx)
}
func (r *idleRollout) Prompt(ctx context.Context) (string, string, error) {
	r.env.note(r.id, "prompt")
	return r.Rollout.Prompt(ctx)
}
func (r *idleRollout) Verify(ctx context.Context, timedOut bool) (scheduler.Verdict, error) {
	r.env.note(r.id, "verify")
	return r.Rollout.Verify(ctx, timedOut)
}

type idleAgent struct {
	schedulertest.Agent
	env *idleEnv
}

func (a *idleAgent) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	a.env.note(in.RolloutID, "agent")
	return a.Agent.Run(ctx, in)
}

// The environment hears that a rollout waits before its sandbox starts and
// before its agent runs, the long waits of a rollout, and at no other time.
func TestRunnerIdlesWhileWaiting(t *testing.T) {
	env := &idleEnv{log: map[string][]string{}}
	r, _ := schedulertest.NewRunner(t, env, &schedulertest.Backend{}, &idleAgent{env: env}, scheduler.Config{RunID: "r", Concurrency: 2})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "a"}, {ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	want := "spec idle bind setup prompt idle agent verify"
	for _, id := range []string{"a#0", "b#0"} {
		if got := strings.Join(env.log[id], " "); got != want {
			t.Errorf("%s: %s, want %s", id, got, want)
		}
	}
}

// taskEnv gives each rollout a sandbox spec and a verdict of its own.
type taskEnv struct {
	spec    sandbox.Spec
	verdict scheduler.Verdict
}

type taskRollout struct {
	scheduler.Rollout
	env *taskEnv
}

func (e *taskEnv) NewRollout(ctx context.Context, t scheduler.Task, info scheduler.RolloutInfo) (scheduler.Rollout, error) {
	ro, err := schedulertest.Env{}.NewRollout(ctx, t, info)
	return &taskRollout{Rollout: ro, env: e}, err
}
func (r *taskRollout) SandboxSpec(ctx context.Context) (sandbox.Spec, error) { return r.env.spec, nil }
func (r *taskRollout) Verify(ctx context.Context, timedOut bool) (scheduler.Verdict, error) {
	return r.env.verdict, nil
}

// TestRunnerKeepsVerifierLog: the verifier's whole log goes to verifier/
// in the run directory, named by the record, with where the reward came
// from.
func TestRunnerKeepsVerifierLog(t *testing.T) {
	env := &taskEnv{verdict: scheduler.Verdict{Reward: 1, Passed: true, Output: "tail", Log: "the whole log\n", RewardSource: "/logs/verifier/reward.txt"}}
	r, dir := schedulertest.NewRunner(t, env, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r"})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "a/b"}}); err != nil {
		t.Fatal(err)
	}
	rec := r.Store.Records()[0]
	if rec.VerifierLog != "verifier/a%2Fb.0.try0.txt" || rec.RewardSource != "/logs/verifier/reward.txt" || rec.VerifierOutput != "tail" {
		t.Fatalf("%+v", rec)
	}
	if b, err := os.ReadFile(filepath.Join(dir, rec.VerifierLog)); err != nil || string(b) != "the whole log\n" {
		t.Fatalf("%q %v", b, err)
	}
}

// blockingBackend starts nothing until its context ends.
type blockingBackend struct{ schedulertest.Backend }

func (*blockingBackend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestRunnerBuildTimeout: a spec's start timeout (a task's
// build_timeout_sec) bounds the sandbox's start, and the error says so.
func TestRunnerBuildTimeout(t *testing.T) {
	env := &taskEnv{spec: sandbox.Spec{Image: "x", StartTimeout: 50 * time.Millisecond}}
	r, _ := schedulertest.NewRunner(t, env, &blockingBackend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Timeouts: scheduler.Timeouts{SandboxStart: time.Minute}})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "slow-build"}}); err != nil {
		t.Fatal(err)
	}
	rec := r.Store.Records()[0]
	if rec.Outcome != rundir.OutcomeInfraError || rec.ErrorClass != rundir.ClassSandbox || !strings.Contains(rec.Error, "the task's build timeout of 50ms passed") {
		t.Fatalf("%+v", rec)
	}
}

// TestRunnerStopsWhenHostFilesChanged: a sandbox start that finds the
// files the host puts into every sandbox changed (sandbox.ErrTampered)
// ends the run with that error, records nothing for it (a resume runs it
// again) and starts no rollout after it, instead of retrying and moving
// on as with an engine's error.
func TestRunnerStopsWhenHostFilesChanged(t *testing.T) {
	var tasks []scheduler.Task
	for i := range 10 {
		tasks = append(tasks, scheduler.Task{ID: fmt.Sprintf("t%02d", i)})
	}
	var starts atomic.Int32
	be := &schedulertest.Backend{Fail: func(sandbox.Spec) error {
		if starts.Add(1) == 3 {
			return fmt.Errorf("warden folder /x/warden: %w", sandbox.ErrTampered)
		}
		return nil
	}}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, be, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Concurrency: 1, Retries: 3})
	st, err := r.Run(context.Background(), tasks)
	if !errors.Is(err, sandbox.ErrTampered) {
		t.Fatalf("Run: %v, want the tampered error", err)
	}
	if st.Finished != 2 || starts.Load() != 3 {
		t.Errorf("stats %+v after %d starts: want the 2 rollouts before the third start, nothing after", st, starts.Load())
	}
	for _, rec := range r.Store.Records() {
		if rec.Outcome == rundir.OutcomeInfraError {
			t.Errorf("recorded %s as %s: %s", rec.RolloutID, rec.Outcome, rec.Error)
		}
	}
}
