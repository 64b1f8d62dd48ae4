// Package agent is what a rollout measures: the tool-calling loop, its
// tools, and the agents that drive them (llm, oracle, nop, replay).
//
// The loop follows hermes-agent's semantics so trajectories stay comparable
// and usable for training: up to MaxTurns model calls; it stops when the
// model answers without tool calls; tool calls of a turn run in order; an
// unknown tool or invalid JSON arguments are answered to the model, never
// dispatched; tool failures are data for the model, not Go errors. The
// tools are hermes-agent's own, reproduced byte for byte (agent/hermes).
//
// The package owns the small interfaces it consumes: Model (one chat
// completion) and Shell (what tools need from a sandbox).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

// Message is an OpenAI chat message.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
	// Reasoning is the model's reasoning (reasoning_content or reasoning),
	// kept in the history as hermes-agent does.
	Reasoning string `json:"reasoning_content,omitempty"`
}

// ToolCall is one function call the model asked for.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names a tool and carries its JSON arguments as text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage counts tokens of one or more model calls: a turn's, a
// trajectory's, a result record's, a judge's.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	CachedTokens     int64 `json:"cached_tokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
}

// Add returns the sum of two usages.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.PromptTokens + v.PromptTokens, u.CompletionTokens + v.CompletionTokens,
		u.CachedTokens + v.CachedTokens, u.ReasoningTokens + v.ReasoningTokens}
}

// Reply is one model answer.
type Reply struct {
	Message Message
	Usage   Usage
	// FinishReason is why the model stopped, as the endpoint said
	// ("stop", "tool_calls", "length"); "" when it did not say.
	FinishReason string
	// Logprobs keeps the endpoint's logprobs object as it came.
	Logprobs json.RawMessage
	// PromptTokenIDs, CompletionTokenIDs and CompletionLogprobs are what
	// the endpoint reports of this call in tokens, when it does (vLLM and
	// SGLang with return_token_ids and logprobs): the exact ids the model
	// read and wrote, so training needs no retokenization.
	PromptTokenIDs     []int
	CompletionTokenIDs []int
	CompletionLogprobs []float64
}

// Model is one chat completion.
type Model interface {
	Complete(ctx context.Context, messages []Message, tools []Schema) (Reply, error)
}

// Sampling is what a rollout's requests asked of the sampler. A nil field
// or a zero MaxTokens was not sent: the endpoint's default applied.
type Sampling struct {
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
}

// Sampler is a Model that says how it samples; the loop records it in the
// trajectory, so training data can say at which temperature each rollout
// was generated.
type Sampler interface {
	Sampling() Sampling
}

// ErrContextLength: the conversation no longer fits the model's context.
// The loop ends with stop reason "context_length".
var ErrContextLength = errors.New("context length exceeded")

// Shell is what tools need from a sandbox.
type Shell interface {
	Exec(ctx context.Context, cmd string, opts sandbox.ExecOptions) (sandbox.ExecResult, error)
	ReadFile(ctx context.Context, path string, limit int64) ([]byte, int64, error)
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
}

// Stop reasons.
const (
	StopDone          = "done"
	StopMaxTurns      = "max_turns"
	StopContextLength = "context_length"
	StopModelError    = "model_error"
	StopCancelled     = "cancelled"
	StopOracle        = "oracle"
	StopNop           = "nop"
	// StopTranscriptLimit: the conversation grew past MaxTranscript (an
	// endpoint that answers megabytes a turn, say). The agent's outcome:
	// the rollout is verified as it stands.
	StopTranscriptLimit = "transcript_limit"
)

// MaxTranscript bounds what a rollout's trajectory holds (the messages'
// text, the tool calls' arguments, the token ids and logprobs): the loop
// ends once past it. A model's context holds far less; the host keeps the
// trajectory in memory and sends it whole every turn, and each answer's
// decoding holds a few copies of it: at 32 MiB, answers of 30 MiB each
// took proctor to 498 MiB, at 16 MiB to 289 MiB (docs/security.md).
const MaxTranscript = 16 << 20

// Trajectory is everything a rollout's agent did.
type Trajectory struct {
	Agent      string    `json:"agent"`
	Model      string    `json:"model,omitempty"`
	Tools      []string  `json:"tools,omitempty"`
	Messages   []Message `json:"messages"`
	Turns      []Turn    `json:"turns"`
	StopReason string    `json:"stop_reason"`
	Usage      Usage     `json:"usage"`
	Error      string    `json:"error,omitempty"`
	// Sampling is what the model's requests asked for, when the model
	// says (see Sampler); nil in older transcripts.
	Sampling *Sampling `json:"sampling,omitempty"`
	// Oracle is what the oracle agent's reference solution printed.
	Oracle *OracleRun `json:"oracle,omitempty"`
	// ToolSchemas are the tools the model was offered when they are not
	// proctor's own (Tools names those): mini-swe-agent's bash, an
	// installed agent's, as its requests declared them.
	ToolSchemas []Schema `json:"tool_schemas,omitempty"`
	// Submission is what an agent that submits (mini-swe-agent) handed
	// in: its patch, as the reference records it.
	Submission *string `json:"submission,omitempty"`
	// SideCalls counts an installed agent's model calls outside its main
	// conversation (a title, a summary: calls without tools): their usage
	// is in Usage, not in Turns.
	SideCalls int `json:"side_calls,omitempty"`
}

// Transcript is what a run directory keeps of one rollout's agent
// (transcripts/<rollout>.json): the rollout's identity, the prompt it was
// given and its trajectory. Exports and reward plugins read this shape.
type Transcript struct {
	RolloutID  string      `json:"rollout_id"`
	TaskID     string      `json:"task_id"`
	Seed       uint64      `json:"seed"`
	Prompt     string      `json:"prompt"`
	System     string      `json:"system"`
	Trajectory *Trajectory `json:"trajectory"`
}

// Turn is one model call and the tool calls it asked for.
type Turn struct {
	Index     int          `json:"index"`
	Usage     Usage        `json:"usage"`
	ModelSecs float64      `json:"model_secs"`
	Tools     []ToolTiming `json:"tools,omitempty"`
	Errors    []string     `json:"errors,omitempty"`
	// Logprobs is the endpoint's logprobs object, kept only when it could
	// not be read into CompletionLogprobs.
	Logprobs json.RawMessage `json:"logprobs,omitempty"`
	// Token ids and logprobs of this call, when the endpoint returned them
	// (see Reply). A prompt repeats the previous call's prompt and
	// completion: then PromptPrefix says how many of its first ids those
	// are, and PromptTokenIDs holds only the rest, which keeps a long
	// rollout's transcript linear in its length instead of quadratic.
	// FullPrompts expands them.
	PromptPrefix       int       `json:"prompt_prefix,omitempty"`
	PromptTokenIDs     []int     `json:"prompt_token_ids,omitempty"`
	CompletionTokenIDs []int     `json:"completion_token_ids,omitempty"`
	CompletionLogprobs []float64 `json:"completion_logprobs,omitempty"`
	// FinishReason is the endpoint's, when it was not "stop" or
	// "tool_calls" (a reply cut at its output limit: "length").
	FinishReason string `json:"finish_reason,omitempty"`
	// Rejected is the reply when the agent did not keep it in the
	// conversation (mini-swe-agent drops a reply it cannot parse and
	// tells the model why).
	Rejected *Message `json:"rejected,omitempty"`
}

// FullPrompts returns every turn's whole prompt token ids (nil for a turn
// without), undoing the PromptPrefix sharing.
func FullPrompts(turns []Turn) ([][]int, error) {
	out := make([][]int, len(turns))
	var prev []int // the last call with ids: its prompt and completion
	for i, t := range turns {
		if len(t.PromptTokenIDs) == 0 && t.PromptPrefix == 0 {
			continue
		}
		if t.PromptPrefix < 0 || t.PromptPrefix > len(prev) {
			return nil, fmt.Errorf("turn %d: prompt_prefix %d is not within the previous call's %d tokens", t.Index, t.PromptPrefix, len(prev))
		}
		full := make([]int, 0, t.PromptPrefix+len(t.PromptTokenIDs))
		full = append(append(full, prev[:t.PromptPrefix]...), t.PromptTokenIDs...)
		out[i] = full
		prev = append(full[:len(full):len(full)], t.CompletionTokenIDs...)
	}
	return out, nil
}

// NewTurn is the record of model call i, which took secs and answered
// reply: its usage, token ids and logprobs. prev is the previous call's
// prompt and completion ids, which the prompt's ids are stored beyond
// when they repeat them; NewTurn returns this call's, for the next.
func NewTurn(i int, reply Reply, secs float64, prev []int) (Turn, []int) {
	t := Turn{Index: i, Usage: reply.Usage, ModelSecs: secs,
		PromptTokenIDs: reply.PromptTokenIDs, CompletionTokenIDs: reply.CompletionTokenIDs, CompletionLogprobs: reply.CompletionLogprobs}
	if reply.FinishReason != "stop" && reply.FinishReason != "tool_calls" {
		t.FinishReason = reply.FinishReason
	}
	if reply.CompletionLogprobs == nil {
		t.Logprobs = reply.Logprobs
	}
	return t, ShareIDs(&t, prev)
}

// sharePrefix stores a call's prompt ids as the part that does not repeat
// prev (the previous call's prompt and completion).
func sharePrefix(t *Turn, prev []int) {
	p := t.PromptTokenIDs
	if len(prev) == 0 || len(p) < len(prev) {
		return
	}
	for i, id := range prev {
		if p[i] != id {
			return
		}
	}
	t.PromptPrefix, t.PromptTokenIDs = len(prev), p[len(prev):]
}

// ShareIDs stores a call's token ids in t as the loop does: its prompt
// ids as the part that does not repeat prev, the previous call's prompt
// and completion ids. It returns what the next call's prev is (prev
// itself when t has no prompt ids).
func ShareIDs(t *Turn, prev []int) []int {
	if len(t.PromptTokenIDs) == 0 {
		return prev
	}
	next := append(slices.Clone(t.PromptTokenIDs), t.CompletionTokenIDs...)
	sharePrefix(t, prev)
	return next
}

// ToolTiming is one tool call's name, duration and whether it failed.
type ToolTiming struct {
	Name   string  `json:"name"`
	Secs   float64 `json:"secs"`
	Failed bool    `json:"failed,omitempty"`
}

// Loop is the llm agent.
type Loop struct {
	Model    Model
	Tools    *Toolset
	MaxTurns int
	System   string
	Name     string // model name, for the trajectory
}

// Run runs the loop on one prompt. It returns the trajectory so far with
// any error: a model failure (after its retries) ends the rollout as an
// infrastructure error, a context-length error is a normal stop.
func (l *Loop) Run(ctx context.Context, sh Shell, prompt string) (Trajectory, error) {
	tr := Trajectory{Agent: "llm", Model: l.Name, Tools: l.Tools.Names()}
	if s, ok := l.Model.(Sampler); ok {
		sp := s.Sampling()
		tr.Sampling = &sp
	}
	if l.System != "" {
		tr.Messages = append(tr.Messages, Message{Role: "system", Content: l.System})
	}
	tr.Messages = append(tr.Messages, Message{Role: "user", Content: prompt})
	schemas := l.Tools.Schemas()
	maxTurns := l.MaxTurns
	if maxTurns <= 0 {
		maxTurns = 60
	}
	var prevIDs []int // the last call's prompt and completion ids
	size := 0         // what the trajectory weighs (MaxTranscript)
	for _, m := range tr.Messages {
		size += m.size()
	}
	tools := l.Tools.NewSession(sh)
	for i := 0; i < maxTurns; i++ {
		if ctx.Err() != nil {
			tr.StopReason = StopCancelled
			return tr, nil
		}
		start := time.Now()
		reply, err := l.Model.Complete(ctx, tr.Messages, schemas)
		var turn Turn
		turn, prevIDs = NewTurn(i, reply, time.Since(start).Seconds(), prevIDs)
		tr.Usage = tr.Usage.Add(reply.Usage)
		if err != nil {
			turn.Errors = append(turn.Errors, err.Error())
			tr.Turns = append(tr.Turns, turn)
			switch {
			case errors.Is(err, ErrContextLength):
				tr.StopReason = StopContextLength
				return tr, nil
			case ctx.Err() != nil:
				tr.StopReason = StopCancelled
				return tr, nil
			}
			tr.StopReason = StopModelError
			tr.Error = err.Error()
			return tr, err
		}
		msg := reply.Message
		msg.Role = "assistant"
		tr.Messages = append(tr.Messages, msg)
		size += msg.size() + turn.size()
		if len(msg.ToolCalls) == 0 {
			tr.Turns = append(tr.Turns, turn)
			tr.StopReason = StopDone
			return tr, nil
		}
		if size > MaxTranscript {
			tr.Turns = append(tr.Turns, turn)
			tr.StopReason = StopTranscriptLimit
			return tr, nil
		}
		for _, call := range msg.ToolCalls {
			t0 := time.Now()
			out, failed := tools.Dispatch(ctx, call)
			turn.Tools = append(turn.Tools, ToolTiming{Name: call.Function.Name, Secs: time.Since(t0).Seconds(), Failed: failed})
			m := Message{Role: "tool", ToolCallID: call.ID, Name: call.Function.Name, Content: out}
			tr.Messages = append(tr.Messages, m)
			size += m.size()
		}
		tr.Turns = append(tr.Turns, turn)
		if size > MaxTranscript {
			tr.StopReason = StopTranscriptLimit
			return tr, nil
		}
	}
	tr.StopReason = StopMaxTurns
	return tr, nil
}

// size is about what m weighs in a transcript, in bytes.
func (m Message) size() int {
	n := len(m.Content) + len(m.Reasoning) + len(m.Name) + len(m.ToolCallID)
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Function.Name) + len(c.Function.Arguments)
	}
	return n
}

// size is about what t's token ids and logprobs weigh in a transcript.
func (t Turn) size() int {
	return 8*(len(t.PromptTokenIDs)+len(t.CompletionTokenIDs)) + 20*len(t.CompletionLogprobs) + len(t.Logprobs)
}
