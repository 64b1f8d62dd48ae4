package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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
type Script struct {
	Turns []ScriptTurn `json:"turns"`
}

// ScriptTurn is one scripted assistant message.
type ScriptTurn struct {
	Content   string       `json:"content"`
	Reasoning string       `json:"reasoning,omitempty"`
	ToolCalls []ScriptCall `json:"tool_calls,omitempty"`
}

// ScriptCall is one scripted tool call.
type ScriptCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// LoadScript reads a script file.
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("replay script: %w", err)
	}
	var s Script
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("replay script %s: %w", path, err)
	}
	return &s, nil
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
	return Reply{Message: m}, nil
}

// OracleRun is what applying a task's reference solution printed, and its
// exit code when it ran to its end.
type OracleRun struct {
	Output   string `json:"output"`
	ExitCode *int   `json:"exit_code,omitempty"`
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
