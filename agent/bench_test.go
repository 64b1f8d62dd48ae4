package agent

import (
	"context"
	"encoding/json"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

// instantModel answers at once: n turns of one terminal call, then done.
type instantModel struct{ n, i int }

func (m *instantModel) Complete(context.Context, []Message, []Schema) (Reply, error) {
	m.i++
	if m.i > m.n {
		return Reply{Message: Message{Content: "done"}}, nil
	}
	return Reply{Message: Message{ToolCalls: []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "terminal", Arguments: `{"command":"true"}`}}}}}, nil
}

// outShell returns a fixed output at once.
type outShell struct{ out string }

func (s outShell) Exec(context.Context, string, sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{Stdout: s.out}, nil
}
func (outShell) ReadFile(context.Context, string, int64) ([]byte, int64, error) { return nil, 0, nil }
func (outShell) WriteFile(context.Context, string, []byte, fsMode) error        { return nil }

// BenchmarkLoopTurn: the loop's own cost per turn, with a model and a
// shell that take no time.
func BenchmarkLoopTurn(b *testing.B) {
	tools, _ := NewToolset([]string{"terminal", "file"})
	const turns = 60
	b.ResetTimer()
	for b.Loop() {
		l := &Loop{Model: &instantModel{n: turns}, Tools: tools, MaxTurns: turns + 1}
		if _, err := l.Run(context.Background(), outShell{"ok\n"}, "go"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/turns, "µs/turn")
}

// BenchmarkTrajectory60x50KB: memory of a 60-turn trajectory whose tool
// outputs are 50 KB each.
func BenchmarkTrajectory60x50KB(b *testing.B) {
	tools, _ := NewToolset([]string{"terminal"})
	out := strings.Repeat("x", 50_000)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		l := &Loop{Model: &instantModel{n: 60}, Tools: tools, MaxTurns: 61}
		tr, _ := l.Run(context.Background(), outShell{out}, "go")
		runtime.ReadMemStats(&after)
		js, _ := json.Marshal(tr)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1e6, "MB-heap")
		b.ReportMetric(float64(len(js))/1e6, "MB-json")
	}
}

// BenchmarkTerminalTool: a terminal call end to end over a shell whose
// Exec takes 1 ms, to compare with that 1 ms.
func BenchmarkTerminalTool(b *testing.B) {
	tools, _ := NewToolset([]string{"terminal"})
	call := ToolCall{ID: "c", Type: "function", Function: FunctionCall{Name: "terminal", Arguments: `{"command":"ls -la","timeout":30}`}}
	sess := tools.NewSession(sleepShell{time.Millisecond})
	for b.Loop() {
		sess.Dispatch(context.Background(), call)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)-1000, "µs-over-exec")
}

type sleepShell struct{ d time.Duration }

func (s sleepShell) Exec(context.Context, string, sandbox.ExecOptions) (sandbox.ExecResult, error) {
	time.Sleep(s.d)
	return sandbox.ExecResult{Stdout: "total 0\n"}, nil
}
func (sleepShell) ReadFile(context.Context, string, int64) ([]byte, int64, error) { return nil, 0, nil }
func (sleepShell) WriteFile(context.Context, string, []byte, fsMode) error        { return nil }

type fsMode = fs.FileMode
