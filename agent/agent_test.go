package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/local"
)

func localShell(t *testing.T) sandbox.Sandbox {
	sb, err := local.Backend{}.Start(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

func script(t *testing.T, s string) *Replay {
	var sc Script
	if err := json.Unmarshal([]byte(s), &sc); err != nil {
		t.Fatal(err)
	}
	return &Replay{Script: &sc}
}

func TestLoopWithToolsAndBadCalls(t *testing.T) {
	sb := localShell(t)
	tools, _ := NewToolset([]string{"terminal", "file"})
	l := &Loop{Model: script(t, `{"turns":[
	  {"reasoning":"look first","tool_calls":[{"name":"terminal","arguments":{"command":"mkdir -p proj && cd proj && echo hi"}}]},
	  {"tool_calls":[{"name":"write_file","arguments":{"path":"proj/app.py","content":"x = 1\ny = 2\n"}}]},
	  {"tool_calls":[{"name":"patch","arguments":{"path":"proj/app.py","old_string":"y = 2","new_string":"y = 3"}}]},
	  {"tool_calls":[{"name":"nope","arguments":{}},{"name":"terminal","arguments":"{\"command\": "}]},
	  {"tool_calls":[{"name":"terminal","arguments":{"command":"cat app.py"}}]},
	  {"tool_calls":[{"name":"read_file","arguments":{"path":"proj/app.py"}}, {"name":"search_files","arguments":{"pattern":"y = ","path":"proj"}}]},
	  {"content":"finished"}]}`), Tools: tools, MaxTurns: 20, System: "be brief"}
	tr, err := l.Run(context.Background(), sb, "do it")
	if err != nil {
		t.Fatal(err)
	}
	if tr.StopReason != StopDone || len(tr.Turns) != 7 {
		t.Fatalf("stop %s after %d turns", tr.StopReason, len(tr.Turns))
	}
	got, _, _ := sb.ReadFile(context.Background(), "proj/app.py", 0)
	if string(got) != "x = 1\ny = 3\n" {
		t.Fatalf("file after the edits: %q", got)
	}
	var tool []string
	for _, m := range tr.Messages {
		if m.Role == "tool" {
			tool = append(tool, m.Content)
		}
	}
	// hermes runs every command from the working directory: the cd of the
	// first call is gone by the fifth.
	want := []string{`"output": "hi"`, `"bytes_written": 12, "dirs_created": true`, `+y = 3`, "Unknown tool 'nope'. Available tools: ['patch', 'process', 'read_file', 'search_files', 'terminal', 'write_file']",
		"Invalid JSON in tool arguments: Expecting value: line 1 column 13 (char 12)", `cat: app.py: No such file or directory`, `     2|y = 3`, `{"path": "proj/app.py", "line": 2, "content": "y = 3"}`}
	for i, w := range want {
		if i >= len(tool) || !strings.Contains(tool[i], w) {
			t.Errorf("tool result %d: want %q in %q", i, w, tool[min(i, len(tool)-1)])
		}
	}
	if tr.Messages[0].Role != "system" || tr.Messages[2].Reasoning != "look first" {
		t.Errorf("system prompt or reasoning lost: %+v", tr.Messages[:3])
	}
}

func TestMaxTurns(t *testing.T) {
	sb := localShell(t)
	tools, _ := NewToolset([]string{"terminal"})
	turns := strings.Repeat(`{"tool_calls":[{"name":"terminal","arguments":{"command":"true"}}]},`, 5)
	l := &Loop{Model: script(t, `{"turns":[`+strings.TrimSuffix(turns, ",")+`]}`), Tools: tools, MaxTurns: 3}
	tr, err := l.Run(context.Background(), sb, "go")
	if err != nil || tr.StopReason != StopMaxTurns || len(tr.Turns) != 3 {
		t.Fatalf("%v %s %d", err, tr.StopReason, len(tr.Turns))
	}
}

// hugeModel answers every turn with size bytes of text and a tool call.
type hugeModel struct{ size int }

func (m hugeModel) Complete(context.Context, []Message, []Schema) (Reply, error) {
	return Reply{Message: Message{Content: strings.Repeat("a", m.size),
		ToolCalls: []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "terminal", Arguments: `{"command":"true"}`}}}}}, nil
}

// TestTranscriptIsBounded: an endpoint that answers 10 MiB a turn ends the
// loop once the trajectory is past MaxTranscript (60 turns of it were
// 600 MB held and sent again each turn), as the agent's outcome.
func TestTranscriptIsBounded(t *testing.T) {
	tools, _ := NewToolset([]string{"terminal"})
	l := &Loop{Model: hugeModel{10 << 20}, Tools: tools, MaxTurns: 60}
	tr, err := l.Run(context.Background(), localShell(t), "go")
	if err != nil || tr.StopReason != StopTranscriptLimit || len(tr.Turns) != MaxTranscript/(10<<20)+1 {
		t.Fatalf("%v: stop %s after %d turns", err, tr.StopReason, len(tr.Turns))
	}
}

// TestLargeAnswersStayJSON: an answer is truncated once, by characters,
// inside the tool, and always reaches the model as whole JSON. Before,
// answers over 50,000 characters were cut again after encoding: a
// 2,000-line read_file arrived cut mid-JSON while saying "truncated":
// false, and long terminal output carried two notices and a wrong count.
func TestLargeAnswersStayJSON(t *testing.T) {
	sb := localShell(t)
	ctx := context.Background()
	if _, err := sb.Exec(ctx, `x=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; for i in $(seq 1 2000); do printf 'line %04d %s\n' $i $x; done > big.txt`, sandbox.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	tools, _ := NewToolset([]string{"terminal", "file"})
	s := tools.NewSession(sb)
	do := func(name, args string) map[string]any {
		out, _ := s.Dispatch(ctx, ToolCall{Function: FunctionCall{Name: name, Arguments: args}})
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%s %s: the answer (%d bytes) is not JSON: %v", name, args, len(out), err)
		}
		return m
	}
	r := do("read_file", `{"path": "big.txt", "limit": 2000}`)
	content := r["content"].(string)
	if n := strings.Count(content, "\n"); n != 2000 || r["truncated"] != false || !strings.Contains(content, "  2000|line 2000 ") {
		t.Errorf("read_file of 2,000 lines: %d line ends, truncated %v", n, r["truncated"])
	}
	r = do("terminal", `{"command": "cat big.txt big.txt"}`)
	out := r["output"].(string)
	if strings.Count(out, "OUTPUT TRUNCATED") != 1 || !strings.Contains(out, "[OUTPUT TRUNCATED - 154000 chars omitted out of 204000 total]") ||
		!strings.HasPrefix(out, "line 0001 ") || !strings.HasSuffix(out, "line 2000 "+strings.Repeat("x", 40)) {
		t.Errorf("terminal: %d characters, notice %q", len([]rune(out)), out[19990:20100])
	}
}

// TestOracleKeepsOutput: what the reference solution printed, and its exit
// code, stay in the trajectory, also when applying it failed.
func TestOracleKeepsOutput(t *testing.T) {
	code := 3
	tr, err := Oracle(context.Background(), func(context.Context) (OracleRun, error) {
		return OracleRun{Output: "solved\n", ExitCode: &code}, nil
	})
	if err != nil || tr.Oracle == nil || tr.Oracle.Output != "solved\n" || *tr.Oracle.ExitCode != 3 || tr.StopReason != StopOracle {
		t.Fatalf("%+v %v", tr, err)
	}
	tr, err = Oracle(context.Background(), func(context.Context) (OracleRun, error) {
		return OracleRun{Output: "half"}, errors.New("timed out")
	})
	if err == nil || tr.Oracle == nil || tr.Oracle.Output != "half" || tr.Error != "timed out" {
		t.Fatalf("%+v %v", tr, err)
	}
	b, _ := json.Marshal(tr)
	if !strings.Contains(string(b), `"oracle":{"output":"half"}`) {
		t.Fatalf("%s", b)
	}
}
