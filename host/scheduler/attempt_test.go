package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
)

// TestAttempter: an attempt far beyond Attempts runs, is recorded under
// its own identity, retried while it is an infra_error and handed to
// OnRecord; a cancelled one is not recorded; a bad Config is refused.
func TestAttempter(t *testing.T) {
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Concurrency: 1, Attempts: 1, Retries: 1})
	var seen atomic.Int32
	r.OnRecord = func(rundir.Record) { seen.Add(1) }
	run, err := r.Attempter()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec, ok, err := run(ctx, scheduler.Task{ID: "ok"}, 17)
	if err != nil || !ok || rec.RolloutID != "ok#17" || rec.Outcome != rundir.OutcomePassed || !r.Store.Done("ok", 17) {
		t.Fatalf("attempt 17: %+v ok=%v err=%v", rec, ok, err)
	}
	rec, ok, err = run(ctx, scheduler.Task{ID: "setup-broken"}, 3)
	if err != nil || !ok || rec.Outcome != rundir.OutcomeInfraError || rec.Try != 1 {
		t.Fatalf("infra error: %+v ok=%v err=%v, want it retried once", rec, ok, err)
	}
	cancelled, stop := context.WithCancel(ctx)
	stop()
	if _, ok, _ := run(cancelled, scheduler.Task{ID: "ok"}, 18); ok || r.Store.Done("ok", 18) {
		t.Fatal("a cancelled attempt was recorded")
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("OnRecord saw %d records, want 2", n)
	}
	r.Config.Concurrency = 0
	if _, err := r.Attempter(); err == nil {
		t.Error("a concurrency of 0 was taken")
	}
}
