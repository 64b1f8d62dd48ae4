package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
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
	  {"tool_calls":[{"name":"terminal","arguments":{"command":"pwd && cat app.py"}}]},
	  {"tool_calls":[{"name":"read_file","arguments":{"path":"proj/app.py"}}, {"name":"search_files","arguments":{"pattern":"y = ","path":"."}}]},
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
	want := []string{"hi", "bytes_written", "+y = 3", "Unknown tool 'nope'. Available tools:", "Invalid JSON in tool arguments", "/proj\\nx = 1", "     2|y = 3", "app.py:2:y = 3"}
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

func TestTruncate(t *testing.T) {
	s := strings.Repeat("a", 40000) + strings.Repeat("b", 60000)
	got := Truncate(s, 50000)
	if !strings.HasPrefix(got, strings.Repeat("a", 20000)+"\n") || !strings.HasSuffix(got, strings.Repeat("b", 30000)) || !strings.Contains(got, "50000 chars omitted") {
		t.Fatalf("truncation kept the wrong parts")
	}
}

type nopShell struct{}

func (nopShell) Exec(context.Context, string, sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, nil
}
func (nopShell) ReadFile(context.Context, string, int64) ([]byte, int64, error) {
	return []byte("a\nb\n"), 4, nil
}
func (nopShell) WriteFile(context.Context, string, []byte, fs.FileMode) error { return nil }

func FuzzDecodeArgs(f *testing.F) {
	f.Add(`{"command":"ls"}`)
	f.Add(`{"command": `)
	f.Add(``)
	f.Add(`[1,2]`)
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := DecodeArgs(s)
		if err != nil {
			return
		}
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			t.Fatalf("accepted %q, which is not an object", s)
		}
		tools, _ := NewToolset([]string{"terminal", "file"})
		for _, tl := range tools.tools {
			// Decoding into each tool's arguments must not panic.
			tl.run(context.Background(), nopShell{}, raw)
		}
	})
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
