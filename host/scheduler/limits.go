package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// limit is a phase's timeout and where it comes from (a config key, a
// task.toml field), so that an error says which limit fired.
type limit struct {
	d    time.Duration
	from string
}

func (l limit) String() string {
	if l.from == "" {
		return l.d.String()
	}
	return fmt.Sprintf("%s (%s)", l.d, l.from)
}

// Where the run's own timeouts come from ([run] keys of the config).
const (
	fromSandboxStart = "[run] sandbox_start_timeout"
	fromSetup        = "[run] setup_timeout"
	fromAgent        = "[run] agent_timeout"
	fromVerify       = "[run] verify_timeout"
	fromTeardown     = "[run] teardown_timeout"
)

func (r *Runner) sandboxStartLimit() limit {
	return limit{r.Config.Timeouts.SandboxStart, fromSandboxStart}
}
func (r *Runner) setupLimit() limit    { return limit{r.Config.Timeouts.Setup, fromSetup} }
func (r *Runner) teardownLimit() limit { return limit{r.Config.Timeouts.Teardown, fromTeardown} }

// agentLimit is the agent's timeout: the task's own times the run's
// agent_timeout_scale, else the run's agent_timeout.
func (r *Runner) agentLimit(t Task) limit {
	scale := r.Config.AgentTimeoutScale
	if scale == 0 {
		scale = 1
	}
	l := taskLimit(time.Duration(float64(t.AgentTimeout)*scale), t.AgentTimeoutFrom, "the task's agent timeout", limit{r.Config.Timeouts.Agent, fromAgent})
	if t.AgentTimeout > 0 && scale != 1 {
		l.from += fmt.Sprintf(" × [run] agent_timeout_scale %g", scale)
	}
	return l
}

// verifyLimit is verification's timeout: the task's own, else the run's
// verify_timeout.
func (r *Runner) verifyLimit(t Task) limit {
	return taskLimit(t.VerifyTimeout, t.VerifyTimeoutFrom, "the task's verifier timeout", limit{r.Config.Timeouts.Verify, fromVerify})
}

// taskLimit is a task's own timeout d, from where the task says (what,
// when it does not say), or the run's when the task has none.
func taskLimit(d time.Duration, from, what string, run limit) limit {
	if d <= 0 {
		return run
	}
	return limit{d, cmp.Or(from, what)}
}

// within runs f under lim. An error f returns because lim's own deadline
// passed says which phase took too long and which limit fired; any other
// error (a plugin hook's own time running out, a deadline of the caller's)
// is left as it is, so that it names its own limit.
func within(ctx context.Context, name string, lim limit, f func(context.Context) error) error {
	if lim.d <= 0 {
		return f(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, lim.d)
	defer cancel()
	err := f(pctx)
	if err != nil && pastDeadline(ctx, pctx) {
		err = fmt.Errorf("%s took longer than %s: %w", name, lim, err)
	}
	return err
}

// pastDeadline reports whether ctx, derived from parent with a deadline of
// its own, ended because that deadline passed (and not parent's).
func pastDeadline(parent, ctx context.Context) bool {
	return ctx.Err() == context.DeadlineExceeded && parent.Err() == nil
}
