package terminus

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
	"github.com/proctor-dev/proctor/sandbox"
)

// scenario is one of testdata/scenarios.json: a whole run of Harbor's
// Terminus2 against a scripted model and terminal, as the events it gave
// rise to, in order.
type scenario struct {
	Name         string         `json:"name"`
	Parser       string         `json:"parser"`
	Kwargs       map[string]any `json:"kwargs"`
	ContextLimit int            `json:"context_limit"`
	OutputLimit  *int           `json:"output_limit"`
	Instruction  string         `json:"instruction"`
	Events       []event        `json:"events"`
	End          string         `json:"end"`
}

type event struct {
	Exec  *string `json:"exec"`
	Out   string  `json:"out"`
	RC    int     `json:"rc"`
	Sleep *string `json:"sleep"`
	LLM   []struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		Reasoning string `json:"reasoning_content"`
	} `json:"llm"`
	Reply struct {
		Content   string `json:"content"`
		Reasoning string `json:"reasoning"`
		Finish    string `json:"finish"`
		Raise     string `json:"raise"`
	} `json:"reply"`
}

func (e event) String() string {
	switch {
	case e.Exec != nil:
		return "exec " + pyjson.Repr(*e.Exec)
	case e.Sleep != nil:
		return "sleep " + *e.Sleep
	}
	return fmt.Sprintf("model call with %d messages", len(e.LLM))
}

// replay serves a scenario's events to the Go agent, in order, and
// fails the test at the first that differs.
type replay struct {
	t    *testing.T
	evs  []event
	next int
}

func (r *replay) take(kind string) (event, bool) {
	r.t.Helper()
	if r.next >= len(r.evs) {
		r.t.Errorf("Harbor's run had ended; proctor made another %s", kind)
		return event{}, false
	}
	e := r.evs[r.next]
	r.next++
	return e, true
}

// harborCommand: the commands of Harbor's that proctor must send alike
// (gen.py's filter): the session and its tmux commands, not the probes.
func harborCommand(cmd string) bool {
	return (strings.HasPrefix(cmd, "tmux ") || strings.HasPrefix(cmd, "export TERM")) && cmd != "tmux -V" &&
		!strings.HasPrefix(cmd, "tmux display-message")
}

func (r *replay) Exec(ctx context.Context, cmd string, _ sandbox.ExecOptions) (sandbox.ExecResult, error) {
	r.t.Helper()
	if !harborCommand(cmd) {
		if strings.HasPrefix(cmd, "tmux display-message") {
			return sandbox.ExecResult{Stdout: "0\n"}, nil
		}
		return sandbox.ExecResult{}, nil
	}
	e, ok := r.take("command " + pyjson.Repr(cmd))
	if !ok {
		return sandbox.ExecResult{ExitCode: 1}, nil
	}
	if e.Exec == nil || *e.Exec != cmd {
		r.t.Fatalf("event %d: proctor sent %s, Harbor's next was %s", r.next-1, pyjson.Repr(pystr.Head(cmd, 300)), e)
	}
	return sandbox.ExecResult{Stdout: e.Out, ExitCode: e.RC}, nil
}

func (r *replay) ReadFile(context.Context, string, int64) ([]byte, int64, error) {
	return nil, 0, errors.New("not used")
}

func (r *replay) WriteFile(context.Context, string, []byte, fs.FileMode) error {
	return errors.New("not used")
}

func (r *replay) Complete(ctx context.Context, msgs []agent.Message, tools []agent.Schema) (agent.Reply, error) {
	r.t.Helper()
	e, ok := r.take("model call")
	if !ok {
		return agent.Reply{}, errors.New("no more replies")
	}
	if e.LLM == nil {
		r.t.Fatalf("event %d: proctor called the model, Harbor's next was %s", r.next-1, e)
	}
	if len(msgs) != len(e.LLM) || len(tools) != 0 {
		r.t.Fatalf("event %d: proctor sent %d messages (%d tools), Harbor %d", r.next-1, len(msgs), len(tools), len(e.LLM))
	}
	for i, m := range msgs {
		w := e.LLM[i]
		if m.Role != w.Role || m.Content != w.Content || m.Reasoning != w.Reasoning || m.Name != "" || len(m.ToolCalls) > 0 {
			r.t.Fatalf("event %d message %d:\nproctor %s %s\n harbor %s %s", r.next-1, i, m.Role, pyjson.Repr(m.Content), w.Role, pyjson.Repr(w.Content))
		}
	}
	switch e.Reply.Raise {
	case "context":
		return agent.Reply{}, fmt.Errorf("%w: scripted", agent.ErrContextLength)
	case "error":
		return agent.Reply{}, errors.New("the endpoint failed")
	}
	return agent.Reply{Message: agent.Message{Role: "assistant", Content: e.Reply.Content, Reasoning: e.Reply.Reasoning},
		Usage: agent.Usage{PromptTokens: 10, CompletionTokens: 5}, FinishReason: map[bool]string{true: "length", false: "stop"}[e.Reply.Finish == "length"]}, nil
}

func (r *replay) clock() *clock {
	t0 := time.Unix(1000, 0)
	return &clock{now: func() time.Time { return t0 }, sleep: func(_ context.Context, secs float64) error {
		r.t.Helper()
		e, ok := r.take("wait")
		if ok && (e.Sleep == nil || *e.Sleep != pyjson.FloatRepr(secs)) {
			r.t.Fatalf("event %d: proctor waited %s s, Harbor's next was %s", r.next-1, pyjson.FloatRepr(secs), e)
		}
		return nil
	}}
}

// options maps the scenario's Terminus2 arguments to Options.
func (sc scenario) options(r *replay) Options {
	o := Options{Parser: sc.Parser, MaxInputTokens: sc.ContextLimit, clock: r.clock(),
		CountTokens: func(msgs []agent.Message) int {
			n := 0
			for _, m := range msgs {
				n += pystr.Len(m.Content)
			}
			return n
		}}
	if sc.OutputLimit != nil {
		o.MaxOutputTokens = *sc.OutputLimit
	}
	num := func(k string) int { f, _ := sc.Kwargs[k].(float64); return int(f) }
	for k, v := range sc.Kwargs {
		switch k {
		case "max_turns":
			o.MaxTurns = num(k)
		case "enable_summarize":
			o.NoSummarize = v == false
		case "proactive_summarization_threshold":
			n := num(k)
			o.ProactiveThreshold = &n
		case "interleaved_thinking":
			o.InterleavedThinking = v == true
		case "record_terminal_session":
			o.NoRecording = v == false
		case "tmux_pane_width":
			o.PaneWidth = num(k)
		case "tmux_pane_height":
			o.PaneHeight = num(k)
		default:
			panic("scenario argument " + k)
		}
	}
	return o
}

// TestScenariosMatchHarbor runs the Go agent through each scenario Harbor's
// own Terminus2 ran (testdata/gen.py): every model call must carry the
// same messages, byte for byte, every tmux command be the same and come
// in the same order, every wait be as long, and the run end the same way.
func TestScenariosMatchHarbor(t *testing.T) {
	var g struct {
		Scenarios []scenario `json:"scenarios"`
	}
	readJSON(t, "testdata/scenarios.json", &g)
	if len(g.Scenarios) < 15 {
		t.Fatalf("%d scenarios", len(g.Scenarios))
	}
	for _, sc := range g.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			r := &replay{t: t, evs: sc.Events}
			a := &Agent{Model: r, Name: "scripted", Opts: sc.options(r)}
			tr, err := a.Run(context.Background(), r, sc.Instruction)
			switch {
			case sc.End == "ok":
				if err != nil {
					t.Fatalf("proctor: %v (%s); Harbor ended normally", err, tr.StopReason)
				}
			case strings.HasPrefix(sc.End, "ContextLengthExceededError"):
				if err != nil || tr.StopReason != agent.StopContextLength {
					t.Fatalf("proctor: %v (%s); Harbor raised %s", err, tr.StopReason, sc.End)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), strings.SplitN(sc.End, ":", 2)[0]) {
					t.Fatalf("proctor: %v (%s); Harbor raised %s", err, tr.StopReason, sc.End)
				}
			}
			if r.next != len(r.evs) {
				t.Fatalf("proctor stopped after %d of Harbor's %d events; the next was %s", r.next, len(r.evs), r.evs[r.next])
			}
		})
	}
}
