package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/serve/atropos"
	"github.com/proctor-dev/proctor/host/serve/atropos/atropostest"
)

// The trainer of these tests: batches of 4 sequences (two groups of 2).
var batchOf4 = atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}

// minShare registers with a min_batch_allocation: while an environment
// that holds one has nothing queued, the API forms no batch
// (atroposlib/api/utils.py grab_batch_with_minimum_allocations, lines
// 204-214 at 296a0bc5), so one left behind strands the trainer.
const minShare = "min_batch_allocation = 0.5\nepochs = 2\n"

// connected is the env_ids the API still counts.
func connected(api *atropostest.Server) []int {
	var ids []int
	for _, e := range api.Envs() {
		if e.Connected {
			ids = append(ids, e.RegisteredID)
		}
	}
	return ids
}

// serveToEnd serves until the epochs are sent, with a trainer taking
// batches, and checks that the trainer took every group: no environment
// left behind stopped its batches.
func serveToEnd(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := h.trainer(ctx, batchOf4, 10*time.Millisecond)
	defer tw.Wait()
	defer cancel()
	if _, err := h.serve(ctx); err != nil {
		t.Fatalf("serve: %v\n%q", err, h.notes)
	}
	if got := h.noDuplicates(); len(got) != 2*len(h.tasks) {
		t.Fatalf("the API took %v, want every group of 2 epochs", got)
	}
	waitFor(t, "the trainer to take every group", func() bool { return h.api.QueuedSequences() == 0 })
}

// TestTransientErrorKeepsRegistration: one HTTP 500 on /status-env is
// asked again, not taken for an API that forgot the environment, and a
// failed /info after the API gave an env_id asks /info again: serve keeps
// its env_id (one registration at the API) and the trainer, whose batches
// need this environment's minimum share, takes every group. At 1ae3d96
// serve registered anew and left env 0 connected with nothing queued:
// the API formed no batch again.
func TestTransientErrorKeepsRegistration(t *testing.T) {
	for _, f := range []atropostest.Fault{{Path: "/status-env", Status: 500}, {Path: "/info", Status: 503}} {
		t.Run(f.Path, func(t *testing.T) {
			h := newHarness(t, 2, minShare)
			h.api.Inject(f)
			serveToEnd(t, h)
			if envs := h.api.Envs(); len(envs) != 1 {
				t.Fatalf("%d environments registered after one %d on %s, want 1: %+v", len(envs), f.Status, f.Path, envs)
			}
			if !h.said("GET " + f.Path + ": HTTP " + fmt.Sprint(f.Status) + ": Internal Server Error): asking again") {
				t.Errorf("the failure was not reported: %q", h.notes)
			}
		})
	}
}

// TestStatusErrorsRegisterAgain: /status-env failing maxServerErrors
// times in a row is what server.py answers for an env_id it does not
// hold (get_status_env, line 480 at 296a0bc5: an IndexError, a bare 500):
// serve registers anew, and since the API still holds the old env_id
// (it gave a larger one, rl_1 after rl_0, the step did not go back), it
// disconnects it. The trainer is not stranded, and when serving stops no
// environment of the run is left connected.
func TestStatusErrorsRegisterAgain(t *testing.T) {
	h := newHarness(t, 2, minShare)
	h.api.Inject(atropostest.Fault{Path: "/status-env", Status: 500, Times: 3}) // maxServerErrors
	serveToEnd(t, h)
	envs := h.api.Envs()
	if len(envs) != 2 || len(connected(h.api)) != 0 {
		t.Fatalf("environments %+v: want env 0 given up for env 1, and neither connected at the end", envs)
	}
	if !h.said("no longer knows env 0") || !h.said("disconnected env 0 (rl_0)") {
		t.Errorf("notes %q", h.notes)
	}
	regs := registrations(t, h.dir)
	if len(regs) != 2 || regs[1].State != "disconnected" || regs[1].EnvID != 0 || regs[2].State != "disconnected" || regs[2].EnvID != 1 {
		t.Errorf("%s: %+v", rundir.ServeEnvsFile, regs)
	}
}

// registration is a line of serve-envs.jsonl.
type registration struct {
	Reg   int    `json:"reg"`
	State string `json:"state"`
	EnvID int    `json:"env_id"`
	Why   string `json:"why"`
}

// registrations is each registration's last line in serve-envs.jsonl.
func registrations(t *testing.T, dir string) map[int]registration {
	t.Helper()
	out := map[int]registration{}
	b, _ := os.ReadFile(filepath.Join(dir, rundir.ServeEnvsFile))
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r registration
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: %q: %v", rundir.ServeEnvsFile, l, err)
		}
		out[r.Reg] = r
	}
	return out
}

// registerBehind registers an environment as a serve killed with kill -9
// leaves it: registered at the API, recorded in the run's
// serve-envs.jsonl, never disconnected.
func registerBehind(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	tr := h.api.Trainer()
	if _, err := tr.Register(batchOf4); err != nil {
		t.Fatal(err)
	}
	tr.Batch()
	c := atropos.New(h.api.URL(), nil)
	half := 0.5
	env, _, ok, err := c.RegisterEnv(ctx, atropos.Registration{MaxTokenLength: 2048, DesiredName: "rl", Weight: 1, MinBatchAllocation: &half, GroupSize: 2})
	if err != nil || !ok {
		t.Fatalf("register: %v", err)
	}
	os.MkdirAll(h.dir, 0o755)
	line, _ := json.Marshal(map[string]any{"reg": 1, "state": "registered", "api": h.api.URL(), "env_id": env.ID, "name": env.Name,
		"step": env.StartingStep, "at": time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(h.dir, rundir.ServeEnvsFile), append(line, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKilledServeLeftEnv: a serve killed (kill -9) left its env_id
// registered; the next start of the same run finds it in
// serve-envs.jsonl and disconnects it once the API gives the new one,
// so the trainer gets its batches. At 1ae3d96 it stayed connected and,
// with a min_batch_allocation, no batch formed.
func TestKilledServeLeftEnv(t *testing.T) {
	h := newHarness(t, 2, minShare)
	registerBehind(t, h)
	serveToEnd(t, h)
	if envs := h.api.Envs(); len(envs) != 2 || len(connected(h.api)) != 0 {
		t.Fatalf("environments %+v: want env 0 (left by the killed start) disconnected", envs)
	}
	if !h.said("disconnected env 0 (rl_0), which this run registered earlier") {
		t.Errorf("notes %q", h.notes)
	}
}

// TestLeftEnvOfAnotherAPI: an env_id recorded before the API started
// afresh is not this run's any more (another environment may hold that
// number now): it is recorded as forgotten and not disconnected.
func TestLeftEnvOfAnotherAPI(t *testing.T) {
	h := newHarness(t, 2, "epochs = 1\n")
	registerBehind(t, h)
	if err := h.api.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := h.trainer(ctx, batchOf4, 10*time.Millisecond)
	c := atropos.New(h.api.URL(), nil)
	waitFor(t, "the trainer to start", func() bool {
		_, _, ok, _ := c.RegisterEnv(ctx, atropos.Registration{MaxTokenLength: 64, DesiredName: "other", Weight: 1, GroupSize: 2})
		return ok
	})
	if _, err := h.serve(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	tw.Wait()
	envs := h.api.Envs()
	if len(envs) != 2 || !envs[0].Connected || envs[0].DesiredName != "other" {
		t.Fatalf("environments %+v: the other environment, env 0 now, must stay connected", envs)
	}
	if r := registrations(t, h.dir)[1]; r.State != "forgotten" || !strings.Contains(r.Why, "started afresh") {
		t.Errorf("%s: %+v", rundir.ServeEnvsFile, r)
	}
}

// TestProgressSaysWhy: the progress line goes on while serving waits,
// and says why nothing runs: the trainer has not started, the API is
// unreachable. At 1ae3d96 no line came while the API was away or before
// registration.
func TestProgressSaysWhy(t *testing.T) {
	h := newHarness(t, 2, "")
	h.sets = []string{"run.progress_interval=1s"}
	h.agent.hold = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := h.background(ctx)
	waitFor(t, "a progress line before the trainer starts", func() bool {
		return h.said("not registered yet, 0 groups sent") && h.said(`rollouts recorded; waiting for the trainer to start (the rollout API at `+h.api.URL()+` says "wait for trainer to start")`)
	})
	tw := h.trainer(ctx, batchOf4, 10*time.Millisecond)
	waitFor(t, "rollouts to start", func() bool { return h.agent.started.Load() > 0 })
	h.api.Down()
	waitFor(t, "a progress line while the API is away", func() bool {
		return h.said("rollouts recorded; the rollout API at " + h.api.URL() + " is unreachable")
	})
	if err := h.api.Up(); err != nil {
		t.Fatal(err)
	}
	cancel()
	close(h.agent.hold)
	<-done
	tw.Wait()
}

// TestDrainSendsWhenTheAPIIsBack: serve stopped while the rollout API is
// away sends the groups that finish once the API answers again, within
// drain_timeout: the loop that read the status has stopped, so the drain
// reads it (it waited out drain_timeout, 5 minutes by default, before).
func TestDrainSendsWhenTheAPIIsBack(t *testing.T) {
	// The harness's drain_timeout, 5 minutes: no busy machine takes that
	// long to send two groups to a local API, and the old code waited it out.
	h := newHarness(t, 2, "on_interrupt = \"finish\"\n")
	h.agent.hold = make(chan struct{})
	trainerCtx, stopTrainer := context.WithCancel(context.Background())
	defer stopTrainer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := h.background(ctx)
	tw := h.trainer(trainerCtx, batchOf4, 10*time.Millisecond)
	waitFor(t, "rollouts to start", func() bool { return h.agent.started.Load() > 0 })
	h.api.Down()
	waitFor(t, "serve to find the API away", func() bool { _, ok := h.running().sess.current(); return !ok })
	cancel()
	close(h.agent.hold)
	if err := h.api.Up(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.said("still unsent") || len(h.taken()) == 0 {
		t.Errorf("groups sent: %v; notes: %v", h.taken(), h.notes)
	}
	stopTrainer()
	tw.Wait()
}
