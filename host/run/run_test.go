package run

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// fakeEnv is schedulertest's environment with a fixed list of tasks.
type fakeEnv struct {
	schedulertest.Env
	tasks []scheduler.Task
}

func (e fakeEnv) Tasks(context.Context) ([]scheduler.Task, []abi.Skipped, error) {
	return e.tasks, nil, nil
}

// testConfig is a valid config whose [run] section has runKeys.
func testConfig(t *testing.T, runKeys string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte("[run]\n"+runKeys+"\n[agent]\nkind = \"nop\"\n[env]\nplugin = \"fake.wasm\"\n"), filepath.Join(t.TempDir(), "run.toml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeParts are the parts of a run of tasks on schedulertest's fakes.
func fakeParts(tasks ...scheduler.Task) Parts {
	return Parts{Backend: &schedulertest.Backend{}, Env: fakeEnv{tasks: tasks}, Agent: &schedulertest.Agent{},
		EnvInfo: rundir.PluginInfo{Name: "fake", SHA256: "00"}}
}

// failingSink fails every group it is given.
type failingSink struct{ writes atomic.Int32 }

func (s *failingSink) Open(string, int) (map[string]bool, error) { return map[string]bool{}, nil }
func (s *failingSink) Write(string, []rundir.Record) error {
	s.writes.Add(1)
	return errors.New("groups.jsonl: disk on fire")
}
func (s *failingSink) Close() (*rundir.ProcessInfo, error) { return nil, nil }

// TestGroupSinkErrorStopsTheRun: a group the sink cannot take ends the
// run at once (the rollouts running are cancelled and left for a
// resume), and Execute fails with the sink's error, as an infra fault.
func TestGroupSinkErrorStopsTheRun(t *testing.T) {
	c := testConfig(t, "concurrency = 1\n[process]\ngroup_size = 1")
	dir := filepath.Join(t.TempDir(), "run")
	sink := &failingSink{}
	r, err := Open(c, WithDir(dir), WithGroupSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Longest expected first: "ok" runs first and finishes at once; the
	// "slow" ones wait for their deadline, which the sink's error beats.
	tasks := []scheduler.Task{{ID: "ok", AgentTimeout: time.Hour}}
	for _, id := range []string{"slow-a", "slow-b", "slow-c"} {
		tasks = append(tasks, scheduler.Task{ID: id, AgentTimeout: time.Minute})
	}
	res, err := r.Execute(context.Background(), fakeParts(tasks...))
	var infra *fault.Infra
	if !errors.As(err, &infra) || !strings.Contains(err.Error(), "write training groups: groups.jsonl: disk on fire") {
		t.Fatalf("Execute: %v, want the sink's error as an infra fault", err)
	}
	if res == nil || !res.Stats.Interrupted || sink.writes.Load() != 1 {
		t.Fatalf("result %+v, %d writes: want the run stopped after one group", res, sink.writes.Load())
	}
	recs, rerr := rundir.Read(dir)
	if rerr != nil || len(recs) != 1 {
		t.Fatalf("%d rollouts recorded (%v), want 1: the run went on after the error", len(recs), rerr)
	}
	man, _, _ := rundir.ReadManifest(dir)
	if man.FinishedAt != nil {
		t.Error("the manifest says the stopped run finished")
	}
}

// twoAttempts is a Driver that runs attempts 5 and 9 of the first task
// and counts itself into the manifest.
type twoAttempts struct{ err error }

func (d *twoAttempts) Drive(ctx context.Context, runner *scheduler.Runner, tasks []scheduler.Task) (scheduler.Stats, error) {
	run, err := runner.Attempter()
	if err != nil {
		return scheduler.Stats{}, err
	}
	st := scheduler.Stats{Outcomes: map[string]int{}}
	for _, a := range []int{5, 9} {
		rec, ok, err := run(ctx, tasks[0], a)
		if err != nil || !ok {
			return st, err
		}
		st.Finished++
		st.Outcomes[rec.Outcome]++
	}
	return st, d.err
}

func (d *twoAttempts) Account(m *rundir.Manifest) {
	m.SkippedTasks = append(m.SkippedTasks, map[string]string{"id": "driven", "reason": "by the driver"})
}

// TestDriver: a Driver runs the rollouts instead of the plan, the run
// writes its records, summary and manifest around it, and the driver's
// account lands in the manifest; an error with a hint comes back as it is.
func TestDriver(t *testing.T) {
	c := testConfig(t, "attempts = 1")
	dir := filepath.Join(t.TempDir(), "run")
	r, err := Open(c, WithDir(dir), WithDriver(&twoAttempts{}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Execute(context.Background(), fakeParts(scheduler.Task{ID: "a"}, scheduler.Task{ID: "b"}))
	r.Close()
	if err != nil || res.Stats.Finished != 2 {
		t.Fatalf("Execute: %v %+v", err, res)
	}
	recs, _ := rundir.Read(dir)
	if len(recs) != 2 || recs[0].RolloutID != "a#5" || recs[1].RolloutID != "a#9" {
		t.Fatalf("records %+v, want a#5 and a#9 only", recs)
	}
	man, _, _ := rundir.ReadManifest(dir)
	if man.FinishedAt == nil || len(man.SkippedTasks) != 1 || man.SkippedTasks[0]["id"] != "driven" {
		t.Fatalf("manifest %+v: want the driver's account and finished_at", man)
	}

	hinted := &fault.Usage{Err: errors.New("the API refused the registration"), Hint: "check [serve]"}
	r, _ = Open(c, WithDir(dir), WithDriver(&twoAttempts{err: hinted}))
	defer r.Close()
	if _, err := r.Execute(context.Background(), fakeParts(scheduler.Task{ID: "b"})); err != hinted {
		t.Fatalf("Execute: %v, want the driver's own fault", err)
	}
}
