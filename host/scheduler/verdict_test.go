package scheduler_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
)

// TestVerifierFailureIsHarborsOutcome: a verifier that ran and reached no
// reward, or ran past its timeout, is the outcome verifier_failed with
// reward 0, never retried, as Harbor records such a trial
// (RewardFileNotFoundError, RewardFileEmptyError, VerifierOutputParseError
// and VerifierTimeoutError are in the default retry exclusions of
// harbor-framework/harbor src/harbor/models/job/config.py, RetryConfig, at
// 738fdfba; src/harbor/metrics/mean.py counts a trial without a reward as
// 0). The error names the limit that fired. With VerifierFailureIsInfra it
// is an infra_error of class verifier, retried, as before.
func TestVerifierFailureIsHarborsOutcome(t *testing.T) {
	tasks := []scheduler.Task{
		{ID: "verify-noreward"},
		{ID: "verify-hang", VerifyTimeout: 50 * time.Millisecond, VerifyTimeoutFrom: "task.toml [verifier] timeout_sec = 0.05"},
		{ID: "ok"},
	}
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Retries: 2})
	if _, err := r.Run(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.Store.Records() {
		switch rec.TaskID {
		case "ok":
			if rec.Outcome != rundir.OutcomePassed {
				t.Errorf("ok: %s", rec.Outcome)
			}
			continue
		case "verify-noreward":
			if !strings.Contains(rec.Error, "no reward") || rec.VerifierOutput != "tests ran" || rec.VerifierLog == "" {
				t.Errorf("%s: error %q, output %q, log %q: want the reason and the tests' output kept", rec.RolloutID, rec.Error, rec.VerifierOutput, rec.VerifierLog)
			}
		case "verify-hang":
			if !strings.Contains(rec.Error, "verify took longer than 50ms (task.toml [verifier] timeout_sec = 0.05)") {
				t.Errorf("%s: error %q does not name the limit that fired", rec.RolloutID, rec.Error)
			}
		}
		if rec.Outcome != rundir.OutcomeVerifierFailed || rec.Reward != 0 || rec.Try != 0 || rec.ErrorClass != "" {
			t.Errorf("%s: outcome %s, reward %g, try %d, class %q; want verifier_failed, 0, never retried", rec.RolloutID, rec.Outcome, rec.Reward, rec.Try, rec.ErrorClass)
		}
	}

	r, _ = schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Retries: 2, VerifierFailureIsInfra: true})
	if _, err := r.Run(context.Background(), tasks[:2]); err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.Store.Records() {
		if rec.Outcome != rundir.OutcomeInfraError || rec.ErrorClass != rundir.ClassVerifier || rec.Try != 2 {
			t.Errorf("%s with VerifierFailureIsInfra: %s/%s at try %d, want infra_error/verifier retried twice", rec.RolloutID, rec.Outcome, rec.ErrorClass, rec.Try)
		}
	}
}

// TestTimeoutNamesTheLimitThatFired: a phase past its own timeout says
// which limit it was and where it is set; an error of a shorter limit
// inside the phase (a plugin hook's own time) is not blamed on the phase
// (issue 31 item 7: "setup took longer than 10m0s" after a 20 s hook
// deadline).
func TestTimeoutNamesTheLimitThatFired(t *testing.T) {
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Timeouts: scheduler.Timeouts{Setup: 50 * time.Millisecond}})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "setup-hang"}}); err != nil {
		t.Fatal(err)
	}
	if rec := r.Store.Records()[0]; !strings.Contains(rec.Error, "setup took longer than 50ms ([run] setup_timeout)") {
		t.Errorf("setup past its timeout: %q", rec.Error)
	}

	r, _ = schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{},
		scheduler.Config{RunID: "r", Timeouts: scheduler.Timeouts{Setup: 10 * time.Minute}})
	if _, err := r.Run(context.Background(), []scheduler.Task{{ID: "setup-hook"}}); err != nil {
		t.Fatal(err)
	}
	if rec := r.Store.Records()[0]; strings.Contains(rec.Error, "took longer than 10m0s") || !strings.Contains(rec.Error, "[env] hook_timeout") {
		t.Errorf("a hook's own deadline inside setup: %q", rec.Error)
	}
}

// TestResumedProgressCountsRecordedRollouts: the progress line of a
// resumed run gives the run's pass rate, as its summary does, not "-"
// because this invocation ran nothing new.
func TestResumedProgressCountsRecordedRollouts(t *testing.T) {
	r, _ := schedulertest.NewRunner(t, schedulertest.Env{}, &schedulertest.Backend{}, &schedulertest.Agent{}, scheduler.Config{RunID: "r", Concurrency: 2})
	tasks := []scheduler.Task{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "nop"}}
	if _, err := r.Run(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r.Progress = scheduler.NewProgress(&out, false, time.Hour)
	if _, err := r.Run(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "resuming: 4 of 4 rollouts already recorded") || !strings.Contains(out.String(), "pass rate 75.0%") {
		t.Errorf("progress of the resume:\n%s", out.String())
	}
}
