package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
)

// responsesCodec is OpenAI Responses (Codex): POST .../responses. Codex
// sends the whole conversation each turn (store: false), so a request
// reads as a chat conversation on its own.
type responsesCodec struct{}

func (responsesCodec) api() string { return openai.APIResponses }

// respItem is an input or output item of any type.
type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// respTool is a tool of any type.
type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// customParameters is what a chat endpoint is told a free-form tool takes.
const customParameters = `{"type":"object","properties":{"input":{"type":"string","description":"the tool's whole input, as free-form text"}},"required":["input"]}`

func (responsesCodec) parse(body []byte, _ *http.Request) (*request, error) {
	var in struct {
		Model        string          `json:"model"`
		Instructions string          `json:"instructions"`
		Input        json.RawMessage `json:"input"`
		Tools        []respTool      `json:"tools"`
		Stream       bool            `json:"stream"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	req := &request{model: in.Model, stream: in.Stream, custom: map[string]bool{}}
	for _, t := range in.Tools {
		switch {
		case t.Type == "function" && t.Name != "":
			req.tools = append(req.tools, agent.Schema{Type: "function", Function: agent.SchemaFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
		case t.Type == "custom" && t.Name != "":
			req.custom[t.Name] = true
			req.tools = append(req.tools, agent.Schema{Type: "function", Function: agent.SchemaFunction{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(customParameters)}})
		}
	}
	var items []respItem
	var s string
	if json.Unmarshal(in.Input, &s) == nil {
		items = []respItem{{Type: "message", Role: "user", Content: in.Input}}
	} else if len(in.Input) > 0 {
		if err := json.Unmarshal(in.Input, &items); err != nil {
			return nil, err
		}
	}
	req.messages = responsesConversation(in.Instructions, items)
	return req, nil
}

// responsesConversation reads input items as chat messages: system and
// developer messages before the conversation join the instructions in one
// system message (later ones become user messages, which every chat
// template takes); reasoning goes to the next assistant message; calls
// join the assistant message they follow; outputs become tool messages.
func responsesConversation(instructions string, items []respItem) []agent.Message {
	var out []agent.Message
	system := []string{}
	if instructions != "" {
		system = append(system, instructions)
	}
	names := map[string]string{}
	reasoning := ""
	assistant := func() *agent.Message {
		if n := len(out); n > 0 && out[n-1].Role == "assistant" {
			return &out[n-1]
		}
		out = append(out, agent.Message{Role: "assistant", Reasoning: reasoning})
		reasoning = ""
		return &out[len(out)-1]
	}
	for _, it := range items {
		switch it.Type {
		case "message", "":
			t := text(it.Content)
			switch {
			case (it.Role == "system" || it.Role == "developer") && len(out) == 0:
				system = append(system, t)
			case it.Role == "assistant":
				out = append(out, agent.Message{Role: "assistant", Content: t, Reasoning: reasoning})
				reasoning = ""
			default:
				out = append(out, agent.Message{Role: "user", Content: t})
			}
		case "reasoning":
			var parts []string
			for _, p := range it.Summary {
				parts = append(parts, p.Text)
			}
			reasoning = strings.TrimSpace(reasoning + "\n" + strings.Join(parts, "\n"))
		case "function_call", "custom_tool_call":
			args := it.Arguments
			if it.Type == "custom_tool_call" {
				b, _ := json.Marshal(map[string]string{"input": it.Input})
				args = string(b)
			}
			names[it.CallID] = it.Name
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, agent.ToolCall{ID: it.CallID, Type: "function", Function: agent.FunctionCall{Name: it.Name, Arguments: args}})
		case "function_call_output", "custom_tool_call_output":
			out = append(out, agent.Message{Role: "tool", ToolCallID: it.CallID, Name: names[it.CallID], Content: text(it.Output)})
		}
	}
	if len(system) > 0 {
		out = append([]agent.Message{{Role: "system", Content: strings.Join(system, "\n\n")}}, out...)
	}
	return out
}

type respUsage struct {
	InputTokens         int64            `json:"input_tokens"`
	InputTokensDetails  map[string]int64 `json:"input_tokens_details"`
	OutputTokens        int64            `json:"output_tokens"`
	OutputTokensDetails map[string]int64 `json:"output_tokens_details"`
	TotalTokens         int64            `json:"total_tokens"`
}

func (responsesCodec) encode(req *request, reply agent.Reply, model string) (json.RawMessage, error) {
	m := reply.Message
	var output []map[string]any
	if m.Reasoning != "" {
		output = append(output, map[string]any{"type": "reasoning", "id": "rs_" + newID(), "summary": []any{map[string]any{"type": "summary_text", "text": m.Reasoning}}})
	}
	if m.Content != "" || len(m.ToolCalls) == 0 {
		output = append(output, map[string]any{"type": "message", "id": "msg_" + newID(), "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": m.Content, "annotations": []any{}}}})
	}
	for _, tc := range m.ToolCalls {
		item := map[string]any{"type": "function_call", "id": "fc_" + newID(), "call_id": callID(tc.ID), "name": tc.Function.Name, "arguments": tc.Function.Arguments, "status": "completed"}
		if req != nil && req.custom[tc.Function.Name] {
			var in struct {
				Input string `json:"input"`
			}
			json.Unmarshal([]byte(tc.Function.Arguments), &in)
			item = map[string]any{"type": "custom_tool_call", "id": "ctc_" + newID(), "call_id": callID(tc.ID), "name": tc.Function.Name, "input": in.Input, "status": "completed"}
		}
		output = append(output, item)
	}
	status, incomplete := "completed", any(nil)
	if reply.FinishReason == "length" && len(m.ToolCalls) == 0 {
		status, incomplete = "incomplete", map[string]any{"reason": "max_output_tokens"}
	}
	u := reply.Usage
	return json.Marshal(map[string]any{"id": "resp_" + newID(), "object": "response", "created_at": now().Unix(), "status": status,
		"model": model, "output": output, "incomplete_details": incomplete, "error": nil,
		"usage": respUsage{InputTokens: u.PromptTokens, InputTokensDetails: map[string]int64{"cached_tokens": u.CachedTokens},
			OutputTokens: u.CompletionTokens, OutputTokensDetails: map[string]int64{"reasoning_tokens": u.ReasoningTokens}, TotalTokens: u.PromptTokens + u.CompletionTokens}})
}

func (responsesCodec) upstream(req *request, model string, e Endpoint) (json.RawMessage, string, error) {
	fields := sampling(e, "temperature", "max_output_tokens")
	fields["model"], fields["stream"] = model, nil
	body, err := set(req.raw, fields)
	return body, "responses", err
}

func (responsesCodec) reply(answer []byte) (agent.Reply, error) {
	var a struct {
		Status string     `json:"status"`
		Output []respItem `json:"output"`
		Usage  respUsage  `json:"usage"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return agent.Reply{}, err
	}
	msgs := responsesConversation("", a.Output)
	var msg agent.Message
	for _, m := range msgs {
		if m.Role == "assistant" {
			msg.Content = strings.TrimPrefix(msg.Content+"\n"+m.Content, "\n")
			msg.Reasoning = strings.TrimPrefix(msg.Reasoning+"\n"+m.Reasoning, "\n")
			msg.ToolCalls = append(msg.ToolCalls, m.ToolCalls...)
		}
	}
	msg.Role = "assistant"
	u := a.Usage
	return agent.Reply{Message: msg, FinishReason: chatFinish(msg, a.Status == "incomplete"), Usage: agent.Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens,
		CachedTokens: u.InputTokensDetails["cached_tokens"], ReasoningTokens: u.OutputTokensDetails["reasoning_tokens"]}}, nil
}

// stream writes a response as Responses' events: response.created, per
// output item its .added, its text or arguments as one delta and their
// .done, and its .done; then response.completed (or .incomplete), which
// carries the whole response.
func (responsesCodec) stream(s *sse, answer []byte) error {
	var resp map[string]any
	if err := json.Unmarshal(answer, &resp); err != nil {
		return err
	}
	var items []map[string]any
	if raw, err := json.Marshal(resp["output"]); err == nil {
		json.Unmarshal(raw, &items)
	}
	seq := 0
	emit := func(kind string, fields map[string]any) error {
		fields["type"], fields["sequence_number"] = kind, seq
		seq++
		return s.event(kind, fields)
	}
	created := map[string]any{}
	for k, v := range resp {
		created[k] = v
	}
	created["status"], created["output"] = "in_progress", []any{}
	if err := emit("response.created", map[string]any{"response": created}); err != nil {
		return err
	}
	for i, item := range items {
		if err := responsesItemEvents(emit, i, item); err != nil {
			return err
		}
	}
	done := "response.completed"
	if resp["status"] == "incomplete" {
		done = "response.incomplete"
	}
	return emit(done, map[string]any{"response": resp})
}

// responsesItemEvents writes output item i's events.
func responsesItemEvents(emit func(string, map[string]any) error, i int, item map[string]any) error {
	id, _ := item["id"].(string)
	added := map[string]any{}
	for k, v := range item {
		added[k] = v
	}
	added["status"] = "in_progress"
	switch item["type"] {
	case "message":
		added["content"] = []any{}
	case "function_call":
		added["arguments"] = ""
	}
	if err := emit("response.output_item.added", map[string]any{"output_index": i, "item": added}); err != nil {
		return err
	}
	switch item["type"] {
	case "message":
		parts, _ := item["content"].([]any)
		for j, p := range parts {
			part, _ := p.(map[string]any)
			t, _ := part["text"].(string)
			at := map[string]any{"item_id": id, "output_index": i, "content_index": j}
			for _, ev := range []struct {
				kind   string
				fields map[string]any
			}{
				{"response.content_part.added", map[string]any{"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}}},
				{"response.output_text.delta", map[string]any{"delta": t}},
				{"response.output_text.done", map[string]any{"text": t}},
				{"response.content_part.done", map[string]any{"part": part}},
			} {
				for k, v := range at {
					ev.fields[k] = v
				}
				if err := emit(ev.kind, ev.fields); err != nil {
					return err
				}
			}
		}
	case "function_call":
		args, _ := item["arguments"].(string)
		if err := emit("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": args}); err != nil {
			return err
		}
		if err := emit("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "arguments": args}); err != nil {
			return err
		}
	}
	return emit("response.output_item.done", map[string]any{"output_index": i, "item": item})
}

func (responsesCodec) fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, chatError(msg, status))
}

func (responsesCodec) streamFail(s *sse, msg string) {
	s.event("response.failed", map[string]any{"type": "response.failed", "sequence_number": 0, "response": map[string]any{
		"id": "resp_" + newID(), "object": "response", "status": "failed", "output": []any{},
		"error": map[string]any{"code": "server_error", "message": msg}}})
}
