package agent

import (
	"context"

	"github.com/proctor-dev/proctor/agent/hermes"
)

// Toolset is the tools offered to the model: hermes-agent's terminal and
// file tools, as its Terminal-Bench 2 and SWE environments give them (see
// agent/hermes and docs/tools.md).
type Toolset struct {
	h *hermes.Toolset
}

// ToolOptions tune the tools (hermes' TERMINAL_TIMEOUT, and for tests the
// clock and the process session ids).
type ToolOptions = hermes.Options

// Toolsets names the selectable groups.
var Toolsets = hermes.Toolsets

// NewToolset selects tools by toolset name ("terminal", "file").
func NewToolset(sets []string) (*Toolset, error) { return NewToolsetWith(sets, ToolOptions{}) }

// NewToolsetWith selects tools by toolset name, with options.
func NewToolsetWith(sets []string, o ToolOptions) (*Toolset, error) {
	h, err := hermes.New(sets, o)
	if err != nil {
		return nil, err
	}
	return &Toolset{h: h}, nil
}

// noTools is what the zero Toolset offers.
var noTools, _ = hermes.New(nil, ToolOptions{})

// tools is the hermes toolset; the zero Toolset has no tools.
func (t *Toolset) tools() *hermes.Toolset {
	if t.h == nil {
		return noTools
	}
	return t.h
}

// Names lists the tools, in the order the model is told of them.
func (t *Toolset) Names() []string { return t.tools().Names() }

// Schemas are the tool definitions sent to the model.
func (t *Toolset) Schemas() []Schema {
	var s []Schema
	for _, d := range t.tools().Definitions() {
		s = append(s, Schema{Type: "function", Function: SchemaFunction{Name: d.Name, Description: d.Description, Parameters: d.Parameters}})
	}
	return s
}

// Session is one rollout's use of the tools: it keeps what hermes keeps
// between calls (background processes, repeated-read counts, the last
// answer).
type Session struct {
	s *hermes.Session
}

// NewSession starts a rollout's tool session on sh.
func (t *Toolset) NewSession(sh Shell) *Session { return &Session{s: t.tools().NewSession(sh)} }

// Dispatch runs one tool call and returns what the model sees, exactly:
// an unknown tool or arguments that are not JSON are answered as hermes'
// loop answers them, never dispatched. failed is set when the call was
// refused or the tool reported an error.
func (s *Session) Dispatch(ctx context.Context, call ToolCall) (out string, failed bool) {
	return s.s.Call(ctx, call.Function.Name, call.Function.Arguments)
}
