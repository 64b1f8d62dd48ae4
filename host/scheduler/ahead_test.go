package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
)

// startLog is a backend whose starts take a while, and which remembers
// when each rollout's sandbox started.
type startLog struct {
	schedulertest.Backend
	delay time.Duration

	mu      sync.Mutex
	started map[string]time.Time // rollout id -> when its start began
}

func (b *startLog) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	b.mu.Lock()
	if b.started == nil {
		b.started = map[string]time.Time{}
	}
	if _, ok := b.started[spec.Labels[sandbox.LabelRollout]]; !ok {
		b.started[spec.Labels[sandbox.LabelRollout]] = time.Now()
	}
	b.mu.Unlock()
	select {
	case <-time.After(b.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.Backend.Start(ctx, spec)
}

func (b *startLog) startedAt(id string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started[id]
}

func tasksNamed(n int, prefix string) []scheduler.Task {
	var tasks []scheduler.Task
	for i := range n {
		tasks = append(tasks, scheduler.Task{ID: fmt.Sprintf("%s%02d", prefix, i)})
	}
	return tasks
}

// TestPrestartStartsAhead: with prestart, a rollout finds its sandbox
// started before its turn, every sandbox and plugin instance is closed at
// the end, and the record says how long the start took ahead.
func TestPrestartStartsAhead(t *testing.T) {
	be := &startLog{delay: 40 * time.Millisecond}
	var open atomic.Int32
	ag := &aheadAgent{t: t, be: be, ahead: 2, total: 8}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{Open: &open}, be, ag,
		scheduler.Config{RunID: "r", Concurrency: 2, StartConcurrency: 4, Prestart: 2})
	tasks := tasksNamed(8, "t")
	st, err := r.Run(context.Background(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	if st.Finished != 8 {
		t.Fatalf("finished %d of 8", st.Finished)
	}
	before := 0
	for _, rec := range r.Store.Records() {
		if rec.Outcome != rundir.OutcomePassed {
			t.Errorf("%s: %s %s", rec.RolloutID, rec.Outcome, rec.Error)
		}
		if be.startedAt(rec.RolloutID).Before(rec.StartedAt) {
			before++
			if d, ok := rec.Phases["sandbox_start_ahead"]; !ok || d < 0.04 {
				t.Errorf("%s: its sandbox started ahead, but the record says %.3fs ahead (want the start's 40 ms)", rec.RolloutID, d)
			}
		}
	}
	// The first two start their own; the later ones find theirs.
	if before < 6 {
		t.Errorf("%d of 8 rollouts had their sandbox started before them, want all but the first 2", before)
	}
	if be.Started() != 8 || !be.AllClosed() || open.Load() != 0 {
		t.Errorf("%d sandboxes started (want 8), all closed %v, %d plugin instances open", be.Started(), be.AllClosed(), open.Load())
	}
	for _, spec := range be.Specs() {
		if spec.Labels[sandbox.LabelRun] != "r" || !strings.HasPrefix(spec.Labels[sandbox.LabelRollout], "t") {
			t.Errorf("a sandbox started ahead lacks the run's labels: %v", spec.Labels)
		}
	}
}

// aheadAgent is schedulertest's agent taking its time as a real one does:
// the k-th rollout's agent returns only once the pool has started the
// sandboxes of the next rollouts it may (k + ahead), however slowly the
// machine runs the pool's goroutines.
type aheadAgent struct {
	schedulertest.Agent
	t            *testing.T
	be           *startLog
	ahead, total int
	n            atomic.Int32
}

func (a *aheadAgent) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	want := min(a.total, int(a.n.Add(1))+a.ahead)
	poll.Until(a.t, fmt.Sprintf("%d sandboxes started", want), func() bool { return a.be.Started() >= want })
	return a.Agent.Run(ctx, in)
}

// changingEnv gives every plugin instance its own spec, as a plugin whose
// spec is not a function of its request would.
type changingEnv struct {
	schedulertest.Env
	n *atomic.Int32
}

func (e changingEnv) NewRollout(ctx context.Context, t scheduler.Task, info scheduler.RolloutInfo) (scheduler.Rollout, error) {
	r, err := e.Env.NewRollout(ctx, t, info)
	return changingRollout{r, e.n.Add(1)}, err
}

type changingRollout struct {
	scheduler.Rollout
	n int32
}

func (r changingRollout) SandboxSpec(ctx context.Context) (sandbox.Spec, error) {
	return sandbox.Spec{Image: fmt.Sprintf("img-%d", r.n)}, nil
}

// TestPrestartSpecChanged: a rollout whose own plugin instance asks for
// another spec than the one its sandbox was started ahead from gets a
// sandbox of its spec; the other is closed.
func TestPrestartSpecChanged(t *testing.T) {
	be := &startLog{}
	r, _ := schedulertest.NewRunner(t, changingEnv{n: new(atomic.Int32)}, be, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Concurrency: 1, Prestart: 2})
	if _, err := r.Run(context.Background(), tasksNamed(4, "t")); err != nil {
		t.Fatal(err)
	}
	images := map[string]bool{}
	for _, rec := range r.Store.Records() {
		if rec.Outcome != rundir.OutcomePassed || images[rec.Image] {
			t.Errorf("%s: %s on %s", rec.RolloutID, rec.Outcome, rec.Image)
		}
		images[rec.Image] = true
		if _, ok := rec.Phases["sandbox_start_ahead"]; ok {
			t.Errorf("%s took a sandbox started from another spec", rec.RolloutID)
		}
	}
	if !be.AllClosed() {
		t.Error("a sandbox started ahead for a spec that changed was left open")
	}
}

// TestPrestartInterruptClosesMembers: Ctrl-C while sandboxes wait in the
// pool closes them; no plugin instance is left open and nothing is
// recorded for the rollouts stopped.
func TestPrestartInterruptClosesMembers(t *testing.T) {
	be := &startLog{delay: 5 * time.Millisecond}
	var open atomic.Int32
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{Open: &open}, be, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Concurrency: 2, StartConcurrency: 4, Prestart: 4})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // Ctrl-C once the pool holds sandboxes besides the 2 running
		poll.Until(t, "4 sandboxes started", func() bool { return be.Started() >= 4 })
		cancel()
	}()
	st, err := r.Run(ctx, tasksNamed(6, "slow"))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Interrupted || len(r.Store.Records()) != 0 {
		t.Errorf("interrupted %v with %d records; want interrupted and none", st.Interrupted, len(r.Store.Records()))
	}
	// Two rollouts ran; the pool held the others' sandboxes.
	if be.Started() < 4 {
		t.Errorf("%d sandboxes started, want the pool's too", be.Started())
	}
	if !be.AllClosed() || open.Load() != 0 {
		t.Errorf("after Ctrl-C: all sandboxes closed %v, %d plugin instances open", be.AllClosed(), open.Load())
	}
}

// TestPrestartRunEndsOnRecordError: when a record cannot be stored the run
// ends, and the sandboxes it started ahead for rollouts that will not run
// are removed.
func TestPrestartRunEndsOnRecordError(t *testing.T) {
	be := &startLog{delay: time.Millisecond}
	var open atomic.Int32
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{Open: &open}, be, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Concurrency: 1, Prestart: 3})
	r.Store.Close()
	if _, err := r.Run(context.Background(), tasksNamed(10, "t")); err == nil {
		t.Fatal("want the record error")
	}
	if !be.AllClosed() || open.Load() != 0 {
		t.Errorf("all sandboxes closed %v, %d plugin instances open", be.AllClosed(), open.Load())
	}
}

// TestPrestartFailuresAreTheRollouts: a plugin that fails to start ahead
// fails its rollout as it fails on the rollout's own start (same class);
// a sandbox that fails to start ahead is started again by its rollout.
func TestPrestartFailuresAreTheRollouts(t *testing.T) {
	var calls atomic.Int32
	be := &startLog{}
	be.Fail = func(spec sandbox.Spec) error {
		if spec.Image == "img-flaky" && calls.Add(1) == 1 {
			return fmt.Errorf("engine restarting: %w", sandbox.ErrEngine)
		}
		return nil
	}
	var open atomic.Int32
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{Open: &open}, be, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Concurrency: 1, Prestart: 2, Retries: 1})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "ok"}, {ID: "plugin-broken"}, {ID: "flaky"}}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.Store.Records() {
		switch rec.TaskID {
		case "plugin-broken":
			if rec.Outcome != rundir.OutcomeInfraError || rec.ErrorClass != rundir.ClassPlugin || rec.Try != 1 {
				t.Errorf("plugin-broken: %s class %s try %d", rec.Outcome, rec.ErrorClass, rec.Try)
			}
		case "flaky":
			if rec.Outcome != rundir.OutcomePassed || calls.Load() < 2 {
				t.Errorf("flaky: %s (%s) after %d starts", rec.Outcome, rec.Error, calls.Load())
			}
		case "ok":
			if rec.Outcome != rundir.OutcomePassed {
				t.Errorf("ok: %s %s", rec.Outcome, rec.Error)
			}
		}
	}
	if !be.AllClosed() || open.Load() != 0 {
		t.Errorf("all sandboxes closed %v, %d plugin instances open", be.AllClosed(), open.Load())
	}
}

// groupBarrier is a backend whose starts of a task wait until the task's
// whole group is starting, or give up after a while and say so.
type groupBarrier struct {
	schedulertest.Backend
	size int

	mu      sync.Mutex
	waiting map[string]int
	arrived map[string]chan struct{}
	apart   []string  // rollouts whose start went ahead without their group
	giveUp  time.Time // when a start stops waiting for its group (the test's deadline)
}

func (b *groupBarrier) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	b.mu.Lock()
	task := spec.Image
	if b.waiting == nil {
		b.waiting, b.arrived = map[string]int{}, map[string]chan struct{}{}
	}
	if b.arrived[task] == nil {
		b.arrived[task] = make(chan struct{})
	}
	b.waiting[task]++
	all := b.arrived[task]
	if b.waiting[task] == b.size {
		close(all)
	}
	b.mu.Unlock()
	select {
	case <-all:
	case <-time.After(time.Until(b.giveUp)):
		b.mu.Lock()
		b.apart = append(b.apart, spec.Labels[sandbox.LabelRollout])
		b.mu.Unlock()
	}
	return b.Backend.Start(ctx, spec)
}

// TestPrestartGroupsStartTogether: in a process run the sandboxes of a
// group are started ahead together: each group's starts all run at once.
func TestPrestartGroupsStartTogether(t *testing.T) {
	be := &groupBarrier{size: 4, giveUp: poll.Deadline(t)}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, be, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Concurrency: 1, StartConcurrency: 8, Attempts: 4, GroupSize: 4, Prestart: 4})
	if _, err := r.Run(context.Background(), tasksNamed(3, "g")); err != nil {
		t.Fatal(err)
	}
	if len(be.apart) > 0 {
		t.Errorf("sandboxes started apart from their group: %v", be.apart)
	}
	if be.Started() != 12 || !be.AllClosed() {
		t.Errorf("%d sandboxes started (want 12), all closed %v", be.Started(), be.AllClosed())
	}
}
