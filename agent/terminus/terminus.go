package terminus

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/pystr"
)

//go:embed templates/terminus-json-plain.txt templates/terminus-xml-plain.txt
var templates embed.FS

// Stop reasons of Terminus-2 beyond the agent package's.
const (
	// StopSessionEnded: the tmux session ended (is_session_alive), which
	// ends Harbor's loop quietly.
	StopSessionEnded = "session_ended"
)

// Options are Terminus-2's settings, named after the arguments of Harbor's
// Terminus2 constructor; the zero value is Harbor's default.
type Options struct {
	Parser   string // parser_name: "json" or "xml"
	MaxTurns int    // max_turns: episodes (0: Harbor's 1,000,000)
	// PaneWidth and PaneHeight are tmux_pane_width and tmux_pane_height
	// (0: 160 and 40).
	PaneWidth, PaneHeight int
	// NoSummarize is enable_summarize=False: a full context ends the
	// rollout instead of being summarized.
	NoSummarize bool
	// ProactiveThreshold is proactive_summarization_threshold: summarize
	// before a call when fewer tokens than this are left (nil: 8000).
	ProactiveThreshold *int
	// MaxInputTokens and MaxOutputTokens are model_info's
	// max_input_tokens (the context limit; 0: Harbor's fallback of
	// 1,000,000) and max_output_tokens (0: unknown).
	MaxInputTokens, MaxOutputTokens int
	// InterleavedThinking sends the model's earlier reasoning back to it.
	InterleavedThinking bool
	// NoRecording is record_terminal_session=False: asciinema is not
	// started in the pane (nor the screen cleared after it).
	NoRecording bool
	// Tmux says where tmux comes from when the image has none.
	Tmux Tmux
	// Socket, when set, runs the session on a tmux server of that name
	// (tmux -L) instead of the default one: for sandboxes that share the
	// machine's /tmp (the local backend). LogDir is where the pane's log
	// and the recording go (default /logs/agent, where Harbor mounts its
	// agent logs).
	Socket, LogDir string
	// CountTokens counts a conversation's tokens for the summarization
	// thresholds (Harbor: litellm's token_counter); nil: EstimateTokens.
	CountTokens func([]agent.Message) int

	clock *clock // tests
}

// Agent is Terminus-2 with a model.
type Agent struct {
	Model agent.Model
	Name  string // the model's name, for the trajectory
	Opts  Options
}

// Run is Terminus2.setup then Terminus2.run on one instruction. It returns
// the trajectory so far with any error: a model failure or a broken
// sandbox ends the rollout with an error, as do the replies on which
// Harbor's own code raises; a context that no longer fits (with
// summarization off) is a normal stop.
func (a *Agent) Run(ctx context.Context, sh agent.Shell, instruction string) (agent.Trajectory, error) {
	r, err := a.newRun(sh, instruction)
	if err != nil {
		return r.tr, err
	}
	if err := r.setup(ctx); err != nil {
		return r.stop(ctx, "", fmt.Errorf("terminus-2 setup: %w", err))
	}
	stop, err := r.loop(ctx)
	return r.stop(ctx, stop, err)
}

// run is one rollout's state.
type run struct {
	a           *Agent
	opts        Options
	parser      Parser
	sess        *session
	instruction string
	chat        []agent.Message // Harbor's Chat.messages: what the next call sends before its prompt
	pending     bool            // a first task_complete waits for its confirmation
	summaries   int             // summarizations so far
	tr          agent.Trajectory
	prevIDs     []int
}

func (a *Agent) newRun(sh agent.Shell, instruction string) (*run, error) {
	o := a.Opts
	r := &run{a: a, opts: o, instruction: instruction,
		tr: agent.Trajectory{Agent: "terminus-2", Model: a.Name}}
	if s, ok := a.Model.(agent.Sampler); ok {
		sp := s.Sampling()
		r.tr.Sampling = &sp
	}
	p, ok := NewParser(o.Parser)
	if !ok {
		r.tr.StopReason = agent.StopModelError
		return r, fmt.Errorf("terminus-2: unknown parser %q: use json or xml", o.Parser)
	}
	r.parser = p
	c := realClock()
	if o.clock != nil {
		c = *o.clock
	}
	logDir := o.LogDir
	if logDir == "" {
		logDir = agentLogDir
	}
	r.sess = &session{sh: sh, tmux: "tmux", width: or(o.PaneWidth, 160), height: or(o.PaneHeight, 40), record: !o.NoRecording, logDir: logDir, clock: c}
	return r, nil
}

func or(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// setup puts tmux in place and starts the session (Terminus2.setup).
func (r *run) setup(ctx context.Context) error {
	tmux, err := r.opts.Tmux.ensure(ctx, r.sess)
	if err != nil {
		return err
	}
	if r.opts.Socket != "" {
		tmux += " -L " + pystr.Quote(r.opts.Socket)
	}
	r.sess.tmux = tmux
	return r.sess.start(ctx)
}

// stop ends the trajectory with a stop reason, or the one err implies.
func (r *run) stop(ctx context.Context, reason string, err error) (agent.Trajectory, error) {
	switch {
	case err == nil:
	case ctx.Err() != nil:
		reason, err = agent.StopCancelled, nil
	case errors.Is(err, agent.ErrContextLength):
		reason, err = agent.StopContextLength, nil
	case reason == "":
		reason = agent.StopModelError
		var me *modelError
		if !errors.As(err, &me) {
			reason = "agent_error"
		}
		r.tr.Error = err.Error()
	}
	r.tr.StopReason = reason
	return r.tr, err
}

// modelError is a model call that failed after the client's retries.
type modelError struct{ err error }

func (e *modelError) Error() string { return e.err.Error() }
func (e *modelError) Unwrap() error { return e.err }

// IsModelError reports whether err is a model failure (the endpoint's),
// as opposed to the sandbox's or the agent's own.
func IsModelError(err error) bool {
	var me *modelError
	return errors.As(err, &me)
}

// loop is Terminus2.run's first prompt, then _run_agent_loop.
func (r *run) loop(ctx context.Context) (string, error) {
	state, err := r.sess.incremental(ctx)
	if err != nil {
		return "", err
	}
	prompt := r.format(limitOutput(state))
	maxEpisodes := r.opts.MaxTurns
	if maxEpisodes <= 0 {
		maxEpisodes = 1000000
	}
	for episode := 0; episode < maxEpisodes; episode++ {
		if alive, err := r.sess.alive(ctx); err != nil {
			return "", err
		} else if !alive {
			return StopSessionEnded, nil
		}
		if r.instruction != "" && !r.opts.NoSummarize {
			if handoff, ok := r.proactive(ctx); ok {
				prompt = handoff
			}
		}
		done, next, err := r.episode(ctx, prompt)
		if err != nil || done {
			return agent.StopDone, err
		}
		prompt = next
	}
	return agent.StopMaxTurns, nil
}

// episode is one model call and what follows it: the reply parsed, its
// commands run, the next prompt built. done is a confirmed completion.
func (r *run) episode(ctx context.Context, prompt string) (done bool, next string, err error) {
	resp, err := r.query(ctx, prompt)
	if err != nil {
		return false, "", err
	}
	res, err := r.parser.Parse(resp.content)
	if err != nil {
		return false, "", err
	}
	feedback := ""
	if res.Error != "" {
		feedback = "ERROR: " + res.Error
		if res.Warning != "" {
			feedback += "\nWARNINGS: " + res.Warning
		}
	} else if res.Warning != "" {
		feedback = "WARNINGS: " + res.Warning
	}
	if strings.Contains(feedback, "ERROR:") {
		return false, "Previous response had parsing errors:\n" + feedback + "\n\nPlease fix these issues and provide a proper " + r.responseType() + ".", nil
	}
	out, err := r.execute(ctx, res.Commands)
	if err != nil {
		return false, "", err
	}
	wasPending := r.pending
	var obs string
	switch {
	case res.Complete && r.pending:
		obs = out
	case res.Complete:
		r.pending = true
		obs = r.confirmation(out)
	case strings.Contains(feedback, "WARNINGS:"):
		r.pending = false
		obs = "Previous response had warnings:\n" + feedback + "\n\n" + limitOutput(out)
	default:
		r.pending = false
		obs = limitOutput(out)
	}
	return res.Complete && wasPending, obs, nil
}

// execute is _execute_commands: each command's keys, then a wait of its
// duration (at most 60 seconds), then the new output.
func (r *run) execute(ctx context.Context, cmds []Command) (string, error) {
	var tools []agent.ToolTiming
	for _, c := range cmds {
		t0 := time.Now()
		err := r.sess.sendKeys(ctx, []string{c.Keystrokes}, math.Min(c.Duration, 60))
		tools = append(tools, agent.ToolTiming{Name: "bash_command", Secs: time.Since(t0).Seconds(), Failed: err != nil})
		if err != nil {
			r.attachTools(tools)
			return "", err
		}
	}
	r.attachTools(tools)
	out, err := r.sess.incremental(ctx)
	return limitOutput(out), err
}

// attachTools records the commands' timings on the last model call.
func (r *run) attachTools(tools []agent.ToolTiming) {
	if n := len(r.tr.Turns); n > 0 {
		r.tr.Turns[n-1].Tools = append(r.tr.Turns[n-1].Tools, tools...)
	}
}

// format fills the prompt template as str.format does.
func (r *run) format(terminalState string) string {
	name := "templates/terminus-json-plain.txt"
	if r.parser.format() == "xml" {
		name = "templates/terminus-xml-plain.txt"
	}
	b, _ := templates.ReadFile(name)
	return pyFormat(string(b), map[string]string{"instruction": r.instruction, "terminal_state": terminalState})
}

// pyFormat is str.format with named fields only: {name} is replaced, {{
// and }} stand for braces.
func pyFormat(tmpl string, fields map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch {
		case (c == '{' || c == '}') && i+1 < len(tmpl) && tmpl[i+1] == c:
			b.WriteByte(c)
			i++
		case c == '{':
			end := strings.IndexByte(tmpl[i:], '}')
			b.WriteString(fields[tmpl[i+1:i+end]])
			i += end
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// responseType is _get_error_response_type.
func (r *run) responseType() string {
	if r.parser.format() == "xml" {
		return "response"
	}
	return "JSON response"
}

// confirmation is _get_completion_confirmation_message.
func (r *run) confirmation(out string) string {
	again := `include "task_complete": true in your JSON response again.`
	if r.parser.format() == "xml" {
		again = "include <task_complete>true</task_complete> again."
	}
	return "Current terminal state:\n" + out + "\n\nAre you sure you want to mark the task as complete? This will trigger your solution to be graded and you won't be able to make any further corrections. If so, " + again
}

// limitOutput is _limit_output_length at its default 10,000 bytes: the
// first and last 5,000 bytes around a note, each cut to whole characters
// (bytes.decode with errors="ignore" of text that was valid before the
// cut).
func limitOutput(out string) string {
	const max = 10000
	if len(out) <= max {
		return out
	}
	first := strings.ToValidUTF8(out[:max/2], "")
	last := strings.ToValidUTF8(out[len(out)-max/2:], "")
	omitted := len(out) - len(first) - len(last)
	return fmt.Sprintf("%s\n[... output limited to %d bytes; %d interior bytes omitted ...]\n%s", first, max, omitted, last)
}

// EstimateTokens is how proctor counts a conversation's tokens where
// Harbor asks litellm's token_counter (a tokenizer proctor does not have):
// a token per four bytes of each message's text, and four per message.
func EstimateTokens(msgs []agent.Message) int {
	n := 3
	for _, m := range msgs {
		n += 4 + (len(m.Content)+len(m.Reasoning)+3)/4
	}
	return n
}

// shortScreen is current_screen[-1000:] of a str.
func shortScreen(s string) string { return pystr.Tail(s, 1000) }

// response is what Harbor's LLMResponse holds that the agent reads.
type response struct {
	content, reasoning string
}

// errOutputLength is OutputLengthExceededError: the reply was cut at the
// output limit (finish_reason "length").
type errOutputLength struct{ truncated string }

func (e *errOutputLength) Error() string { return "the model's reply was cut at its output limit" }

// call is one model call (Harbor's LLM.call): history and prompt in,
// recorded in the trajectory under name ("" for the main chat).
func (r *run) call(ctx context.Context, name string, history []agent.Message, prompt string) (response, error) {
	user := agent.Message{Role: "user", Content: prompt}
	msgs := append(slices.Clone(history), user)
	start := time.Now()
	reply, err := r.a.Model.Complete(ctx, msgs, nil)
	var turn agent.Turn
	turn, r.prevIDs = agent.NewTurn(len(r.tr.Turns), reply, time.Since(start).Seconds(), r.prevIDs)
	r.tr.Usage = r.tr.Usage.Add(reply.Usage)
	if err != nil {
		turn.Errors = append(turn.Errors, err.Error())
		r.tr.Turns = append(r.tr.Turns, turn)
		if errors.Is(err, agent.ErrContextLength) || ctx.Err() != nil {
			return response{}, err
		}
		return response{}, &modelError{err}
	}
	r.tr.Turns = append(r.tr.Turns, turn)
	user.Name = name
	msg := reply.Message
	msg.Role, msg.Name, msg.ToolCalls = "assistant", name, nil
	r.tr.Messages = append(r.tr.Messages, user, msg)
	if reply.FinishReason == "length" {
		return response{}, &errOutputLength{truncated: reply.Message.Content}
	}
	return response{content: reply.Message.Content, reasoning: reply.Message.Reasoning}, nil
}

// chatCall is Chat.chat: a main-chat call whose exchange joins the history
// once it succeeded.
func (r *run) chatCall(ctx context.Context, prompt string) (response, error) {
	resp, err := r.call(ctx, "", r.chat, prompt)
	if err != nil {
		return resp, err
	}
	assistant := agent.Message{Role: "assistant", Content: resp.content}
	if r.opts.InterleavedThinking {
		assistant.Reasoning = resp.reasoning
	}
	r.chat = append(r.chat, agent.Message{Role: "user", Content: prompt}, assistant)
	return resp, nil
}

// query is _query_llm: a main-chat call, with Harbor's recoveries from a
// full context (summarize, then fall back) and from a reply cut at the
// output limit (ask again, smaller).
func (r *run) query(ctx context.Context, prompt string) (response, error) {
	resp, err := r.chatCall(ctx, prompt)
	var cut *errOutputLength
	switch {
	case err == nil || ctx.Err() != nil:
		return resp, err
	case errors.Is(err, agent.ErrContextLength):
		if r.opts.NoSummarize {
			return resp, err
		}
		return r.recoverContext(ctx)
	case errors.As(err, &cut):
		return r.recoverCut(ctx, prompt, cut.truncated)
	}
	return resp, err
}

// recoverCut is _query_llm's OutputLengthExceededError branch.
func (r *run) recoverCut(ctx context.Context, prompt, truncated string) (response, error) {
	if x, ok := r.parser.(xmlParser); ok {
		if _, salvaged := x.salvage(truncated); salvaged {
			// Harbor returns the salvaged text where a response is
			// expected and fails on it.
			return response{}, errors.New("AttributeError: 'str' object has no attribute 'content' (Harbor's salvage of a reply cut at the output limit)")
		}
	}
	warnings := ""
	if res, err := r.parser.Parse(truncated); err == nil && res.Warning != "" {
		warnings = "\n\nParser warnings from your truncated response:\n" + res.Warning
	}
	limit := "the maximum output length"
	if r.opts.MaxOutputTokens > 0 {
		limit = fmt.Sprintf("%d tokens", r.opts.MaxOutputTokens)
	}
	msg := "ERROR!! NONE of the actions you just requested were performed because you exceeded " + limit +
		". Your outputs must be less than " + limit + ". Re-issue this request, breaking it into chunks each of which is less than " + limit + "." + warnings
	r.chat = append(r.chat, agent.Message{Role: "user", Content: prompt}, agent.Message{Role: "assistant", Content: truncated})
	return r.query(ctx, msg)
}
