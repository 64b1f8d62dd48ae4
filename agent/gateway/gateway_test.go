package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
)

const token = "proctor-test-token"

// newGateway serves a gateway in front of endpoint (a chat server unless
// api says otherwise) and returns its URL.
func newGateway(t *testing.T, api, endpoint string, limits Limits, onStop func(string)) (*Gateway, string) {
	t.Helper()
	f := openai.NewFactory(openai.Config{BaseURL: endpoint, Model: "scripted", APIKey: "sk-real-key", RetryBudget: 1,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, openai.NewLimiter(4))
	g := New(Config{API: api, Endpoint: f.New(), Model: "scripted", Token: token, Limits: limits, OnStop: onStop})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv.URL
}

// post sends body to the gateway with the token in header h.
func post(t *testing.T, url, h, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	switch h {
	case "x-api-key", "x-goog-api-key":
		req.Header.Set(h, token)
	case "":
	default:
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// events reads an SSE stream's events as (name, data) pairs.
func events(t *testing.T, stream string) [][2]string {
	t.Helper()
	var out [][2]string
	name := ""
	sc := bufio.NewScanner(strings.NewReader(stream))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			out = append(out, [2]string{name, strings.TrimPrefix(line, "data: ")})
			name = ""
		}
	}
	return out
}

const anthropicRequest = `{"model":"claude-x","max_tokens":100,"stream":true,
 "system":[{"type":"text","text":"You are a coding agent."}],
 "tools":[{"name":"Bash","description":"run","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],
 "messages":[{"role":"user","content":"Write the file."}]}`

// TestAnthropicTranslated: a streaming Messages request with tools, in
// front of a chat endpoint: the endpoint gets a chat request with the
// system prompt, the message and the tool; the CLI gets the events Claude
// Code needs, the tool call whole; the trajectory records the call.
func TestAnthropicTranslated(t *testing.T) {
	srv := openaitest.New(openaitest.Step{Body: openaitest.Reply("Writing.", openaitest.Call{Name: "Bash", Args: map[string]any{"command": "echo hi > /tmp/x"}})})
	defer srv.Close()
	g, url := newGateway(t, openai.APIChat, srv.URL(), Limits{}, nil)
	resp, body := post(t, url+"/v1/messages?beta=true", "x-api-key", anthropicRequest)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var kinds []string
	var toolJSON string
	for _, ev := range events(t, body) {
		kinds = append(kinds, ev[0])
		var d struct {
			Delta struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
		}
		json.Unmarshal([]byte(ev[1]), &d)
		if d.Delta.Type == "input_json_delta" {
			toolJSON = d.Delta.PartialJSON
		}
	}
	want := "message_start content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(kinds, " ") != want {
		t.Errorf("events %v, want %s", kinds, want)
	}
	if toolJSON != `{"command":"echo hi > /tmp/x"}` {
		t.Errorf("tool input %q", toolJSON)
	}
	up := srv.Requests()[0]
	if up.Auth != "Bearer sk-real-key" {
		t.Errorf("upstream auth %q", up.Auth)
	}
	msgs, _ := json.Marshal(up.Body["messages"])
	tools, _ := json.Marshal(up.Body["tools"])
	if !strings.Contains(string(msgs), `{"content":"You are a coding agent.","role":"system"}`) || up.Body["model"] != "scripted" || !strings.Contains(string(tools), `"name":"Bash"`) {
		t.Errorf("upstream request %s %s", msgs, tools)
	}
	tr := g.Trajectory("claude-code", agent.StopDone)
	if len(tr.Turns) != 1 || len(tr.Messages) != 3 || tr.Messages[2].ToolCalls[0].Function.Name != "Bash" || tr.Usage.PromptTokens != 100 {
		t.Errorf("trajectory %+v", tr)
	}
}

// TestAuth: a request without the rollout's token is refused in its
// format, and reaches no endpoint.
func TestAuth(t *testing.T) {
	srv := openaitest.New()
	defer srv.Close()
	_, url := newGateway(t, openai.APIChat, srv.URL(), Limits{}, nil)
	for _, c := range []struct{ path, body string }{
		{"/v1/messages", anthropicRequest},
		{"/v1/responses", `{"input":"hi"}`},
		{"/v1beta/models/m:generateContent", `{"contents":[]}`},
		{"/v1/chat/completions", `{"messages":[]}`},
	} {
		resp, body := post(t, url+c.path, "", c.body)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "token") {
			t.Errorf("%s without the token: %d %s", c.path, resp.StatusCode, body)
		}
	}
	if resp, _ := post(t, url+"/v1/nothing", "bearer", "{}"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests reached the endpoint", n)
	}
}

// TestLimits: the call past a limit is refused, the rollout ends once
// with its stop reason, and no later call reaches the endpoint.
func TestLimits(t *testing.T) {
	for _, c := range []struct {
		limits Limits
		want   string
		calls  int
	}{
		{Limits{MaxCalls: 2}, agent.StopMaxTurns, 2},
		{Limits{MaxTokens: 250}, StopTokenLimit, 3}, // 120 tokens a call
		{Limits{MaxCostUSD: 0.5, Cost: func(u agent.Usage) float64 { return float64(u.PromptTokens) / 100 }}, StopCostLimit, 1},
	} {
		srv := openaitest.New()
		var stops []string
		_, url := newGateway(t, openai.APIChat, srv.URL(), c.limits, func(r string) { stops = append(stops, r) })
		for range c.calls + 2 {
			post(t, url+"/v1/chat/completions", "bearer", `{"messages":[{"role":"user","content":"hi"}]}`)
		}
		if n := len(srv.Requests()); n != c.calls || len(stops) != 1 || stops[0] != c.want {
			t.Errorf("%+v: %d calls reached the endpoint, stops %v; want %d and %s", c.limits, n, stops, c.calls, c.want)
		}
		srv.Close()
	}
}

// TestModelErrorEndsTheRollout: an endpoint that keeps failing ends the
// rollout (model_error) after the client's retries, and the CLI gets an
// error in its format.
func TestModelErrorEndsTheRollout(t *testing.T) {
	srv := openaitest.New(openaitest.Step{Status: 503}, openaitest.Step{Status: 503}, openaitest.Step{Status: 503})
	defer srv.Close()
	var stop string
	g, url := newGateway(t, openai.APIChat, srv.URL(), Limits{}, func(r string) { stop = r })
	resp, body := post(t, url+"/v1/responses", "bearer", `{"input":"hi"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "model call failed") || stop != agent.StopModelError || g.Err() == nil {
		t.Fatalf("%d %s, stop %q", resp.StatusCode, body, stop)
	}
}

// TestKeepalive: a streaming caller waiting on a slow endpoint gets
// comments before its answer.
func TestKeepalive(t *testing.T) {
	srv := openaitest.New(openaitest.Step{Delay: 300 * time.Millisecond})
	defer srv.Close()
	f := openai.NewFactory(openai.Config{BaseURL: srv.URL(), Model: "scripted"}, openai.NewLimiter(1))
	g := New(Config{Endpoint: f.New(), Model: "scripted", Token: token, Keepalive: 50 * time.Millisecond})
	hs := httptest.NewServer(g)
	defer hs.Close()
	_, body := post(t, hs.URL+"/v1/chat/completions", "bearer", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if !strings.HasPrefix(body, ": proctor: waiting") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream: %q", body)
	}
}

// TestRecorderRestoresArguments: arguments the CLI sends back re-encoded
// read as the model wrote them, and ids an endpoint repeats are made
// unique.
func TestRecorderRestoresArguments(t *testing.T) {
	r := newRecorder()
	m := agent.Message{ToolCalls: []agent.ToolCall{{ID: "call_0", Function: agent.FunctionCall{Name: "Bash", Arguments: `{"command": "ls",  "x":1}`}}}}
	r.unique(&m, 0)
	again := agent.Message{ToolCalls: []agent.ToolCall{{ID: "call_0", Function: agent.FunctionCall{Name: "Bash", Arguments: `{}`}}}}
	r.unique(&again, 1)
	if again.ToolCalls[0].ID == "call_0" {
		t.Fatalf("a repeated id stayed: %+v", again)
	}
	sent := []agent.Message{{Role: "assistant", ToolCalls: []agent.ToolCall{{ID: "call_0", Function: agent.FunctionCall{Name: "Bash", Arguments: `{"x":1,"command":"ls"}`}}}}}
	r.restore(sent)
	if got := sent[0].ToolCalls[0].Function.Arguments; got != `{"command": "ls",  "x":1}` {
		t.Errorf("restored %q", got)
	}
}

// TestPassThrough: an endpoint that speaks the caller's format gets the
// request as it came, for the run's model, without streaming, with the
// run's key in that format's header; its answer goes back as a stream.
func TestPassThrough(t *testing.T) {
	answer := `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":3}}`
	var got map[string]any
	var key string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key = r.Header.Get("x-api-key") + "|" + r.Header.Get("Authorization") + "|" + r.URL.Path
		json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
	defer up.Close()
	g, url := newGateway(t, openai.APIAnthropic, up.URL+"/v1", Limits{}, nil)
	resp, body := post(t, url+"/v1/messages", "x-api-key", anthropicRequest)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if key != "sk-real-key||/v1/messages" || got["model"] != "scripted" || got["stream"] != nil || got["max_tokens"] != 100.0 {
		t.Errorf("upstream got %s and %v", key, got)
	}
	if !strings.Contains(body, `"signature":"sig","type":"signature_delta"`) || !strings.Contains(body, `"partial_json":"{\"command\":\"ls\"}"`) {
		t.Errorf("stream %s", body)
	}
	tr := g.Trajectory("claude-code", agent.StopDone)
	if u := tr.Usage; u.PromptTokens != 15 || u.CachedTokens != 5 || u.CompletionTokens != 3 || tr.Messages[len(tr.Messages)-1].Reasoning != "hm" {
		t.Errorf("trajectory %+v", tr)
	}
}

// TestServes: same format passes, anything reaches chat, nothing else.
func TestServes(t *testing.T) {
	if !Serves("chat", "anthropic") || !Serves("gemini", "gemini") || Serves("anthropic", "chat") || Serves("responses", "gemini") {
		t.Fatal("Serves")
	}
}

// TestLogIsBounded: the exchange log stops growing at its cap, keeping a
// line per call without bodies.
func TestLogIsBounded(t *testing.T) {
	srv := openaitest.New()
	defer srv.Close()
	var log bytes.Buffer
	f := openai.NewFactory(openai.Config{BaseURL: srv.URL(), Model: "scripted"}, openai.NewLimiter(1))
	g := New(Config{Endpoint: f.New(), Model: "scripted", Token: token, Log: &log, MaxLogBytes: 8000})
	hs := httptest.NewServer(g)
	defer hs.Close()
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]}`
	for range 5 {
		post(t, hs.URL+"/v1/chat/completions", "bearer", big)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if log.Len() > 8000 || len(lines) != 5 || strings.Contains(lines[3], `"dropped"`) || !strings.Contains(lines[4], `"dropped":true`) {
		t.Fatalf("%d bytes, %d lines: %s", log.Len(), len(lines), log.String())
	}
}
