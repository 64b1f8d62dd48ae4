// Package miniswe is mini-swe-agent with its default SWE-bench
// configuration (swebench.yaml), reproduced byte for byte: a bash tool,
// each command run on its own in a fresh bash -c, the observation,
// format-error and submission rules, the step and cost limits. See
// docs/agents.md for the reference commit and what differs on purpose.
package miniswe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
	"github.com/proctor-dev/proctor/sandbox"
)

// Stop reasons: mini-swe-agent's exit statuses.
const (
	StopSubmitted      = "submitted"       // Submitted
	StopLimitsExceeded = "limits_exceeded" // LimitsExceeded: step or cost limit
	StopFormatErrors   = "format_error"    // RepeatedFormatError
	defaultCwd         = "/testbed"        // environment.cwd
	submitMarker       = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
	outputMax          = 1 << 20          // what one command brings back (head and tail)
	defaultStepLimit   = 250              // agent.step_limit
	defaultCostLimit   = 3.0              // agent.cost_limit
	defaultTimeout     = 60 * time.Second // environment.timeout
	defaultFormatLimit = 3                // max_consecutive_format_errors
	bashDescription    = "Execute a bash command"
)

// Env is swebench.yaml's environment.env, in its order: what every
// command runs with.
var Env = [][2]string{{"PAGER", "cat"}, {"MANPAGER", "cat"}, {"LESS", "-R"}, {"PIP_PROGRESS_BAR", "off"}, {"TQDM_DISABLE", "1"}, {"BASH_ENV", "/root/.bashrc"}}

// Tool is BASH_TOOL (models/utils/actions_toolcall.py), the one tool.
var Tool = agent.Schema{Type: "function", Function: agent.SchemaFunction{Name: "bash", Description: bashDescription,
	Parameters: json.RawMessage(`{"type": "object", "properties": {"command": {"type": "string", "description": "The bash command to execute"}}, "required": ["command"]}`)}}

// Options are the configuration's settings; the zero value is
// swebench.yaml's.
type Options struct {
	StepLimit   int      // agent.step_limit (0: 250)
	CostLimit   *float64 // agent.cost_limit in US dollars (nil: 3; 0: none)
	FormatLimit *int     // max_consecutive_format_errors (nil: 3; 0: none)
	// Cwd is environment.cwd; "" is /testbed where it exists, else the
	// sandbox's working directory.
	Cwd     string
	Timeout time.Duration // environment.timeout (0: 60 s)
	// Env is environment.env, in order (nil: swebench.yaml's, Env).
	Env [][2]string
	// Cost prices one call (litellm's completion_cost; nil: nothing).
	Cost func(agent.Usage) float64
}

// Agent is mini-swe-agent with a model.
type Agent struct {
	Model agent.Model
	Name  string // the model's name, for the trajectory
	Opts  Options
}

// Run is DefaultAgent.run on one task. It returns the trajectory with any
// error: a model failure ends the rollout with an error, as in
// mini-swe-agent; a context that no longer fits is a normal stop.
func (a *Agent) Run(ctx context.Context, sh agent.Shell, task string) (agent.Trajectory, error) {
	r := &run{a: a, sh: sh, tr: agent.Trajectory{Agent: "mini-swe-agent", Model: a.Name, Tools: []string{"bash"}, ToolSchemas: []agent.Schema{Tool}}}
	if s, ok := a.Model.(agent.Sampler); ok {
		sp := s.Sampling()
		r.tr.Sampling = &sp
	}
	r.tr.Messages = []agent.Message{{Role: "system", Content: System()}, {Role: "user", Content: Instance(task)}}
	if err := r.setup(ctx); err != nil {
		return r.end(ctx, fmt.Errorf("mini-swe-agent setup: %w", err))
	}
	return r.end(ctx, r.loop(ctx))
}

// run is one rollout's state (DefaultAgent's).
type run struct {
	a            *Agent
	sh           agent.Shell
	cwd, id      string
	tr           agent.Trajectory
	calls        int
	cost         float64
	formatErrors int
	prevIDs      []int
}

// setup settles the working directory and the container's name for the
// timeout message.
func (r *run) setup(ctx context.Context) error {
	r.cwd = r.a.Opts.Cwd
	if r.cwd == "" {
		res, err := r.sh.Exec(ctx, "test -d "+defaultCwd+" && echo "+defaultCwd+" || pwd", sandbox.ExecOptions{Fresh: true})
		if err != nil {
			return err
		}
		r.cwd = strings.TrimSpace(res.Stdout)
	}
	if c, ok := r.sh.(interface{ ID() string }); ok {
		r.id = c.ID()
	}
	return nil
}

// end sets the stop reason an error implies.
func (r *run) end(ctx context.Context, err error) (agent.Trajectory, error) {
	switch {
	case err == nil:
	case ctx.Err() != nil:
		r.tr.StopReason, err = agent.StopCancelled, nil
	case errors.Is(err, agent.ErrContextLength):
		r.tr.StopReason, err = agent.StopContextLength, nil
	default:
		r.tr.StopReason, r.tr.Error = agent.StopModelError, err.Error()
	}
	return r.tr, err
}

// loop is DefaultAgent.run's loop: steps until an exit.
func (r *run) loop(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stop, err := r.step(ctx)
		if err != nil || stop != "" {
			r.tr.StopReason = stop
			return err
		}
	}
}

// step is DefaultAgent.step with run's handling of what it raises: a
// format error is told to the model (the third in a row ends the run), a
// submission or a limit ends it.
func (r *run) step(ctx context.Context) (string, error) {
	o := r.a.Opts
	steps, costLimit, formatLimit := or(o.StepLimit, defaultStepLimit), defaultCostLimit, defaultFormatLimit
	if o.CostLimit != nil {
		costLimit = *o.CostLimit
	}
	if o.FormatLimit != nil {
		formatLimit = *o.FormatLimit
	}
	if 0 < steps && steps <= r.calls || 0 < costLimit && costLimit <= r.cost {
		return StopLimitsExceeded, nil
	}
	r.calls++
	reply, err := r.query(ctx)
	if err != nil {
		return "", err
	}
	msg := reply.Message
	msg.Role, msg.Name, msg.ToolCallID = "assistant", "", ""
	actions, ferr := parseActions(reply)
	if ferr != "" {
		// The reply stays out of the conversation; the model is told
		// what was wrong with it.
		r.tr.Turns[len(r.tr.Turns)-1].Rejected = &msg
		r.tr.Messages = append(r.tr.Messages, agent.Message{Role: "user", Content: ferr})
		r.formatErrors++
		if 0 < formatLimit && formatLimit <= r.formatErrors {
			return StopFormatErrors, nil
		}
		return "", nil
	}
	r.tr.Messages = append(r.tr.Messages, msg)
	// The observations join the conversation once every command ran: a
	// submission ends the run before any does.
	var observations []agent.Message
	for _, act := range actions {
		out, err := r.execute(ctx, act)
		if err != nil {
			return "", err
		}
		if sub, ok := submission(out.Output, out.ReturnCode); ok {
			r.tr.Submission = &sub
			return StopSubmitted, nil
		}
		observations = append(observations, agent.Message{Role: "tool", ToolCallID: act.id, Content: out.content})
	}
	r.tr.Messages = append(r.tr.Messages, observations...)
	r.formatErrors = 0
	return "", nil
}

func or(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// query is one model call with the conversation so far and the bash tool;
// its cost counts also when the reply cannot be used.
func (r *run) query(ctx context.Context) (agent.Reply, error) {
	start := time.Now()
	reply, err := r.a.Model.Complete(ctx, r.tr.Messages, []agent.Schema{Tool})
	var turn agent.Turn
	turn, r.prevIDs = agent.NewTurn(len(r.tr.Turns), reply, time.Since(start).Seconds(), r.prevIDs)
	r.tr.Usage = r.tr.Usage.Add(reply.Usage)
	if r.a.Opts.Cost != nil {
		r.cost += r.a.Opts.Cost(reply.Usage)
	}
	if err != nil {
		turn.Errors = append(turn.Errors, err.Error())
	}
	r.tr.Turns = append(r.tr.Turns, turn)
	return reply, err
}

// action is one bash call: its command (any JSON value the model gave)
// and the call's id.
type action struct {
	command any
	id      string
}

// parseActions is parse_toolcall_actions: the commands of a reply, or the
// format error message to send instead.
func parseActions(reply agent.Reply) ([]action, string) {
	calls := reply.Message.ToolCalls
	if len(calls) == 0 {
		return nil, formatError("No tool calls found in the response. Every response MUST include at least one tool call.", reply.FinishReason, false)
	}
	var acts []action
	for _, c := range calls {
		msg := ""
		v, err := pyjson.Decode(c.Function.Arguments)
		if err != nil {
			msg = "Error parsing tool call arguments: " + err.Error() + "."
		}
		if c.Function.Name != "bash" {
			msg += "Unknown tool '" + c.Function.Name + "'."
		}
		// A failed parse leaves Python's args at {}: no command either.
		var command any
		hasCommand := false
		if args, ok := v.(*pyjson.Object); ok && err == nil {
			command, hasCommand = args.Get("command")
		}
		if !hasCommand {
			msg += "Missing 'command' argument in bash tool call."
		}
		if msg != "" {
			return nil, formatError(pystr.Strip(msg), reply.FinishReason, true)
		}
		acts = append(acts, action{command: command, id: c.ID})
	}
	return acts, ""
}

// result is what a command did, with the message it becomes.
type result struct {
	output
	content string
}

// execute is DockerEnvironment.execute: the command in a fresh bash -c in
// the working directory, with the configuration's variables, its stderr
// merged into its stdout, cut at the timeout; a failure to run it is
// reported as Python's exception would be.
func (r *run) execute(ctx context.Context, act action) (result, error) {
	t0 := time.Now()
	defer func() {
		if n := len(r.tr.Turns); n > 0 {
			r.tr.Turns[n-1].Tools = append(r.tr.Turns[n-1].Tools, agent.ToolTiming{Name: "bash", Secs: time.Since(t0).Seconds()})
		}
	}()
	cmd, ok := act.command.(string)
	if !ok || strings.IndexByte(cmd, 0) >= 0 {
		e := "embedded null byte"
		if !ok {
			e = "expected str, bytes or os.PathLike object, not " + pyjson.TypeName(act.command)
		}
		o := output{ReturnCode: -1, ExceptionInfo: "An error occurred while executing the command: " + e}
		return result{output: o, content: observation(o, -1, "", "")}, nil
	}
	timeout := r.a.Opts.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	env := map[string]string{}
	for _, kv := range r.env() {
		env[kv[0]] = kv[1]
	}
	res, err := r.sh.Exec(ctx, "exec bash -c "+pystr.Quote(cmd)+" 2>&1", sandbox.ExecOptions{
		Fresh: true, Workdir: r.cwd, Env: env, Timeout: timeout, MaxOutput: outputMax})
	if err != nil {
		return result{}, err
	}
	head, cut, tail := sandbox.CutOutput(res.Stdout + res.Stderr)
	if !res.TimedOut {
		head, tail = universalNewlines(head), universalNewlines(tail)
	}
	head, tail = pyjson.ValidUTF8([]byte(head)), pyjson.ValidUTF8([]byte(tail))
	o := output{Output: head + tail, ReturnCode: res.ExitCode}
	if res.TimedOut {
		// str(subprocess.TimeoutExpired): the command line as a list,
		// the timeout as configured (an int of seconds).
		secs := pyjson.FloatRepr(timeout.Seconds())
		if timeout%time.Second == 0 {
			secs = fmt.Sprint(int64(timeout / time.Second))
		}
		o.ReturnCode = -1
		o.ExceptionInfo = "An error occurred while executing the command: Command '" + pyjson.Repr(r.dockerArgs(cmd)) + "' timed out after " + secs + " seconds"
	}
	chars := -1
	if cut > 0 {
		chars = pystr.Len(head) + cut + pystr.Len(tail)
	}
	return result{output: o, content: observation(o, chars, head, tail)}, nil
}

// dockerArgs is the command line mini-swe-agent runs a command with
// (docker exec -w CWD -e K=V ... ID bash -c CMD), which Python's timeout
// message quotes.
func (r *run) dockerArgs(cmd string) []any {
	args := []any{"docker", "exec", "-w", r.cwd}
	for _, kv := range r.env() {
		args = append(args, "-e", kv[0]+"="+kv[1])
	}
	id := r.id
	if id == "" {
		id = "sandbox"
	}
	return append(args, id, "bash", "-c", cmd)
}

func (r *run) env() [][2]string {
	if r.a.Opts.Env != nil {
		return r.a.Opts.Env
	}
	return Env
}

// universalNewlines is what reading a pipe in text mode does to \r\n and
// \r (subprocess.run with text=True).
func universalNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// submission is _check_finished: an output whose first line (leading
// whitespace aside) is the marker, with exit code 0, submits what follows.
func submission(out string, code int) (string, bool) {
	lines := pystr.SplitLines(pystr.LStrip(out), true)
	if len(lines) == 0 || pystr.Strip(lines[0]) != submitMarker || code != 0 {
		return "", false
	}
	return strings.Join(lines[1:], ""), true
}
