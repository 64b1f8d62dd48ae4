package env

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// watched is env.Plugin keeping its rollouts, so that the agent can look
// at their instances.
type watched struct {
	*Plugin
	mu       sync.Mutex
	rollouts map[string]*pluginRollout
}

func (w *watched) NewRollout(ctx context.Context, t scheduler.Task, info scheduler.RolloutInfo) (scheduler.Rollout, error) {
	r, err := w.Plugin.NewRollout(ctx, t, info)
	if err == nil {
		w.mu.Lock()
		w.rollouts[info.RolloutID] = r.(*pluginRollout)
		w.mu.Unlock()
	}
	return r, err
}

// answerer writes the answer, and notes whether its rollout's plugin
// instance was parked meanwhile.
type answerer struct {
	env    *watched
	parked map[string]bool
	mu     sync.Mutex
}

func (a *answerer) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	a.env.mu.Lock()
	parked := a.env.rollouts[in.RolloutID].inst.Parked()
	a.env.mu.Unlock()
	a.mu.Lock()
	a.parked[in.RolloutID] = parked
	a.mu.Unlock()
	return scheduler.AgentOutput{Turns: 1}, in.Sandbox.WriteFile(ctx, "answer.txt", []byte("hello"), 0o644)
}

// While the agent works, the rollout's plugin instance is parked where
// many are in flight (here: always), and the hooks after it run on the
// instance re-created from it; with few in flight it stays whole.
func TestPluginParksWhileTheAgentWorks(t *testing.T) {
	for _, c := range []struct {
		idle   int
		parked bool
	}{{-1, true}, {0, false}} {
		t.Run(fmt.Sprintf("idle=%d", c.idle), func(t *testing.T) { testIdle(t, c.idle, c.parked) })
	}
}

func testIdle(t *testing.T, idle int, wantParked bool) {
	ctx := context.Background()
	p := testPluginOn(t, wasm.Config{IdleInstances: idle}, "./plugins/example", abi.OpExec, abi.OpReadFile, abi.OpWriteFile, abi.OpDatasetRead)
	cfg, _ := json.Marshal(map[string]any{"image": "none", "tasks": []map[string]string{{"id": "a", "text": "hello"}, {"id": "b", "text": "hello"}}})
	env := &watched{Plugin: &Plugin{Wasm: p, Config: cfg}, rollouts: map[string]*pluginRollout{}}
	tasks, _, err := env.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ag := &answerer{env: env, parked: map[string]bool{}}
	r, _ := schedulertest.NewRunner(t, env, &schedulertest.Backend{}, ag, scheduler.Config{RunID: "r", Concurrency: 2})
	if _, err := r.Run(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.Store.Records() {
		if rec.Outcome != rundir.OutcomePassed {
			t.Errorf("%s: %s %s", rec.RolloutID, rec.Outcome, rec.Error)
		}
		if ag.parked[rec.RolloutID] != wantParked {
			t.Errorf("%s: the plugin instance was parked %v while the agent worked, want %v", rec.RolloutID, ag.parked[rec.RolloutID], wantParked)
		}
	}
}
