package env

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestPluginReset runs a real plugin whose verifier resets its sandbox,
// through env.Plugin and the scheduler: the fresh sandbox holds nothing of the
// agent's, both sandboxes are closed at the end, and a reset that cannot
// start a sandbox is an infra_error of class sandbox, although the error
// crossed the plugin and came back as the verifier's.
func TestPluginReset(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, "./host/env/testdata/resetenv", abi.OpReadFile, abi.OpWriteFile, abi.OpReset)
	for _, tc := range []struct {
		name        string
		failSecond  bool
		outcome     string
		class, text string
	}{
		{"fresh", false, rundir.OutcomePassed, "", ""},
		{"start fails", true, rundir.OutcomeInfraError, rundir.ClassSandbox, "reset sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &schedulertest.Backend{}
			var mu sync.Mutex
			starts := 0
			be.Fail = func(sandbox.Spec) error {
				mu.Lock()
				defer mu.Unlock()
				if starts++; tc.failSecond && starts > 1 {
					return fmt.Errorf("engine said no: %w", sandbox.ErrEngine)
				}
				return nil
			}
			env := &Plugin{Wasm: p}
			tasks, _, err := env.Tasks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tasks[0].ID = "nop" // the fake agent does nothing for nop tasks
			r, _ := schedulertest.NewRunner(t, env, be, &schedulertest.Agent{}, scheduler.Config{RunID: "r1", Concurrency: 1, Attempts: 1})
			if _, err := r.Run(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			rec := r.Store.Records()[0]
			if rec.Outcome != tc.outcome || rec.ErrorClass != tc.class || !strings.Contains(rec.Error, tc.text) {
				t.Errorf("outcome %s, class %q, error %q; want %s, %q, %q", rec.Outcome, rec.ErrorClass, rec.Error, tc.outcome, tc.class, tc.text)
			}
			if !be.AllClosed() {
				t.Error("a sandbox was left open")
			}
		})
	}
}

// limitSandbox is a sandbox that a cluster stopped for going over its disk
// limit once the agent's turn is over: every file read fails so.
type limitSandbox struct{ schedulertest.Sandbox }

func (*limitSandbox) ReadFile(context.Context, string, int64) ([]byte, int64, error) {
	return nil, 0, fmt.Errorf("the sandbox went over its disk limit: %w", sandbox.ErrLimit)
}

type limitBackend struct{ schedulertest.Backend }

func (b *limitBackend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if _, err := b.Backend.Start(ctx, spec); err != nil {
		return nil, err
	}
	return &limitSandbox{}, nil
}

// TestLimitDuringVerification: a sandbox operation of the verifier that
// fails because the sandbox went over its limit (the kubernetes backend
// learns of a filled disk when the cluster evicts the pod, which may be in
// the middle of verification) makes the rollout the agent's failure over
// its limit, not a verdict of the plugin's nor an infra_error, although
// the plugin took the error for a missing file.
func TestLimitDuringVerification(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, "./host/env/testdata/resetenv", abi.OpReadFile, abi.OpWriteFile, abi.OpReset)
	env := &Plugin{Wasm: p}
	tasks, _, err := env.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks[0].ID = "nop"
	r, _ := schedulertest.NewRunner(t, env, &limitBackend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r1", Concurrency: 1, Attempts: 1})
	if _, err := r.Run(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	rec := r.Store.Records()[0]
	if rec.Outcome != rundir.OutcomeFailed || rec.StopReason != "sandbox_limit" || !strings.Contains(rec.VerifierOutput, "disk limit") {
		t.Errorf("outcome %s, stop reason %q, verifier output %q, error %q", rec.Outcome, rec.StopReason, rec.VerifierOutput, rec.Error)
	}
}
