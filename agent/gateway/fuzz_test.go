package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
)

// fixedEndpoint answers every call with the same reply, and passes
// requests through to answer, without a network.
type fixedEndpoint struct {
	reply  agent.Reply
	answer json.RawMessage
}

func (e fixedEndpoint) Complete(context.Context, []agent.Message, []agent.Schema) (agent.Reply, error) {
	return e.reply, nil
}
func (fixedEndpoint) Sampling() agent.Sampling { return agent.Sampling{} }
func (e fixedEndpoint) Raw(context.Context, string, string, json.RawMessage) (json.RawMessage, error) {
	return e.answer, nil
}
func (fixedEndpoint) Body() map[string]any { return map[string]any{"model": "m"} }

var codecs = []codec{chatCodec{}, anthropicCodec{}, responsesCodec{}, geminiCodec{}}

// FuzzParse: no request, answer or stream a CLI or an endpoint sends
// makes a codec panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{anthropicRequest, `{"input":[{"type":"function_call","call_id":"a","name":"x"},{"type":"function_call_output","call_id":"a","output":[{"type":"input_text","text":"ok"}]}]}`,
		`{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{"}}]}]}`,
		`{"content":[{"type":"tool_use","input":null}],"output":[{"type":"message","content":7}],"candidates":[{}],"choices":[{}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1beta/models/m:streamGenerateContent", nil)
		for _, c := range codecs {
			if req, err := c.parse([]byte(body), r); err == nil {
				req.raw = []byte(body)
				c.encode(req, agent.Reply{Message: agent.Message{Content: "x", ToolCalls: []agent.ToolCall{{Function: agent.FunctionCall{Name: "f", Arguments: body}}}}}, "m")
				c.upstream(req, "m", nil)
			}
			c.reply([]byte(body))
			c.stream(newSSE(httptest.NewRecorder()), []byte(body))
		}
	})
}

// FuzzServe: any request body to any route gets an answer, in front of
// an endpoint of any format.
func FuzzServe(f *testing.F) {
	f.Add("/v1/messages", anthropicRequest, "chat")
	f.Add("/v1/responses", `{"input":"hi","stream":true}`, "responses")
	f.Add("/v1beta/models/m:streamGenerateContent", `{"contents":[]}`, "gemini")
	f.Add("/v1/chat/completions", `{"messages":[],"stream":true}`, "chat")
	f.Fuzz(func(t *testing.T, path, body, api string) {
		if !strings.HasPrefix(path, "/") {
			return
		}
		ep := fixedEndpoint{reply: agent.Reply{Message: agent.Message{Content: body}}, answer: json.RawMessage(body)}
		if !json.Valid(ep.answer) {
			ep.answer = json.RawMessage(`{}`)
		}
		g := New(Config{API: api, Endpoint: ep, Model: "m", Token: token})
		req := httptest.NewRequest(http.MethodPost, "http://x"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		g.ServeHTTP(httptest.NewRecorder(), req)
		g.Trajectory("a", "done")
	})
}

var _ = openai.APIChat
