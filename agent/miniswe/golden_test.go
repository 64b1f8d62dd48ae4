package miniswe

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/pystr"
	"github.com/proctor-dev/proctor/sandbox"
)

// golden is testdata/golden.json, written by testdata/gen.py from
// mini-swe-agent's own code with its swebench.yaml.
type golden struct {
	Container string `json:"container"`
	Pieces    struct {
		System   string `json:"system"`
		Instance []struct {
			Task, Text string
		} `json:"instance"`
		Observations []struct {
			Output struct {
				Output        string `json:"output"`
				ReturnCode    int    `json:"returncode"`
				ExceptionInfo string `json:"exception_info"`
			} `json:"output"`
			Text string `json:"text"`
			Role string `json:"role"`
		} `json:"observations"`
		FormatErrors []struct {
			Calls   []call  `json:"calls"`
			Finish  *string `json:"finish"`
			Error   *string `json:"error"`
			Actions []struct {
				Command    any    `json:"command"`
				ToolCallID string `json:"tool_call_id"`
			} `json:"actions"`
		} `json:"format_errors"`
	} `json:"pieces"`
	Runs []goldenRun `json:"runs"`
}

type call struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type message struct {
	Role      string  `json:"role"`
	Content   *string `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

type goldenRun struct {
	Name   string `json:"name"`
	Config struct {
		Agent struct {
			StepLimit int `json:"step_limit"`
		} `json:"agent"`
	} `json:"config"`
	Events []struct {
		LLM   []message       `json:"llm"`
		Tools json.RawMessage `json:"tools"`
		Reply struct {
			Content   *string `json:"content"`
			ToolCalls []call  `json:"tool_calls"`
			Finish    string  `json:"finish"`
			Cost      float64 `json:"cost"`
			Raise     string  `json:"raise"`
		} `json:"reply"`
		Exec    *string  `json:"exec"`
		Cwd     string   `json:"cwd"`
		Env     []string `json:"env"`
		Timeout float64  `json:"timeout"`
		Result  struct {
			Raw     string `json:"raw"`
			RC      int    `json:"rc"`
			Timeout bool   `json:"timeout"`
		} `json:"result"`
	} `json:"events"`
	End struct {
		ExitStatus string  `json:"exit_status"`
		Submission *string `json:"submission"`
		Exception  string  `json:"exception"`
	} `json:"end"`
	Messages []message `json:"messages"`
	Calls    int       `json:"calls"`
}

func readGolden(t testing.TB) golden {
	t.Helper()
	b, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func toolCalls(cs []call) []agent.ToolCall {
	var out []agent.ToolCall
	for _, c := range cs {
		out = append(out, agent.ToolCall{ID: c.ID, Type: "function", Function: agent.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
	}
	return out
}

// TestPiecesMatchMiniSWEAgent: the first two messages, the observations and
// the format errors, byte for byte as mini-swe-agent's templates and
// parser made them.
func TestPiecesMatchMiniSWEAgent(t *testing.T) {
	g := readGolden(t)
	p := g.Pieces
	if System() != p.System {
		t.Errorf("system: %q, want %q", System(), p.System)
	}
	for _, c := range p.Instance {
		if got := Instance(c.Task); got != c.Text {
			t.Errorf("instance of %q differs:\n%s", c.Task, firstDiff(got, c.Text))
		}
	}
	for i, c := range p.Observations {
		o := output{Output: c.Output.Output, ReturnCode: c.Output.ReturnCode, ExceptionInfo: c.Output.ExceptionInfo}
		if got := observation(o, -1, "", ""); got != c.Text || c.Role != "tool" {
			t.Errorf("observation %d differs:\n%s", i, firstDiff(got, c.Text))
		}
	}
	if len(p.FormatErrors) < 40 {
		t.Fatalf("%d format-error cases", len(p.FormatErrors))
	}
	for i, c := range p.FormatErrors {
		acts, ferr := parseActions(agent.Reply{Message: agent.Message{ToolCalls: toolCalls(c.Calls)}, FinishReason: str(c.Finish)})
		if ferr != str(c.Error) {
			t.Errorf("case %d (%+v, %v):\n%s", i, c.Calls, str(c.Finish), firstDiff(ferr, str(c.Error)))
			continue
		}
		for k, a := range c.Actions {
			if k >= len(acts) || !reflect.DeepEqual(acts[k].command, a.Command) && fmt.Sprint(acts[k].command) != fmt.Sprint(a.Command) || acts[k].id != a.ToolCallID {
				t.Errorf("case %d action %d: %+v, want %+v", i, k, acts, c.Actions)
			}
		}
	}
}

func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("at byte %d:\n got %q\nwant %q", i, pystr.Head(got[i:], 80), pystr.Head(want[i:], 80))
}

// replay serves a run's events to the Go agent in order and fails the test
// at the first that differs.
type replay struct {
	t    *testing.T
	run  goldenRun
	id   string
	next int
}

func (r *replay) ID() string { return r.id }

func (r *replay) take(what string) int {
	r.t.Helper()
	if r.next >= len(r.run.Events) {
		r.t.Fatalf("mini-swe-agent's run had ended; proctor made another %s", what)
	}
	r.next++
	return r.next - 1
}

func (r *replay) Complete(ctx context.Context, msgs []agent.Message, tools []agent.Schema) (agent.Reply, error) {
	r.t.Helper()
	i := r.take("model call")
	e := r.run.Events[i]
	if e.LLM == nil {
		r.t.Fatalf("event %d: proctor called the model, mini-swe-agent ran %q", i, str(e.Exec))
	}
	sameMessages(r.t, fmt.Sprintf("event %d", i), msgs, e.LLM)
	var want, got any
	json.Unmarshal(e.Tools, &want)
	b, _ := json.Marshal(tools)
	json.Unmarshal(b, &got)
	if !reflect.DeepEqual(got, want) {
		r.t.Fatalf("event %d: tools %s, want %s", i, b, e.Tools)
	}
	rep := e.Reply
	if rep.Raise == "context" {
		return agent.Reply{}, fmt.Errorf("%w: scripted", agent.ErrContextLength)
	}
	finish := rep.Finish
	if finish == "" {
		finish = map[bool]string{true: "tool_calls", false: "stop"}[len(rep.ToolCalls) > 0]
	}
	cost := rep.Cost
	if cost == 0 {
		cost = 0.5
	}
	return agent.Reply{Message: agent.Message{Role: "assistant", Content: str(rep.Content), ToolCalls: toolCalls(rep.ToolCalls)},
		FinishReason: finish, Usage: agent.Usage{PromptTokens: int64(cost * 1e6)}}, nil
}

func sameMessages(t *testing.T, where string, got []agent.Message, want []message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", where, len(got), len(want))
	}
	for k, m := range got {
		w := want[k]
		ok := m.Role == w.Role && m.Content == str(w.Content) && m.ToolCallID == w.ToolCallID && len(m.ToolCalls) == len(w.ToolCalls)
		for j := 0; ok && j < len(m.ToolCalls); j++ {
			ok = m.ToolCalls[j].ID == w.ToolCalls[j].ID && m.ToolCalls[j].Function.Name == w.ToolCalls[j].Function.Name &&
				m.ToolCalls[j].Function.Arguments == w.ToolCalls[j].Function.Arguments
		}
		if !ok {
			t.Fatalf("%s, message %d (%s):\n%s", where, k, m.Role, firstDiff(fmt.Sprintf("%s %+v %s", m.Content, m.ToolCalls, m.ToolCallID), fmt.Sprintf("%s %+v %s", str(w.Content), w.ToolCalls, w.ToolCallID)))
		}
	}
}

func (r *replay) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	r.t.Helper()
	if cmd == "test -d /testbed && echo /testbed || pwd" {
		return sandbox.ExecResult{Stdout: "/testbed\n"}, nil
	}
	i := r.take("command")
	e := r.run.Events[i]
	if e.Exec == nil || cmd != "exec bash -c "+pystr.Quote(*e.Exec)+" 2>&1" {
		r.t.Fatalf("event %d: proctor ran %q, mini-swe-agent %q", i, cmd, str(e.Exec))
	}
	var env []string
	for k, v := range o.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	want := slices.Sorted(slices.Values(e.Env))
	if !o.Fresh || o.Workdir != e.Cwd || !slices.Equal(env, want) || o.Timeout != time.Duration(e.Timeout*float64(time.Second)) {
		r.t.Fatalf("event %d: %+v, want cwd %s env %v timeout %v", i, o, e.Cwd, want, e.Timeout)
	}
	raw, _ := base64.StdEncoding.DecodeString(e.Result.Raw)
	if e.Result.Timeout {
		return sandbox.ExecResult{Stdout: string(raw), ExitCode: 137, TimedOut: true}, nil
	}
	return sandbox.ExecResult{Stdout: string(raw), ExitCode: e.Result.RC}, nil
}

func (r *replay) ReadFile(context.Context, string, int64) ([]byte, int64, error) {
	return nil, 0, errors.New("not used")
}

func (r *replay) WriteFile(context.Context, string, []byte, fs.FileMode) error {
	return errors.New("not used")
}

// TestRunsMatchMiniSWEAgent replays each run mini-swe-agent's DefaultAgent
// made (testdata/gen.py): every request must carry the same messages and
// tool, every command run in the same directory with the same variables
// and timeout, and the run end as it did, with the same submission.
func TestRunsMatchMiniSWEAgent(t *testing.T) {
	g := readGolden(t)
	if len(g.Runs) < 8 {
		t.Fatalf("%d runs", len(g.Runs))
	}
	stops := map[string]string{"Submitted": StopSubmitted, "LimitsExceeded": StopLimitsExceeded, "RepeatedFormatError": StopFormatErrors}
	for _, run := range g.Runs {
		t.Run(run.Name, func(t *testing.T) {
			r := &replay{t: t, run: run, id: g.Container}
			a := &Agent{Model: r, Name: "scripted", Opts: Options{StepLimit: run.Config.Agent.StepLimit,
				Cost: func(u agent.Usage) float64 { return float64(u.PromptTokens) / 1e6 }}}
			tr, err := a.Run(context.Background(), r, "Make m.py set x to 2.")
			if run.End.Exception != "" {
				if !strings.HasPrefix(run.End.Exception, "ContextWindowExceededError") || err != nil || tr.StopReason != agent.StopContextLength {
					t.Fatalf("proctor: %v (%s), mini-swe-agent: %s", err, tr.StopReason, run.End.Exception)
				}
			} else if err != nil || tr.StopReason != stops[run.End.ExitStatus] {
				t.Fatalf("proctor: %v (%s), mini-swe-agent: %s", err, tr.StopReason, run.End.ExitStatus)
			}
			if run.End.ExitStatus == "Submitted" && (tr.Submission == nil || *tr.Submission != str(run.End.Submission)) {
				t.Errorf("submission %v, want %q", tr.Submission, str(run.End.Submission))
			}
			if r.next != len(run.Events) {
				t.Fatalf("proctor stopped after %d of %d events", r.next, len(run.Events))
			}
			sameMessages(t, "the conversation", tr.Messages, run.Messages)
			if len(tr.Turns) != run.Calls {
				t.Errorf("%d model calls, want %d", len(tr.Turns), run.Calls)
			}
		})
	}
}

func FuzzParseActions(f *testing.F) {
	f.Add("bash", `{"command": "ls"}`, "stop")
	f.Add("bash", `{"command": 5`, "length")
	f.Add("python", `[]`, "tool_calls")
	f.Fuzz(func(t *testing.T, name, args, finish string) {
		acts, ferr := parseActions(agent.Reply{Message: agent.Message{ToolCalls: []agent.ToolCall{{ID: "c", Function: agent.FunctionCall{Name: name, Arguments: args}}}}, FinishReason: finish})
		if (ferr == "") == (len(acts) == 0) {
			t.Fatalf("actions %v and error %q", acts, ferr)
		}
	})
}
