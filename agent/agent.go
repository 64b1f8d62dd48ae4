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
	"io/fs"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/trajectory"
)

// The records of what an agent did are the run directory's, in package
// trajectory (standard library only, so that storage needs nothing that
// runs); agent names them by alias.
type (
	Message        = trajectory.Message
	ToolCall       = trajectory.ToolCall
	FunctionCall   = trajectory.FunctionCall
	Usage          = trajectory.Usage
	Sampling       = trajectory.Sampling
	Trajectory     = trajectory.Trajectory
	Transcript     = trajectory.Transcript
	Turn           = trajectory.Turn
	ToolTiming     = trajectory.ToolTiming
	Schema         = trajectory.Schema
	SchemaFunction = trajectory.SchemaFunction
	OracleRun      = trajectory.OracleRun
)

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
	StopDone          = trajectory.StopDone
	StopMaxTurns      = trajectory.StopMaxTurns
	StopContextLength = trajectory.StopContextLength
	StopModelError    = trajectory.StopModelError
	StopCancelled     = trajectory.StopCancelled
	StopOracle        = trajectory.StopOracle
	StopNop           = trajectory.StopNop
	// StopTranscriptLimit: the conversation grew past MaxTranscript (an
	// endpoint that answers megabytes a turn, say). The agent's outcome:
	// the rollout is verified as it stands.
	StopTranscriptLimit = trajectory.StopTranscriptLimit
)

// MaxTranscript bounds what a rollout's trajectory holds (the messages'
// text, the tool calls' arguments, the token ids and logprobs): the loop
// ends once past it. A model's context holds far less; the host keeps the
// trajectory in memory and sends it whole every turn, and each answer's
// decoding holds a few copies of it: at 32 MiB, answers of 30 MiB each
// took proctor to 498 MiB, at 16 MiB to 289 MiB (docs/security.md).
const MaxTranscript = 16 << 20

// FullPrompts returns every turn's whole prompt token ids (nil for a turn
// without), undoing the PromptPrefix sharing.
func FullPrompts(turns []Turn) ([][]int, error) { return trajectory.FullPrompts(turns) }

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

// ShareIDs stores a call's token ids in t as the loop does: its prompt
// ids as the part that does not repeat prev, the previous call's prompt
// and completion ids. It returns what the next call's prev is (prev
// itself when t has no prompt ids).
func ShareIDs(t *Turn, prev []int) []int { return trajectory.ShareIDs(t, prev) }

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
		size += m.Size()
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
		size += msg.Size() + turn.Size()
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
			size += m.Size()
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
