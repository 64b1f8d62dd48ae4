package hermes

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/sandbox"
)

// fakeShell answers every command at once: each step of a batch with out
// and exit code 0, anything else with out.
type fakeShell struct{ out string }

var markRE = regexp.MustCompile(`printf '%s%d\\n' '(\n@@HERMES-[0-9a-f]+ )'`)

func (f fakeShell) Exec(_ context.Context, cmd string, _ sandbox.ExecOptions) (sandbox.ExecResult, error) {
	marks := markRE.FindAllStringSubmatch(cmd, -1)
	if len(marks) == 0 {
		return sandbox.ExecResult{Stdout: f.out}, nil
	}
	var b strings.Builder
	for _, m := range marks {
		b.WriteString(f.out + m[1] + "0\n")
	}
	return sandbox.ExecResult{Stdout: b.String()}, nil
}

// FuzzCall: whatever the arguments, every tool answers without panicking,
// and the answer is a JSON object (then, for search and patch, hermes'
// hint text), or the previous answer again.
func FuzzCall(f *testing.F) {
	for _, s := range []string{`{"command": "ls"}`, `{"command": `, ``, `null`, `[1]`, `{"path": "a", "offset": "1", "limit": 2.5}`,
		`{"action": "log", "session_id": "proc_1", "offset": -3, "limit": true}`, `{"mode": "patch", "patch": "*** Update File: a\n-x\n+y"}`,
		`{"pattern": "x", "target": "files", "limit": 1e400}`, `{"path": "a", "old_string": "x", "new_string": 5}`, `{"content": {"a": [1]}}`,
		`{"command": "x", "background": 1, "check_interval": "7"}`, `{"action": "wait", "session_id": 1, "timeout": NaN}`} {
		f.Add(s, "1:42\nx\n")
	}
	tools, err := New([]string{"terminal", "file"}, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args, out string) {
		s := tools.NewSession(fakeShell{out})
		var last string
		for _, name := range append(tools.Names(), "nope") {
			timer := time.AfterFunc(5*time.Second, func() { panic(fmt.Sprintf("%s(%q) with output %q runs over 5s", name, args, out)) })
			got, _ := s.Call(context.Background(), name, args)
			timer.Stop()
			if got == last {
				continue
			}
			last = got
			body, _, _ := strings.Cut(got, "\n\n[Hint: ")
			v, err := pyjson.Decode(body)
			if err != nil {
				t.Fatalf("%s(%q) answered %q: not JSON: %v", name, args, got, err)
			}
			if _, ok := v.(*pyjson.Object); !ok {
				t.Fatalf("%s(%q) answered %q: not an object", name, args, got)
			}
		}
	})
}

// FuzzParseV4A: the patch parser never panics, and every line of a hunk
// comes from a line of the patch.
func FuzzParseV4A(f *testing.F) {
	for _, s := range []string{
		"*** Begin Patch\n*** Update File: a.py\n@@ def f @@\n x\n-y\n+z\n*** End Patch",
		"*** Add File: n.txt\n+a\n+b", "*** Move File: a -> b\n*** Delete File: c", "@@@@\n\\ No newline", "*** Update File:  \n\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, patch string) {
		lines := strings.Count(patch, "\n") + 1
		n := 0
		for _, op := range parseV4A(patch) {
			for _, h := range op.hunks {
				n += len(h.lines)
				for _, l := range h.lines {
					if !strings.Contains(patch, l.content) {
						t.Fatalf("hunk line %q is not in the patch", l.content)
					}
				}
			}
		}
		if n > lines {
			t.Fatalf("%d hunk lines from %d lines", n, lines)
		}
	})
}
