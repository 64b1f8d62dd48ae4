package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
)

var update = flag.Bool("update", false, "rewrite the golden files of the recorded pairs")

// The recorded pairs: testdata/API/request.json is a request a real CLI
// sent through the gateway (TestInstalledAgents, from its exchange log:
// the second call, which carries the tool call and its result), and
// testdata/API/path its path. From each, the gateway makes the request
// the endpoint gets (upstream.golden.json: the chat conversation when
// translated, the body when passed through) and the answer the CLI reads
// (answer.golden.txt, a stream), for a fixed reply with reasoning, text
// and a tool call. Run with -update to rewrite the goldens.

// captureEndpoint records what the gateway asks of the endpoint and
// answers with a fixed reply, or a fixed body when passed through.
type captureEndpoint struct {
	msgs   []agent.Message
	tools  []agent.Schema
	raw    json.RawMessage
	path   string
	answer json.RawMessage
}

var fixedReply = agent.Reply{Message: agent.Message{Role: "assistant", Content: "I will write it.", Reasoning: "The file is missing.",
	ToolCalls: []agent.ToolCall{{ID: "call_9", Type: "function", Function: agent.FunctionCall{Name: "shell", Arguments: `{"command":"echo hi > /tmp/x"}`}}}},
	FinishReason: "tool_calls", Usage: agent.Usage{PromptTokens: 1200, CompletionTokens: 30, CachedTokens: 1000, ReasoningTokens: 7}}

func (e *captureEndpoint) Complete(_ context.Context, msgs []agent.Message, tools []agent.Schema) (agent.Reply, error) {
	e.msgs, e.tools = msgs, tools
	return fixedReply, nil
}
func (*captureEndpoint) Sampling() agent.Sampling { return agent.Sampling{} }
func (e *captureEndpoint) Raw(_ context.Context, _, path string, body json.RawMessage) (json.RawMessage, error) {
	e.raw, e.path = body, path
	return e.answer, nil
}
func (*captureEndpoint) Body() map[string]any { return map[string]any{"model": "scripted"} }

// fixIDs makes the gateway's ids and times repeatable for the test.
func fixIDs(t *testing.T) {
	n := 0
	newID = func() string { n++; return fmt.Sprintf("id%03d", n) }
	now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	t.Cleanup(func() { newID, now = randomID, time.Now })
}

func TestRecordedPairs(t *testing.T) {
	for _, api := range []string{openai.APIAnthropic, openai.APIResponses, openai.APIGemini, openai.APIChat} {
		t.Run(api, func(t *testing.T) {
			dir := filepath.Join("testdata", api)
			req, err := os.ReadFile(filepath.Join(dir, "request.json"))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(filepath.Join(dir, "path"))
			path := strings.TrimSpace(string(raw))
			fixIDs(t)
			// Translated to chat (the chat format itself is passed through).
			ep := &captureEndpoint{}
			ep.answer, _ = chatCodec{}.encode(nil, fixedReply, "scripted")
			if api != openai.APIChat {
				fixIDs(t) // the ids the translation writes start anew
			}
			upstream, answer := serveRecorded(t, openai.APIChat, ep, path, req)
			golden(t, filepath.Join(dir, "upstream.golden.json"), upstream)
			golden(t, filepath.Join(dir, "answer.golden.txt"), answer)
			if api == openai.APIChat {
				return
			}
			// Passed through to an endpoint of the same format that answers
			// what was just written: the body goes as it came, without
			// streaming, and the CLI reads the same stream.
			c := route(httptest.NewRequest(http.MethodPost, path, nil))
			fixIDs(t)
			ep2 := &captureEndpoint{answer: firstAnswer(t, c, req, path)}
			_, again := serveRecorded(t, api, ep2, path, req)
			if ep2.raw == nil || bytes.Contains(ep2.raw, []byte(`"stream":true`)) || !bytes.Contains(ep2.raw, []byte(`"scripted"`)) && api != openai.APIGemini {
				t.Errorf("passed through: %.300s", ep2.raw)
			}
			if !bytes.Equal(again, answer) {
				t.Errorf("the passed-through stream differs from the translated one:\n%.1500s", again)
			}
		})
	}
}

// firstAnswer is the format's answer the gateway wrote for the fixed
// reply, as an endpoint of that format would send it.
func firstAnswer(t *testing.T, c codec, req []byte, path string) json.RawMessage {
	r, err := c.parse(req, httptest.NewRequest(http.MethodPost, path, nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.encode(r, fixedReply, "scripted")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serveRecorded sends a recorded request through a gateway in front of
// ep and returns what the endpoint got and what the CLI read.
func serveRecorded(t *testing.T, api string, ep *captureEndpoint, path string, req []byte) ([]byte, []byte) {
	t.Helper()
	g := New(Config{API: api, Endpoint: ep, Model: "scripted", Token: token})
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(req))
	r.Header.Set("x-api-key", token)
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	up := ep.raw
	if up == nil {
		up, _ = json.Marshal(map[string]any{"messages": ep.msgs, "tools": ep.tools})
	}
	var pretty bytes.Buffer
	json.Indent(&pretty, up, "", "  ")
	return pretty.Bytes(), w.Body.Bytes()
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to see how):\n%.1500s", path, got)
	}
}
