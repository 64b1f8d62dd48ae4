// Package scheduler runs the rollouts of a run: every (task, attempt) not
// yet recorded, at most Concurrency at once, longest expected tasks first.
// Each rollout goes through its phases (plugin start, sandbox start, setup,
// prompt, agent, verify, reward, teardown), each under its own timeout; its
// outcome is classified (passed, failed, agent_timeout, infra_error), an
// infra_error is retried, and the final record is appended to the run
// directory's results.jsonl, so a killed run resumes without losing or
// duplicating one. Progress receives the events of the run.
//
// The scheduler owns the small interfaces it consumes (Environment,
// Rollout, Agent, Scorer); host/env adapts wasm plugins to them and
// host/assemble wires the sandbox backend and the agent in.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/trajectory"
)

// Task is one task as the runner sees it. Raw is the plugin's own task
// object, handed back to the plugin's hooks untouched.
type Task struct {
	ID            string
	Category      string
	Difficulty    string
	AgentTimeout  time.Duration // 0: the run's default
	VerifyTimeout time.Duration // 0: the run's default
	// AgentTimeoutFrom and VerifyTimeoutFrom say where the task's
	// timeouts come from, for the error when one fires.
	AgentTimeoutFrom, VerifyTimeoutFrom string
	Raw                                 json.RawMessage
	// Broken says why the plugin cannot read the task; its rollouts fail
	// with that reason.
	Broken string
}

// RolloutInfo identifies one rollout to the environment.
type RolloutInfo struct {
	RunID     string
	RolloutID string
	TaskID    string
	Attempt   int
	Seed      uint64
}

// Environment is a loaded environment plugin.
type Environment interface {
	// NewRollout makes the per-rollout state (a fresh plugin instance).
	NewRollout(ctx context.Context, task Task, info RolloutInfo) (Rollout, error)
}

// Verdict is what verification decided.
type Verdict struct {
	Reward float64
	Passed bool
	Scores map[string]float64
	Tests  []abi.TestResult
	Output string // the tail of the verifier's output, for humans
	// Log is the verifier's whole output (bounded by the plugin's ABI),
	// RewardSource where the reward came from.
	Log          string
	RewardSource string
	// Failure says why the verifier reached no reward although it ran
	// (its tests ran past their timeout, wrote no reward or an unreadable
	// one): the rollout's outcome is verifier_failed, reward 0, as Harbor
	// records it, or an infra_error where the run asks for that.
	Failure string
}

// Rollout is the environment's side of one rollout. Its sandbox operations
// act on the sandbox given to Bind, and only on it.
type Rollout interface {
	SandboxSpec(ctx context.Context) (sandbox.Spec, error)
	// Bind gives the rollout its sandbox, and reset, which replaces that
	// sandbox with a fresh one from the same spec (closing the old one) and
	// returns it.
	Bind(sb sandbox.Sandbox, reset func(context.Context) (sandbox.Sandbox, error))
	Setup(ctx context.Context) error
	Prompt(ctx context.Context) (system, user string, err error)
	// Oracle applies the reference solution and says what it printed;
	// ErrNoOracle when there is none.
	Oracle(ctx context.Context) (OracleResult, error)
	Verify(ctx context.Context, agentTimedOut bool) (Verdict, error)
	Teardown(ctx context.Context) error
	Close(ctx context.Context) error
}

// OracleResult is what applying the reference solution printed, and its
// exit code when it ran to its end.
type OracleResult struct {
	Output   string
	ExitCode *int
}

// ErrNoOracle: the environment has no reference solution for the task.
var ErrNoOracle = errors.New("environment has no oracle")

// ErrAgentTimeout is an agent that ran past the agent's timeout of its
// own accord (the oracle's solution, stopped by its own command timeout):
// the rollout's outcome, agent_timeout, as when the phase's deadline
// passes.
var ErrAgentTimeout = errors.New("ran past the agent's timeout")

// AgentInput is what an agent gets for one rollout.
type AgentInput struct {
	RolloutID string
	Task      Task
	Attempt   int
	System    string
	Prompt    string
	Sandbox   sandbox.Sandbox
	Oracle    func(ctx context.Context) (OracleResult, error)
	Seed      uint64
}

// AgentOutput is what an agent did. Transcript is written to the run
// directory as JSON.
type AgentOutput struct {
	Transcript any
	Turns      int
	Usage      trajectory.Usage
	StopReason string
	// Logs, when set, is a tar of the agent's own logs, kept in the run
	// directory (agent-logs/); it is closed once read when it is an
	// io.Closer.
	Logs io.Reader
}

// Agent runs the agent of a rollout. An error means the agent could not
// go on (model API failure, broken script); a timeout shows as ctx's
// deadline.
type Agent interface {
	Run(ctx context.Context, in AgentInput) (AgentOutput, error)
}

// ClassError tags an error with the infra_error class it belongs to.
type ClassError struct {
	Class string
	Err   error
}

func (e *ClassError) Error() string { return e.Err.Error() }
func (e *ClassError) Unwrap() error { return e.Err }

// WithClass tags err with an error class (rundir.Class*).
func WithClass(class string, err error) error {
	if err == nil {
		return nil
	}
	return &ClassError{Class: class, Err: err}
}

func classOf(err error, fallback string) string {
	var ce *ClassError
	if errors.As(err, &ce) {
		return ce.Class
	}
	return fallback
}

// phaseError wraps a failure with the phase it happened in.
func phaseError(phase string, err error) error {
	return fmt.Errorf("%s: %w", phase, err)
}
