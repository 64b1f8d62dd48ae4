package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestScriptFromRecordedRun: a recorded transcript replays its model calls
// as they were answered: the kept replies in order, a reply the agent
// rejected, a reply cut at the output limit, and failed calls, the full
// context apart from the endpoint's failures.
func TestScriptFromRecordedRun(t *testing.T) {
	tr := &Trajectory{
		Messages: []Message{
			{Role: "user", Content: "go"},
			{Role: "assistant", Content: "first", Reasoning: "hmm", ToolCalls: []ToolCall{{ID: "c1", Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"command": "ls"`}}}},
			{Role: "tool", ToolCallID: "c1", Content: "out"},
			{Role: "assistant", Content: "cut"},
		},
		Turns: []Turn{
			{Index: 0},
			{Index: 1, Rejected: &Message{Role: "assistant", Content: "no tool call"}},
			{Index: 2, Errors: []string{"context length exceeded: too long"}},
			{Index: 3, Errors: []string{"model endpoint: HTTP 500: boom"}},
			{Index: 4, FinishReason: "length"},
		},
	}
	dir := t.TempDir()
	b, _ := json.Marshal(Transcript{RolloutID: "r#0", Trajectory: tr})
	path := filepath.Join(dir, "r#0.json")
	os.WriteFile(path, b, 0o644)
	s, err := LoadScript(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &Replay{Script: s}
	ctx := context.Background()
	first, err := r.Complete(ctx, nil, nil)
	if err != nil || first.Message.Content != "first" || first.Message.Reasoning != "hmm" || first.FinishReason != "stop" ||
		len(first.Message.ToolCalls) != 1 || first.Message.ToolCalls[0].Function.Arguments != `{"command": "ls"` {
		t.Fatalf("first: %+v %v", first, err)
	}
	if rej, err := r.Complete(ctx, nil, nil); err != nil || rej.Message.Content != "no tool call" {
		t.Fatalf("rejected: %+v %v", rej, err)
	}
	if _, err := r.Complete(ctx, nil, nil); !errors.Is(err, ErrContextLength) {
		t.Fatalf("context: %v", err)
	}
	if _, err := r.Complete(ctx, nil, nil); err == nil || errors.Is(err, ErrContextLength) || err.Error() != "model endpoint: HTTP 500: boom" {
		t.Fatalf("endpoint failure: %v", err)
	}
	if cut, err := r.Complete(ctx, nil, nil); err != nil || cut.Message.Content != "cut" || cut.FinishReason != "length" {
		t.Fatalf("cut: %+v %v", cut, err)
	}
}
