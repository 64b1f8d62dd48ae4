package serve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
)

// TestLockNamesServe: the run directory's lock names proctor serve, so a
// second serve (or eval) of the run, or a restart after a kill, says
// which command holds or held it. At 1ae3d96 it said "proctor eval".
func TestLockNamesServe(t *testing.T) {
	h := newHarness(t, 1, "")
	h.agent.hold = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := h.trainer(ctx, batchOf4, 10*time.Millisecond)
	done := h.background(ctx)
	waitFor(t, "a rollout to start", func() bool { return h.agent.started.Load() > 0 })
	_, err := rundir.LockExclusive(h.dir, "eval")
	var held *rundir.HeldError
	if !errors.As(err, &held) || held.Holder.String() != fmt.Sprintf("proctor serve (pid %d on %s)", held.Holder.PID, held.Holder.Host) {
		t.Errorf("the lock of a serve run: %v", err)
	}
	cancel()
	close(h.agent.hold)
	<-done
	tw.Wait()
}

// TestPassAtKPerGroup: a serve run's summary gives pass@k per group, k
// up to the group size (a group is one policy's samples of a task), not
// over every epoch's attempts of a task (at 1ae3d96: pass@1 to pass@6
// for 3 epochs of groups of 2, attempts of policies training changed).
func TestPassAtKPerGroup(t *testing.T) {
	h := newHarness(t, 2, "epochs = 3\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := h.trainer(ctx, batchOf4, 10*time.Millisecond)
	res, err := h.serve(ctx)
	cancel()
	tw.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// tokenAgent passes odd attempts: each group of 2 has one pass.
	want := map[string]float64{"pass@1": 0.5, "pass@2": 1}
	if got := res.Summary.PassAtK; !maps.Equal(got, want) {
		t.Fatalf("pass@k %v, want %v (keys %v)", got, want, slices.Sorted(maps.Keys(got)))
	}
}
