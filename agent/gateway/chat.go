package gateway

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
)

// chatCodec is OpenAI Chat Completions (OpenCode): POST
// .../chat/completions.
type chatCodec struct{}

func (chatCodec) api() string { return openai.APIChat }

type chatMessage struct {
	Role             string           `json:"role"`
	Content          json.RawMessage  `json:"content"`
	ToolCalls        []agent.ToolCall `json:"tool_calls"`
	ToolCallID       string           `json:"tool_call_id"`
	Name             string           `json:"name"`
	ReasoningContent string           `json:"reasoning_content"`
	Reasoning        string           `json:"reasoning"`
}

func (chatCodec) parse(body []byte, _ *http.Request) (*request, error) {
	var in struct {
		Model    string         `json:"model"`
		Messages []chatMessage  `json:"messages"`
		Tools    []agent.Schema `json:"tools"`
		Stream   bool           `json:"stream"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	req := &request{model: in.Model, stream: in.Stream}
	for _, m := range in.Messages {
		msg := agent.Message{Role: m.Role, Content: text(m.Content), ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name, Reasoning: m.ReasoningContent}
		if msg.Reasoning == "" {
			msg.Reasoning = m.Reasoning
		}
		req.messages = append(req.messages, msg)
	}
	for _, t := range in.Tools {
		if t.Type == "function" && t.Function.Name != "" {
			req.tools = append(req.tools, t)
		}
	}
	return req, nil
}

// chatAnswer is a chat completion as the gateway writes it.
type chatAnswer struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *chatUsage   `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      *chatReplyMsg  `json:"message,omitempty"`
	Delta        map[string]any `json:"delta,omitempty"`
	FinishReason *string        `json:"finish_reason"`
}

type chatReplyMsg struct {
	Role             string           `json:"role"`
	Content          *string          `json:"content"`
	ReasoningContent string           `json:"reasoning_content,omitempty"`
	ToolCalls        []agent.ToolCall `json:"tool_calls,omitempty"`
}

type chatUsage struct {
	PromptTokens            int64 `json:"prompt_tokens"`
	CompletionTokens        int64 `json:"completion_tokens"`
	TotalTokens             int64 `json:"total_tokens"`
	PromptTokensDetails     any   `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails any   `json:"completion_tokens_details,omitempty"`
}

func (chatCodec) encode(_ *request, reply agent.Reply, model string) (json.RawMessage, error) {
	m := reply.Message
	content := m.Content
	finish := finishReason(reply)
	u := reply.Usage
	return json.Marshal(chatAnswer{ID: "chatcmpl-" + newID(), Object: "chat.completion", Created: now().Unix(), Model: model,
		Choices: []chatChoice{{Message: &chatReplyMsg{Role: "assistant", Content: &content, ReasoningContent: m.Reasoning, ToolCalls: m.ToolCalls}, FinishReason: &finish}},
		Usage: &chatUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens,
			PromptTokensDetails: map[string]int64{"cached_tokens": u.CachedTokens}, CompletionTokensDetails: map[string]int64{"reasoning_tokens": u.ReasoningTokens}}})
}

// finishReason is a chat reply's finish reason: the endpoint's, else
// what its message says.
func finishReason(r agent.Reply) string {
	switch {
	case r.FinishReason != "":
		return r.FinishReason
	case len(r.Message.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

func (chatCodec) upstream(req *request, model string, e Endpoint) (json.RawMessage, string, error) {
	fields := map[string]any{"model": model}
	if e != nil {
		fields = e.Body()
	}
	fields["stream"], fields["stream_options"] = nil, nil
	body, err := set(req.raw, fields)
	return body, "chat/completions", err
}

func (chatCodec) reply(answer []byte) (agent.Reply, error) { return openai.ParseReply(answer) }

// stream writes a chat completion as its chunks: the role, the
// reasoning, the content, the tool calls, the finish reason with the
// usage, and [DONE].
func (chatCodec) stream(s *sse, answer []byte) error {
	var a struct {
		ID      string          `json:"id"`
		Created int64           `json:"created"`
		Model   string          `json:"model"`
		Usage   json.RawMessage `json:"usage"`
		Choices []struct {
			Message      chatMessage `json:"message"`
			FinishReason *string     `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return err
	}
	if len(a.Choices) == 0 {
		return errors.New("the answer has no choices")
	}
	m := a.Choices[0].Message
	chunk := func(delta map[string]any, finish *string, usage json.RawMessage) error {
		c := map[string]any{"id": a.ID, "object": "chat.completion.chunk", "created": a.Created, "model": a.Model,
			"choices": []chatChoice{{Delta: delta, FinishReason: finish}}}
		if len(usage) > 0 && string(usage) != "null" {
			c["usage"] = usage
		}
		return s.event("", c)
	}
	deltas := []map[string]any{{"role": "assistant", "content": ""}}
	if r := m.ReasoningContent + m.Reasoning; r != "" {
		deltas = append(deltas, map[string]any{"reasoning_content": r})
	}
	if c := text(m.Content); c != "" {
		deltas = append(deltas, map[string]any{"content": c})
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]map[string]any, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			calls[i] = map[string]any{"index": i, "id": tc.ID, "type": "function", "function": tc.Function}
		}
		deltas = append(deltas, map[string]any{"tool_calls": calls})
	}
	for _, d := range deltas {
		if err := chunk(d, nil, nil); err != nil {
			return err
		}
	}
	finish := "stop"
	if f := a.Choices[0].FinishReason; f != nil && *f != "" {
		finish = *f
	}
	if err := chunk(map[string]any{}, &finish, a.Usage); err != nil {
		return err
	}
	return s.raw("[DONE]")
}

func chatError(msg string, status int) map[string]any {
	kind := "invalid_request_error"
	if status >= 500 {
		kind = "api_error"
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": kind, "code": nil}}
}

func (chatCodec) fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, chatError(msg, status))
}

func (chatCodec) streamFail(s *sse, msg string) {
	s.event("", chatError(msg, http.StatusBadGateway))
	s.raw("[DONE]")
}
