// Package trajectory holds what a run directory keeps of a rollout's agent:
// the conversation (Message, ToolCall), the model calls (Turn, Usage), how
// the model sampled, and the whole Trajectory and Transcript. It imports
// only the standard library, so the run directory and the tools that read
// it (report, export, view) need nothing that runs an agent or a sandbox;
// package agent, which produces these records, names them by alias.
//
// The JSON of every type here is the run directory's format
// (transcripts/<rollout>.json): golden tests pin it byte for byte.
package trajectory

import (
	"encoding/json"
	"fmt"
	"slices"
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

// Schema is an OpenAI function tool definition.
type Schema struct {
	Type     string         `json:"type"`
	Function SchemaFunction `json:"function"`
}

// SchemaFunction describes one tool to the model.
type SchemaFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
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

// Sampling is what a rollout's requests asked of the sampler. A nil field
// or a zero MaxTokens was not sent: the endpoint's default applied.
type Sampling struct {
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
}

// Stop reasons: why a trajectory ended.
const (
	StopDone          = "done"
	StopMaxTurns      = "max_turns"
	StopContextLength = "context_length"
	StopModelError    = "model_error"
	StopCancelled     = "cancelled"
	StopOracle        = "oracle"
	StopNop           = "nop"
	// StopTranscriptLimit: the conversation grew past the agent's bound on
	// what a transcript holds. The agent's outcome: the rollout is
	// verified as it stands.
	StopTranscriptLimit = "transcript_limit"
)

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
	// says (see agent.Sampler); nil in older transcripts.
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

// OracleRun is what applying a task's reference solution printed, and its
// exit code when it ran to its end.
type OracleRun struct {
	Output   string `json:"output"`
	ExitCode *int   `json:"exit_code,omitempty"`
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
	// (see agent.Reply). A prompt repeats the previous call's prompt and
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

// ToolTiming is one tool call's name, duration and whether it failed.
type ToolTiming struct {
	Name   string  `json:"name"`
	Secs   float64 `json:"secs"`
	Failed bool    `json:"failed,omitempty"`
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

// ShareIDs stores a call's token ids in t as an agent's loop does: its
// prompt ids as the part that does not repeat prev, the previous call's
// prompt and completion ids. It returns what the next call's prev is
// (prev itself when t has no prompt ids).
func ShareIDs(t *Turn, prev []int) []int {
	if len(t.PromptTokenIDs) == 0 {
		return prev
	}
	next := append(slices.Clone(t.PromptTokenIDs), t.CompletionTokenIDs...)
	sharePrefix(t, prev)
	return next
}

// Size is about what m weighs in a transcript, in bytes.
func (m Message) Size() int {
	n := len(m.Content) + len(m.Reasoning) + len(m.Name) + len(m.ToolCallID)
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Function.Name) + len(c.Function.Arguments)
	}
	return n
}

// Size is about what t's token ids and logprobs weigh in a transcript, in
// bytes.
func (t Turn) Size() int {
	return 8*(len(t.PromptTokenIDs)+len(t.CompletionTokenIDs)) + 20*len(t.CompletionLogprobs) + len(t.Logprobs)
}
