package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/local"
)

// benchBackends are the sandboxes the tool benchmarks run against: the
// local backend always, Docker when an engine answers.
func benchBackends(b *testing.B) map[string]func(b *testing.B) sandbox.Sandbox {
	m := map[string]func(b *testing.B) sandbox.Sandbox{
		"local": func(b *testing.B) sandbox.Sandbox {
			sb, err := local.Backend{}.Start(context.Background(), sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sb.Close(context.Background()) })
			return sb
		},
	}
	m["docker"] = func(b *testing.B) sandbox.Sandbox { return dockerSandbox(b) }
	return m
}

// benchCall measures one tool call through the tool layer and reports the
// median, which one slow outlier on a shared machine does not skew.
func benchCall(b *testing.B, name, args string, setup string) {
	for _, be := range []string{"local", "docker"} {
		b.Run(be, func(b *testing.B) {
			sb := benchBackends(b)[be](b)
			ctx := context.Background()
			if setup != "" {
				if _, err := sb.Exec(ctx, setup, sandbox.ExecOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			tools, _ := NewToolset([]string{"terminal", "file"})
			call := ToolCall{ID: "c", Type: "function", Function: FunctionCall{Name: name, Arguments: args}}
			var d []time.Duration
			for b.Loop() {
				// A session per call: hermes answers a fourth identical
				// read in a row with a refusal.
				sess := tools.NewSession(sb)
				t0 := time.Now()
				out, failed := sess.Dispatch(ctx, call)
				d = append(d, time.Since(t0))
				if failed || !strings.Contains(out, "hello") {
					b.Fatalf("%s: %s", name, out)
				}
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2])/1e6, "median-ms/op")
		})
	}
}

// BenchmarkTerminalCall is one terminal call, end to end, in a real sandbox.
func BenchmarkTerminalCall(b *testing.B) {
	benchCall(b, "terminal", `{"command": "echo hello"}`, "")
}

// BenchmarkReadFileCall is one read_file of a 100-line file, end to end.
func BenchmarkReadFileCall(b *testing.B) {
	benchCall(b, "read_file", `{"path": "bench.txt"}`, `for i in $(seq 100); do echo "hello line $i"; done > bench.txt`)
}
