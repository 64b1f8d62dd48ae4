package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/agent"
)

// recorder builds a rollout's trajectory from its model calls. A CLI's
// calls with tools are its conversation (the main thread); calls without
// (a title, a summary) are side calls, counted apart, so the turns of the
// trajectory are one conversation whose token ids line up, as the loop's
// do. Only the latest conversation of each thread is kept: the CLIs send
// the whole conversation with every call.
type recorder struct {
	mu         sync.Mutex
	args       map[string]string // tool call id -> its arguments as the model wrote them
	main, side thread
}

type thread struct {
	turns    []agent.Turn
	prev     []int // the last call's prompt and completion ids
	messages []agent.Message
	tools    []agent.Schema
	last     int // the call whose conversation messages holds
}

func newRecorder() *recorder {
	return &recorder{args: map[string]string{}, main: thread{last: -1}, side: thread{last: -1}}
}

// remember keeps the arguments of a reply's tool calls as the model wrote
// them.
func (r *recorder) remember(m agent.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tc := range m.ToolCalls {
		if tc.ID != "" {
			r.args[tc.ID] = tc.Function.Arguments
		}
	}
}

// unique gives a reply's tool calls ids no earlier call used (an
// endpoint may number them from 0 in every answer, which a CLI would take
// for the same calls), in call call.
func (r *recorder) unique(m *agent.Message, call int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range m.ToolCalls {
		id := m.ToolCalls[i].ID
		if _, seen := r.args[id]; id == "" || seen {
			id = fmt.Sprintf("call_%d_%d", call, i)
		}
		r.args[id] = m.ToolCalls[i].Function.Arguments
		m.ToolCalls[i].ID = id
	}
}

// restore puts back the arguments the model wrote into the tool calls a
// CLI sent back (it re-encodes them, as an object, in another key order
// or spacing), so the conversation reads as the model wrote it and its
// token ids line up with the earlier calls'.
func (r *recorder) restore(msgs []agent.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range msgs {
		for j, tc := range msgs[i].ToolCalls {
			if a, ok := r.args[tc.ID]; ok {
				msgs[i].ToolCalls[j].Function.Arguments = a
			}
		}
	}
}

// add records a finished call.
func (r *recorder) add(index int, req *request, res callResult, secs float64) {
	reply := res.reply
	t := agent.Turn{Index: index, Usage: reply.Usage, ModelSecs: secs, PromptTokenIDs: reply.PromptTokenIDs,
		CompletionTokenIDs: reply.CompletionTokenIDs, CompletionLogprobs: reply.CompletionLogprobs}
	if reply.CompletionLogprobs == nil {
		t.Logprobs = reply.Logprobs
	}
	if res.err != nil {
		t.Errors = append(t.Errors, res.err.Error())
	}
	for _, tc := range reply.Message.ToolCalls {
		t.Tools = append(t.Tools, agent.ToolTiming{Name: tc.Function.Name})
	}
	if res.err == nil {
		r.remember(reply.Message)
	}
	r.restore(req.messages)
	r.mu.Lock()
	defer r.mu.Unlock()
	th := &r.side
	if len(req.tools) > 0 {
		th = &r.main
	}
	th.prev = agent.ShareIDs(&t, th.prev)
	th.turns = append(th.turns, t)
	if index > th.last {
		th.last, th.tools = index, req.tools
		th.messages = slices.Clip(req.messages)
		if res.err == nil {
			msg := reply.Message
			msg.Role = "assistant"
			th.messages = append(th.messages, msg)
		}
	}
}

// trajectory is the main thread's conversation and turns (the side
// calls' when there was no main thread).
func (r *recorder) trajectory() agent.Trajectory {
	r.mu.Lock()
	defer r.mu.Unlock()
	th, side := &r.main, len(r.side.turns)
	if len(r.main.turns) == 0 {
		th, side = &r.side, 0
	}
	tr := agent.Trajectory{Messages: slices.Clone(th.messages), Turns: slices.Clone(th.turns), ToolSchemas: slices.Clone(th.tools), SideCalls: side}
	if tr.Messages == nil {
		tr.Messages = []agent.Message{}
	}
	if tr.Turns == nil {
		tr.Turns = []agent.Turn{}
	}
	for _, s := range th.tools {
		tr.Tools = append(tr.Tools, s.Function.Name)
	}
	return tr
}

// newID is an id for the answers the gateway writes (a variable, so
// tests can make them repeatable).
var newID = randomID

// now is the time answers carry.
var now = time.Now

// randomID is a random id.
func randomID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// callID is a tool call's id, or a new one where the endpoint gave none.
func callID(id string) string {
	if id != "" {
		return id
	}
	return "call_" + newID()
}
