package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Script is a recorded agent: the assistant turns to play, in order. Each
// turn's tool calls run through the real loop and tools, so a replay
// exercises everything but the model. File format (JSON):
//
//	{"turns": [
//	  {"content": "optional text", "reasoning": "optional",
//	   "tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}]},
//	  {"content": "done"}
//	]}
//
// "arguments" is an object, or a string sent as is (to replay invalid
// JSON); without it the call has no arguments ("{}"). When the script runs out, the model answers "done" with no tool
// calls, which ends the loop.
//
// A transcript of a recorded run (transcripts/<rollout>.json) is a script
// too: its model calls, in order, answered as they were (ScriptFrom).
type Script struct {
	Turns []ScriptTurn `json:"turns"`
}

// ScriptTurn is one scripted assistant message, or a failed call.
type ScriptTurn struct {
	Content   string       `json:"content"`
	Reasoning string       `json:"reasoning,omitempty"`
	ToolCalls []ScriptCall `json:"tool_calls,omitempty"`
	// FinishReason is the reply's finish_reason ("length": cut at the
	// output limit); empty is "stop".
	FinishReason string `json:"finish_reason,omitempty"`
	// Error makes the call fail: "context_length" as a context that no
	// longer fits, anything else as the endpoint's failure.
	Error string `json:"error,omitempty"`
}

// ScriptFrom is the script that replays a recorded trajectory's model
// calls: each answered call's reply (the assistant messages, in order, or
// the reply an agent rejected), each failed one's error.
func ScriptFrom(tr *Trajectory) *Script {
	var replies []Message
	for _, m := range tr.Messages {
		if m.Role == "assistant" {
			replies = append(replies, m)
		}
	}
	s := &Script{}
	for _, t := range tr.Turns {
		var m Message
		switch {
		case len(t.Errors) > 0:
			e := t.Errors[0]
			if strings.Contains(e, ErrContextLength.Error()) {
				e = "context_length"
			}
			s.Turns = append(s.Turns, ScriptTurn{Error: e})
			continue
		case t.Rejected != nil:
			m = *t.Rejected
		case len(replies) > 0:
			m, replies = replies[0], replies[1:]
		default:
			return s
		}
		st := ScriptTurn{Content: m.Content, Reasoning: m.Reasoning, FinishReason: t.FinishReason}
		for _, c := range m.ToolCalls {
			args, _ := json.Marshal(c.Function.Arguments)
			st.ToolCalls = append(st.ToolCalls, ScriptCall{Name: c.Function.Name, Arguments: args})
		}
		s.Turns = append(s.Turns, st)
	}
	return s
}

// ScriptCall is one scripted tool call.
type ScriptCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// LoadScript reads a script file, or a recorded run's transcript.
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("replay script: %w", err)
	}
	var s struct {
		Script
		Trajectory *Trajectory `json:"trajectory"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("replay script %s: %w", path, err)
	}
	if s.Trajectory != nil {
		return ScriptFrom(s.Trajectory), nil
	}
	return &s.Script, nil
}

// Replay is a Model that plays a Script. Each rollout needs its own.
type Replay struct {
	Script *Script
	mu     sync.Mutex
	next   int
}

var _ Model = (*Replay)(nil)

// Complete returns the next scripted turn.
func (r *Replay) Complete(ctx context.Context, _ []Message, _ []Schema) (Reply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	if r.next >= len(r.Script.Turns) {
		return Reply{Message: Message{Role: "assistant", Content: "done"}}, nil
	}
	t := r.Script.Turns[r.next]
	r.next++
	switch t.Error {
	case "":
	case "context_length":
		return Reply{}, fmt.Errorf("%w (replayed)", ErrContextLength)
	default:
		return Reply{}, errors.New(t.Error)
	}
	m := Message{Role: "assistant", Content: t.Content, Reasoning: t.Reasoning}
	for i, c := range t.ToolCalls {
		args := string(c.Arguments)
		var s string
		switch {
		case len(c.Arguments) == 0:
			args = "{}" // no arguments
		case json.Unmarshal(c.Arguments, &s) == nil:
			args = s
		}
		m.ToolCalls = append(m.ToolCalls, ToolCall{ID: fmt.Sprintf("call_%d_%d", r.next, i), Type: "function", Function: FunctionCall{Name: c.Name, Arguments: args}})
	}
	finish := t.FinishReason
	if finish == "" {
		finish = "stop"
	}
	return Reply{Message: m, FinishReason: finish}, nil
}

// Oracle runs the environment's reference solution and keeps what it
// printed in the trajectory, also when it failed.
func Oracle(ctx context.Context, apply func(context.Context) (OracleRun, error)) (Trajectory, error) {
	tr := Trajectory{Agent: "oracle", StopReason: StopOracle}
	run, err := apply(ctx)
	if run.Output != "" || run.ExitCode != nil {
		tr.Oracle = &run
	}
	if err != nil {
		tr.Error = err.Error()
		return tr, err
	}
	return tr, nil
}

// Nop does nothing: it proves the tests fail on an untouched environment.
func Nop() Trajectory { return Trajectory{Agent: "nop", StopReason: StopNop} }
