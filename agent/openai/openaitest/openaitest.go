// Package openaitest is a scripted OpenAI-compatible chat completions server
// on 127.0.0.1 for tests: each request takes the next step (a reply, an
// HTTP error with optional Retry-After, a delay); when the steps run out it
// answers "done" with no tool calls.
//
// Like vLLM, it returns token ids when the request sets "return_token_ids"
// and completion logprobs when it sets "logprobs"; a step can act as an
// older SGLang release instead, which returns the prompt's ids only when
// the request sets "return_prompt_token_ids". They come from a toy
// tokenizer (tokens.go): one token per whitespace-separated word of a
// rendered chat template, so the prompt of each turn starts with the prompt
// and completion of the turn before, as with a real template.
package openaitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Step is one scripted answer.
type Step struct {
	Status     int           // HTTP status (default 200)
	Body       string        // response body (default: Reply("done"))
	RetryAfter string        // Retry-After header
	Delay      time.Duration // wait before answering (a hanging endpoint)
	// DropReasoning renders earlier assistant turns without their
	// reasoning in this step's prompt ids, as chat templates that strip
	// <think> from the history do: the prompt no longer starts with the
	// previous turn's prompt and completion.
	DropReasoning bool
	// PromptIDsInChoice puts prompt_token_ids in the choice, where SGLang
	// sends them, instead of at the top of the response, where vLLM does.
	PromptIDsInChoice bool
	// PromptIDsOnlyWhenAsked returns the prompt's ids only when the
	// request sets "return_prompt_token_ids", as older SGLang releases do
	// ("return_token_ids" then brings the completion's ids alone).
	PromptIDsOnlyWhenAsked bool
}

// Call is a tool call in a scripted reply.
type Call struct {
	Name string
	Args any // marshalled to JSON, or a string sent as is
}

// Reply builds a chat completion with content, tool calls and usage.
func Reply(content string, calls ...Call) string {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type tc struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var tcs []tc
	for i, c := range calls {
		args, ok := c.Args.(string)
		if !ok {
			b, _ := json.Marshal(c.Args)
			args = string(b)
		}
		tcs = append(tcs, tc{ID: fmt.Sprintf("call_%d", i), Type: "function", Function: fn{c.Name, args}})
	}
	msg := map[string]any{"role": "assistant", "content": content, "reasoning_content": "thinking about " + content}
	if len(tcs) > 0 {
		msg["tool_calls"] = tcs
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "model": "scripted",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}},
		"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 20,
			"prompt_tokens_details": map[string]any{"cached_tokens": 40}, "completion_tokens_details": map[string]any{"reasoning_tokens": 5}},
	})
	return string(b)
}

// Finished returns a reply body built by Reply with another finish_reason
// ("length": the model ran out of output tokens).
func Finished(body, reason string) string {
	var m map[string]any
	if json.Unmarshal([]byte(body), &m) != nil {
		return body
	}
	if ch, ok := m["choices"].([]any); ok && len(ch) > 0 {
		ch[0].(map[string]any)["finish_reason"] = reason
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// Error builds an OpenAI-style error body.
func Error(code, msg string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": code}})
	return string(b)
}

// Request is what the server received.
type Request struct {
	Auth string
	Body map[string]any
}

// Server is the scripted endpoint.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	steps    []Step
	requests []Request
	side     string
}

// Script replaces the steps left with steps.
func (s *Server) Script(steps ...Step) {
	s.mu.Lock()
	s.steps = steps
	s.mu.Unlock()
}

// AnswerSideCalls answers every request without tools (a CLI's title or
// summary call) with content, outside the steps, which then script only
// the calls with tools.
func (s *Server) AnswerSideCalls(content string) {
	s.mu.Lock()
	s.side = content
	s.mu.Unlock()
}

// New starts a server with the steps; its URL ends in /v1.
func New(steps ...Step) *Server {
	s := &Server{steps: steps}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL to configure a client with.
func (s *Server) URL() string { return s.Server.URL + "/v1" }

// Requests returns what was received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	json.Unmarshal(b, &body)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Auth: r.Header.Get("Authorization"), Body: body})
	step := Step{}
	if _, tools := body["tools"]; s.side != "" && !tools {
		step.Body = Reply(s.side)
	} else if len(s.steps) > 0 {
		step, s.steps = s.steps[0], s.steps[1:]
	}
	s.mu.Unlock()
	if step.Delay > 0 {
		select {
		case <-time.After(step.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if step.RetryAfter != "" {
		w.Header().Set("Retry-After", step.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	if step.Status == 0 {
		step.Status = http.StatusOK
	}
	if step.Body == "" {
		if step.Status == http.StatusOK {
			step.Body = Reply("done")
		} else {
			step.Body = Error(strconv.Itoa(step.Status), http.StatusText(step.Status))
		}
	}
	if step.Status == http.StatusOK {
		step.Body = withTokens(b, step)
	}
	w.WriteHeader(step.Status)
	io.WriteString(w, step.Body)
}
