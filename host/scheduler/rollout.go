package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sandbox"
)

// cleanupTimeout bounds closing a plugin instance or a sandbox, which must
// happen also after Ctrl-C.
const cleanupTimeout = 30 * time.Second

// rollout is one try of one identity on its way through the phases:
// plugin start, sandbox start, setup, prompt, agent, verify, reward,
// teardown, sandbox stop. Each phase is a method; run calls them in order
// and fills rec as they go.
type rollout struct {
	r       *Runner
	task    Task
	attempt int
	try     int
	id      string
	rec     rundir.Record

	env     Rollout // the environment's side, a fresh plugin instance
	spec    sandbox.Spec
	sb      sandbox.Sandbox
	closing sync.WaitGroup // sandboxes a reset replaced, closing

	system, prompt string
	out            AgentOutput
	timedOut       bool // the agent ran out of time: an outcome, not an error
	verdict        Verdict
}

// rollout runs one try. ok is false when ctx was cancelled (Ctrl-C): the
// rollout is then not recorded.
func (r *Runner) rollout(ctx context.Context, j job, try int) (rundir.Record, bool) {
	ro := r.newRollout(j, try)
	ro.rec.StartedAt = time.Now().UTC()
	r.Progress.Started(ro.id)
	ok := ro.run(ctx, r.ahead.take(ro.id, try))
	ro.rec.FinishedAt = time.Now().UTC() // after the sandbox and the plugin are closed
	return ro.rec, ok
}

// newRollout is try try of job j, before its first phase.
func (r *Runner) newRollout(j job, try int) *rollout {
	id := RolloutID(j.task.ID, j.attempt)
	return &rollout{r: r, task: *j.task, attempt: j.attempt, try: try, id: id, rec: rundir.Record{
		RolloutID:  id,
		TaskID:     j.task.ID,
		Attempt:    j.attempt,
		Try:        try,
		Category:   j.task.Category,
		Difficulty: j.task.Difficulty,
		Seed:       seedFor(r.Config.Seed, j.task.ID, j.attempt, try),
		Phases:     map[string]float64{},
	}}
}

// run runs the phases in order; false when ctx was cancelled. m, when
// set, holds the sandbox started ahead for it.
func (ro *rollout) run(ctx context.Context, m *member) bool {
	if err := ro.startPlugin(ctx); err != nil {
		return ro.fail(ctx, rundir.ClassPlugin, fmt.Errorf("start plugin for task %s: %w", ro.task.ID, err))
	}
	defer ro.closePlugin(ctx)
	if err := ro.startSandbox(ctx, m); err != nil {
		if ro.r.halted() != nil {
			return false // the run ends; a resume runs this rollout again
		}
		return ro.fail(ctx, rundir.ClassSandbox, phaseError("start sandbox", err))
	}
	defer ro.stopSandbox(ctx)
	if err := ro.phase(ctx, "setup", ro.r.setupLimit(), ro.env.Setup); err != nil {
		return ro.fail(ctx, rundir.ClassSetup, phaseError("setup", err))
	}
	if err := ro.formatPrompt(ctx); err != nil {
		return ro.fail(ctx, rundir.ClassPlugin, phaseError("format prompt", err))
	}
	ro.idle(ctx)
	agentErr := ro.runAgent(ctx)
	if ctx.Err() != nil {
		ro.dropAgentLogs()
		return false
	}
	ro.writeTranscript()
	ro.writeAgentLogs()
	if errors.Is(agentErr, sandbox.ErrLimit) {
		return ro.overLimit(agentErr)
	}
	if agentErr != nil {
		return ro.fail(ctx, rundir.ClassAgent, phaseError("agent", agentErr))
	}
	if err := ro.verify(ctx); errors.Is(err, sandbox.ErrLimit) {
		return ro.overLimit(err)
	} else if err != nil {
		return ro.fail(ctx, rundir.ClassVerifier, phaseError("verify", err))
	}
	if !ro.score(ctx) {
		// Interrupted while scoring: the scores may say "context
		// canceled" instead of what the plugins think. Leave the
		// rollout for a resume rather than record it.
		return false
	}
	ro.teardown(ctx)
	ro.rec.Outcome = ro.outcome()
	return true
}

// fail records err as an infra_error of its class (class when it has
// none); false when ctx was cancelled, which is not the rollout's fault.
func (ro *rollout) fail(ctx context.Context, class string, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	ro.rec.Outcome = rundir.OutcomeInfraError
	ro.rec.ErrorClass = classOf(err, class)
	ro.rec.Error = err.Error()
	return true
}

// overLimit records a rollout whose agent went over a sandbox limit (its
// disk): the agent's outcome, failed without verification.
func (ro *rollout) overLimit(err error) bool {
	ro.rec.Outcome = rundir.OutcomeFailed
	ro.rec.StopReason = "sandbox_limit"
	ro.rec.VerifierOutput = "proctor: not verified: " + err.Error()
	return true
}

func (ro *rollout) info() RolloutInfo {
	return RolloutInfo{RunID: ro.r.Config.RunID, RolloutID: ro.id, TaskID: ro.task.ID, Attempt: ro.attempt, Seed: ro.rec.Seed}
}

// startPlugin makes the environment's side of the rollout.
func (ro *rollout) startPlugin(ctx context.Context) error {
	t0 := time.Now()
	env, err := ro.r.Env.NewRollout(ctx, ro.task, ro.info())
	ro.rec.Phases["plugin_start"] = time.Since(t0).Seconds()
	ro.env = env
	return err
}

func (ro *rollout) closePlugin(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = ro.env.Close(cctx)
}

// startSandbox starts the rollout's sandbox, or takes the one started
// ahead for it (m, when set), and binds it to the environment's side.
func (ro *rollout) startSandbox(ctx context.Context, m *member) error {
	err := ro.phase(ctx, "sandbox_start", ro.r.sandboxStartLimit(), func(ctx context.Context) error {
		if err := ro.askSpec(ctx); err != nil {
			return err
		}
		ro.idle(ctx)
		if m != nil && ro.adopt(ctx, m) {
			return nil
		}
		var err error
		ro.sb, err = ro.r.start(ctx, ro.spec)
		return err
	})
	if err != nil {
		return err
	}
	ro.env.Bind(ro.sb, ro.reset)
	digest, ref := sandbox.ImageOf(ro.sb)
	ro.rec.ImageDigest = digest
	if ro.rec.Image != "" && ref != "" {
		// What ran: the local build's tag when a named image was built
		// from the task's context (force_build), not the name.
		ro.rec.Image = ref
	}
	return nil
}

// askSpec asks the environment for its sandbox spec and adds the run's
// adjustments and labels.
func (ro *rollout) askSpec(ctx context.Context) (err error) {
	ro.spec, err = ro.env.SandboxSpec(ctx)
	if err != nil {
		if classOf(err, "") == "" {
			err = WithClass(rundir.ClassPlugin, err)
		}
		return err
	}
	if ro.spec.Labels == nil {
		ro.spec.Labels = map[string]string{}
	}
	if ro.r.Config.Spec != nil {
		ro.r.Config.Spec(&ro.spec)
	}
	ro.spec.Labels[sandbox.LabelRun] = ro.r.Config.RunID
	ro.spec.Labels[sandbox.LabelRollout] = ro.id
	ro.rec.Image, ro.rec.Network = ro.spec.Image, string(ro.spec.Network)
	if w, ok := ro.env.(interface{ NetworkWithheld() string }); ok {
		ro.rec.NetworkWithheld = w.NetworkWithheld()
	}
	return nil
}

// reset starts the same spec again, for a verifier that grades in a
// sandbox the agent never touched; the agent's sandbox closes in the
// background meanwhile, and stopSandbox waits for it.
func (ro *rollout) reset(ctx context.Context) (sandbox.Sandbox, error) {
	sb, err := ro.r.start(ctx, ro.spec)
	if err != nil {
		return nil, WithClass(rundir.ClassSandbox, fmt.Errorf("reset sandbox: %w", err))
	}
	old := ro.sb
	ro.sb = sb
	ro.closing.Go(func() { ro.closeSandbox(ctx, old) })
	return sb, nil
}

// stopSandbox closes the rollout's sandbox and waits for those a reset
// replaced.
func (ro *rollout) stopSandbox(ctx context.Context) {
	t0 := time.Now()
	ro.closeSandbox(ctx, ro.sb)
	ro.closing.Wait()
	ro.rec.Phases["sandbox_stop"] = time.Since(t0).Seconds()
}

func (ro *rollout) closeSandbox(ctx context.Context, sb sandbox.Sandbox) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := sb.Close(cctx); err != nil {
		ro.r.Log.Warn("close sandbox", "rollout", ro.id, "err", err)
	}
}

// formatPrompt asks the environment for the agent's prompt; it counts
// as setup time.
func (ro *rollout) formatPrompt(ctx context.Context) error {
	return ro.phase(ctx, "setup", ro.r.setupLimit(), func(ctx context.Context) (err error) {
		ro.system, ro.prompt, err = ro.env.Prompt(ctx)
		return err
	})
}

// runAgent runs the agent under its timeout. Running out of time is an
// outcome, not an error: verification still runs.
func (ro *rollout) runAgent(ctx context.Context) error {
	err := ro.phase(ctx, "agent", ro.r.agentLimit(ro.task), func(actx context.Context) error {
		var err error
		ro.out, err = ro.r.Agent.Run(actx, AgentInput{
			RolloutID: ro.id, Task: ro.task, Attempt: ro.attempt, System: ro.system, Prompt: ro.prompt, Sandbox: sandbox.AgentView(ro.sb),
			Seed: ro.rec.Seed, Oracle: ro.env.Oracle,
		})
		if pastDeadline(ctx, actx) || errors.Is(err, ErrAgentTimeout) && ctx.Err() == nil {
			ro.timedOut = true
			return nil
		}
		return err
	})
	rec := &ro.rec
	rec.Turns, rec.Usage, rec.StopReason = ro.out.Turns, ro.out.Usage, ro.out.StopReason
	if ro.r.Config.Cost != nil {
		rec.CostUSD = ro.r.Config.Cost(ro.out.Usage)
	}
	if ro.timedOut {
		rec.StopReason = "agent_timeout"
	}
	return err
}

// writeTranscript writes what the agent did to transcripts/; a failure
// costs the transcript, not the rollout.
func (ro *rollout) writeTranscript() {
	if ro.out.Transcript == nil {
		return
	}
	name := rundir.TranscriptName(ro.id, ro.try)
	if err := ro.r.Store.WriteTranscript(name, ro.out.Transcript); err != nil {
		ro.r.Log.Warn("write transcript", "rollout", ro.id, "err", err)
		return
	}
	ro.rec.Transcript = rundir.TranscriptsDir + "/" + name
}

// writeAgentLogs keeps the agent's own logs in agent-logs/; a failure
// costs the logs, not the rollout.
func (ro *rollout) writeAgentLogs() {
	logs := ro.out.Logs
	if logs == nil {
		return
	}
	if c, ok := logs.(io.Closer); ok {
		defer c.Close()
	}
	name := rundir.AgentLogName(ro.id, ro.try)
	if err := ro.r.Store.WriteAgentLogs(name, logs); err != nil {
		ro.r.Log.Warn("write agent logs", "rollout", ro.id, "err", err)
		return
	}
	ro.rec.AgentLogs = rundir.AgentLogDir + "/" + name
}

// dropAgentLogs lets go of the agent's logs of a rollout not recorded.
func (ro *rollout) dropAgentLogs() {
	if c, ok := ro.out.Logs.(io.Closer); ok {
		c.Close()
	}
}

// verify seals an isolated sandbox, which ends the agent's turn (the
// verifier's folders start empty and out of reach of anything the agent
// left running), then asks the environment for its verdict. Verification
// that runs past its timeout is a verifier that reached no reward (the
// agent may well have made the tests hang), as Harbor records it.
func (ro *rollout) verify(ctx context.Context) error {
	var note string
	lim := ro.r.verifyLimit(ro.task)
	var vctx context.Context
	err := ro.phase(ctx, "verify", lim, func(ctx context.Context) (err error) {
		vctx = ctx
		if iso, ok := ro.sb.(sandbox.Isolated); ok {
			if note, err = iso.Seal(ctx); errors.Is(err, sandbox.ErrLimit) {
				return err
			} else if err != nil {
				return WithClass(rundir.ClassSandbox, fmt.Errorf("seal the sandbox for verification: %w", err))
			}
		}
		ro.verdict, err = ro.env.Verify(ctx, ro.timedOut)
		return err
	})
	if err != nil && lim.d > 0 && pastDeadline(ctx, vctx) && !errors.Is(err, sandbox.ErrLimit) {
		ro.verdict = Verdict{Failure: err.Error()}
		err = nil
	}
	if err != nil {
		return err
	}
	if ro.verdict.Failure != "" {
		if ro.r.Config.VerifierFailureIsInfra {
			return WithClass(rundir.ClassVerifier, errors.New(ro.verdict.Failure))
		}
		// Harbor's outcome: no reward is a reward of 0.
		ro.verdict.Reward, ro.verdict.Passed, ro.verdict.Scores = 0, false, nil
		ro.rec.Error = ro.verdict.Failure
	}
	if note != "" {
		ro.verdict.Output = "proctor: " + note + "\n" + ro.verdict.Output
	}
	v := ro.verdict
	ro.rec.Reward, ro.rec.Scores, ro.rec.Tests, ro.rec.VerifierOutput, ro.rec.RewardSource = v.Reward, v.Scores, v.Tests, v.Output, v.RewardSource
	ro.writeVerifierLog()
	return nil
}

// writeVerifierLog writes the verifier's whole output to verifier/; a
// failure costs the log, not the rollout.
func (ro *rollout) writeVerifierLog() {
	if ro.verdict.Log == "" {
		return
	}
	name := rundir.VerifierLogName(ro.id, ro.try)
	if err := ro.r.Store.WriteVerifierLog(name, ro.verdict.Log); err != nil {
		ro.r.Log.Warn("write verifier log", "rollout", ro.id, "err", err)
		return
	}
	ro.rec.VerifierLog = rundir.VerifierLogDir + "/" + name
}

// score runs the stacked rewards and combines them with the verifier's;
// false when ctx was cancelled meanwhile.
func (ro *rollout) score(ctx context.Context) bool {
	if len(ro.r.Rewards) == 0 {
		return true
	}
	rec := &ro.rec
	ro.phase(ctx, "reward", limit{}, func(ctx context.Context) error {
		// Encoded here, only for stacked rewards: a transcript with
		// token ids runs to megabytes.
		var transcript json.RawMessage
		if ro.out.Transcript != nil {
			transcript, _ = json.Marshal(ro.out.Transcript)
		}
		in := ScoreInput{Task: ro.task, Info: ro.info(), Transcript: transcript, Verdict: ro.verdict}
		for _, s := range ro.r.Rewards {
			rec.Rewards = append(rec.Rewards, s.Score(ctx, in))
		}
		return nil
	})
	envReward, w := ro.verdict.Reward, 1.0
	if ro.r.Config.EnvRewardWeight != nil {
		w = *ro.r.Config.EnvRewardWeight
	}
	rec.VerifierReward = &envReward
	rec.Reward = Combine(envReward, w, rec.Rewards)
	return ctx.Err() == nil
}

// teardown runs the environment's teardown; a failure is only logged.
func (ro *rollout) teardown(ctx context.Context) {
	if err := ro.phase(ctx, "teardown", ro.r.teardownLimit(), ro.env.Teardown); err != nil {
		ro.r.Log.Warn("teardown", "rollout", ro.id, "err", err)
	}
}

func (ro *rollout) outcome() string {
	switch {
	case ro.verdict.Passed:
		return rundir.OutcomePassed
	case ro.timedOut:
		return rundir.OutcomeAgentTimeout
	case ro.verdict.Failure != "":
		return rundir.OutcomeVerifierFailed
	}
	return rundir.OutcomeFailed
}

// phase runs f under the phase's limit, tells Progress, and adds its
// duration to the record.
func (ro *rollout) phase(ctx context.Context, name string, lim limit, f func(context.Context) error) error {
	ro.r.Progress.Phase(ro.id, name)
	start := time.Now()
	err := within(ctx, name, lim, f)
	ro.rec.Phases[name] += time.Since(start).Seconds()
	return err
}

// startWithin starts a sandbox under the sandbox start timeout.
func (r *Runner) startWithin(ctx context.Context, spec sandbox.Spec) (sb sandbox.Sandbox, err error) {
	err = within(ctx, "sandbox_start", r.sandboxStartLimit(), func(ctx context.Context) error {
		sb, err = r.start(ctx, spec)
		return err
	})
	return sb, err
}

// start starts a sandbox, at most StartConcurrency at once, within the
// spec's own start timeout (a task's build timeout) when it has one.
// A start that finds the host's files for sandboxes changed ends the run
// (halt).
func (r *Runner) start(ctx context.Context, spec sandbox.Spec) (sb sandbox.Sandbox, err error) {
	if err := r.startSem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer r.startSem.Release(1)
	defer func() {
		if errors.Is(err, sandbox.ErrTampered) {
			r.halt(err)
		}
	}()
	if spec.StartTimeout <= 0 {
		return r.Backend.Start(ctx, spec)
	}
	sctx, cancel := context.WithTimeout(ctx, spec.StartTimeout)
	defer cancel()
	sb, err = r.Backend.Start(sctx, spec)
	if err != nil && pastDeadline(ctx, sctx) {
		err = fmt.Errorf("the task's build timeout of %s passed: %w", limit{spec.StartTimeout, spec.StartTimeoutFrom}, err)
	}
	return sb, err
}
