package agent

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from what the tools answer")

// goldenStep is a tool call whose answer the golden file pins, or (sh) a
// command the test runs in the sandbox itself to set a scene or wait for
// one; its output is not pinned.
type goldenStep struct {
	tool, args string
	sh         string
}

func call(tool, args string) goldenStep { return goldenStep{tool: tool, args: args} }
func sh(cmd string) goldenStep          { return goldenStep{sh: cmd} }

// dockerSandbox is a fresh sandbox of the base image, working in /work.
func dockerSandbox(t testing.TB) sandbox.Sandbox {
	t.Helper()
	sandboxtest.RequireDocker(t)
	be, err := docker.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	sb, err := be.Start(context.Background(), sandbox.Spec{Image: sandboxtest.BaseImage(), Workdir: "/work",
		Labels: map[string]string{sandbox.LabelRun: "agent-golden"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

// The golden answers print times in UTC. Set once, before any test starts
// a goroutine: set in each test, the write raced with the previous test's
// goroutines reading the zone (the race detector crashed reporting it).
func init() { time.Local = time.UTC }

// goldenTools is a toolset with a fixed clock and process session ids
// proc_000000000001, proc_000000000002, ...
func goldenTools(t *testing.T, o ToolOptions) *Toolset {
	t.Helper()
	n := 0
	o.Now = func() time.Time { return time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC) }
	o.NewID = func() string { n++; return fmt.Sprintf("proc_%012d", n) }
	tools, err := NewToolsetWith([]string{"terminal", "file"}, o)
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

// pids are the one thing of an answer the test cannot fix in advance.
var pidRE = regexp.MustCompile(`"pid": \d+`)

// runGolden plays steps in a fresh Docker sandbox and compares every answer,
// byte for byte, with testdata/golden/<name>.txt.
func runGolden(t *testing.T, name string, o ToolOptions, steps []goldenStep) {
	sb := dockerSandbox(t)
	sess := goldenTools(t, o).NewSession(sb)
	ctx := context.Background()
	var b strings.Builder
	for i, st := range steps {
		if st.sh != "" {
			r, err := sb.Exec(ctx, st.sh, sandbox.ExecOptions{Timeout: time.Until(poll.Deadline(t))})
			if err != nil || r.ExitCode != 0 {
				t.Fatalf("step %d: %s: %+v %v", i, st.sh, r, err)
			}
			continue
		}
		out, _ := sess.Dispatch(ctx, ToolCall{ID: fmt.Sprint(i), Type: "function", Function: FunctionCall{Name: st.tool, Arguments: st.args}})
		fmt.Fprintf(&b, "### %s %s\n%s\n", st.tool, st.args, pidRE.ReplaceAllString(out, `"pid": PID`))
	}
	compareGolden(t, name+".txt", b.String())
}

func compareGolden(t *testing.T, file, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", file)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got == string(want) {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("%s differs at line %d:\n got: %q\nwant: %q", path, i+1, gl, wl)
		}
	}
}
