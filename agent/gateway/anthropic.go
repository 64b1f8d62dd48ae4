package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
)

// anthropicCodec is Anthropic Messages (Claude Code): POST .../messages.
type anthropicCodec struct{}

func (anthropicCodec) api() string { return openai.APIAnthropic }

// anthropicBlock is a content block of any type.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// blocks reads content given as a string or as blocks.
func blocks(raw json.RawMessage) ([]anthropicBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var bs []anthropicBlock
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &bs); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

func (anthropicCodec) parse(body []byte, _ *http.Request) (*request, error) {
	var in struct {
		Model    string          `json:"model"`
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	req := &request{model: in.Model, stream: in.Stream}
	if sys := text(in.System); sys != "" {
		req.messages = append(req.messages, agent.Message{Role: "system", Content: sys})
	}
	names := map[string]string{} // tool_use id -> tool name
	for _, m := range in.Messages {
		bs, err := blocks(m.Content)
		if err != nil {
			return nil, err
		}
		if m.Role == "assistant" {
			req.messages = append(req.messages, anthropicAssistant(bs, names))
			continue
		}
		req.messages = append(req.messages, anthropicUser(bs, names)...)
	}
	for _, t := range in.Tools {
		if len(t.InputSchema) == 0 || t.Name == "" {
			continue // a server tool the endpoint runs itself
		}
		req.tools = append(req.tools, agent.Schema{Type: "function", Function: agent.SchemaFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	return req, nil
}

// anthropicAssistant is an assistant turn: text, thinking, tool uses.
func anthropicAssistant(bs []anthropicBlock, names map[string]string) agent.Message {
	msg := agent.Message{Role: "assistant"}
	var texts, thoughts []string
	for _, b := range bs {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "thinking":
			thoughts = append(thoughts, b.Thinking)
		case "tool_use", "server_tool_use":
			names[b.ID] = b.Name
			msg.ToolCalls = append(msg.ToolCalls, agent.ToolCall{ID: b.ID, Type: "function", Function: agent.FunctionCall{Name: b.Name, Arguments: compact(b.Input)}})
		}
	}
	msg.Content, msg.Reasoning = strings.Join(texts, "\n"), strings.Join(thoughts, "\n")
	return msg
}

// anthropicUser is a user turn: its tool results, each a tool message
// (they answer the assistant's calls, so they come first), then its text.
func anthropicUser(bs []anthropicBlock, names map[string]string) []agent.Message {
	var out []agent.Message
	var texts []string
	for _, b := range bs {
		switch {
		case b.Type == "tool_result":
			content := text(b.Content)
			if b.IsError && content == "" {
				content = "error"
			}
			out = append(out, agent.Message{Role: "tool", ToolCallID: b.ToolUseID, Name: names[b.ToolUseID], Content: content})
		case b.Type == "text":
			texts = append(texts, b.Text)
		case strings.Contains(b.Type, "image") || b.Type == "document":
			texts = append(texts, "["+b.Type+"]")
		}
	}
	if len(texts) > 0 || len(out) == 0 {
		out = append(out, agent.Message{Role: "user", Content: strings.Join(texts, "\n")})
	}
	return out
}

type anthropicUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

func (anthropicCodec) encode(_ *request, reply agent.Reply, model string) (json.RawMessage, error) {
	m := reply.Message
	var content []map[string]any
	if m.Reasoning != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": m.Reasoning, "signature": ""})
	}
	if m.Content != "" || len(m.ToolCalls) == 0 {
		content = append(content, map[string]any{"type": "text", "text": m.Content})
	}
	for _, tc := range m.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": callID(tc.ID), "name": tc.Function.Name, "input": arguments(tc.Function.Arguments)})
	}
	stop := "end_turn"
	switch {
	case len(m.ToolCalls) > 0:
		stop = "tool_use"
	case reply.FinishReason == "length":
		stop = "max_tokens"
	}
	u := reply.Usage
	return json.Marshal(map[string]any{"id": "msg_" + newID(), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": anthropicUsage{InputTokens: u.PromptTokens - u.CachedTokens, OutputTokens: u.CompletionTokens, CacheReadInputTokens: u.CachedTokens}})
}

func (anthropicCodec) upstream(req *request, model string, e Endpoint) (json.RawMessage, string, error) {
	fields := sampling(e, "temperature", "max_tokens")
	fields["model"], fields["stream"] = model, nil
	body, err := set(req.raw, fields)
	return body, "messages", err
}

func (anthropicCodec) reply(answer []byte) (agent.Reply, error) {
	var a struct {
		Content    []anthropicBlock `json:"content"`
		StopReason string           `json:"stop_reason"`
		Usage      anthropicUsage   `json:"usage"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return agent.Reply{}, err
	}
	msg := anthropicAssistant(a.Content, map[string]string{})
	u := a.Usage
	return agent.Reply{Message: msg, FinishReason: chatFinish(msg, a.StopReason == "max_tokens"), Usage: agent.Usage{
		PromptTokens: u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens, CompletionTokens: u.OutputTokens, CachedTokens: u.CacheReadInputTokens}}, nil
}

// stream writes a message as Messages' events: message_start,
// content_block_start, _delta and _stop per block, message_delta (the
// stop reason and usage), message_stop.
func (anthropicCodec) stream(s *sse, answer []byte) error {
	var a struct {
		ID           string            `json:"id"`
		Model        string            `json:"model"`
		Content      []json.RawMessage `json:"content"`
		StopReason   *string           `json:"stop_reason"`
		StopSequence *string           `json:"stop_sequence"`
		Usage        json.RawMessage   `json:"usage"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return err
	}
	var usage map[string]any
	json.Unmarshal(a.Usage, &usage)
	start := map[string]any{}
	for k, v := range usage {
		start[k] = v
	}
	start["output_tokens"] = 0
	err := s.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": a.ID, "type": "message", "role": "assistant", "model": a.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": start}})
	for i, raw := range a.Content {
		if err != nil {
			return err
		}
		err = anthropicBlockEvents(s, i, raw)
	}
	if err != nil {
		return err
	}
	if err := s.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": a.StopReason, "stop_sequence": a.StopSequence}, "usage": usage}); err != nil {
		return err
	}
	return s.event("message_stop", map[string]any{"type": "message_stop"})
}

// anthropicBlockEvents writes block index i: its start with its growing
// part empty, that part as one delta, and its stop. A block of a type it
// does not know starts whole.
func anthropicBlockEvents(s *sse, i int, raw json.RawMessage) error {
	var b anthropicBlock
	var whole map[string]any
	if err := json.Unmarshal(raw, &b); err != nil {
		return err
	}
	json.Unmarshal(raw, &whole)
	var deltas []map[string]any
	switch b.Type {
	case "text":
		whole["text"] = ""
		deltas = append(deltas, map[string]any{"type": "text_delta", "text": b.Text})
	case "thinking":
		whole["thinking"], whole["signature"] = "", ""
		deltas = append(deltas, map[string]any{"type": "thinking_delta", "thinking": b.Thinking})
		if b.Signature != "" {
			deltas = append(deltas, map[string]any{"type": "signature_delta", "signature": b.Signature})
		}
	case "tool_use", "server_tool_use":
		whole["input"] = map[string]any{}
		deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": compact(b.Input)})
	}
	if err := s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": whole}); err != nil {
		return err
	}
	for _, d := range deltas {
		if err := s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}); err != nil {
			return err
		}
	}
	return s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

var anthropicKinds = map[int]string{http.StatusUnauthorized: "authentication_error", http.StatusNotFound: "not_found_error",
	http.StatusRequestEntityTooLarge: "request_too_large", http.StatusTooManyRequests: "rate_limit_error"}

func anthropicError(status int, msg string) map[string]any {
	kind := statusKind(status, anthropicKinds, "invalid_request_error", "api_error")
	return map[string]any{"type": "error", "error": map[string]any{"type": kind, "message": msg}}
}

func (anthropicCodec) fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, anthropicError(status, msg))
}

func (anthropicCodec) streamFail(s *sse, msg string) {
	s.event("error", anthropicError(http.StatusBadGateway, msg))
}
