package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
)

// geminiCodec is Gemini generateContent (Gemini CLI): POST
// .../models/MODEL:generateContent, or :streamGenerateContent?alt=sse for
// a stream.
type geminiCodec struct{}

func (geminiCodec) api() string { return openai.APIGemini }

type geminiCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type geminiResponse struct {
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

type geminiPart struct {
	Text             string          `json:"text,omitempty"`
	Thought          bool            `json:"thought,omitempty"`
	FunctionCall     *geminiCall     `json:"functionCall,omitempty"`
	FunctionResponse *geminiResponse `json:"functionResponse,omitempty"`
	InlineData       json.RawMessage `json:"inlineData,omitempty"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

func (geminiCodec) parse(body []byte, r *http.Request) (*request, error) {
	var in struct {
		Contents          []geminiContent `json:"contents"`
		SystemInstruction *geminiContent  `json:"systemInstruction"`
		Tools             []struct {
			FunctionDeclarations []struct {
				Name                 string          `json:"name"`
				Description          string          `json:"description"`
				Parameters           json.RawMessage `json:"parameters"`
				ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	path := r.URL.Path
	model, method, _ := strings.Cut(path[strings.LastIndex(path, "/models/")+len("/models/"):], ":")
	req := &request{model: model, geminiModel: model, stream: method == "streamGenerateContent"}
	if in.SystemInstruction != nil {
		var parts []string
		for _, p := range in.SystemInstruction.Parts {
			parts = append(parts, p.Text)
		}
		if sys := strings.Join(parts, "\n"); sys != "" {
			req.messages = append(req.messages, agent.Message{Role: "system", Content: sys})
		}
	}
	req.messages = append(req.messages, geminiConversation(in.Contents)...)
	for _, t := range in.Tools {
		for _, d := range t.FunctionDeclarations {
			params := d.ParametersJSONSchema
			if len(params) == 0 {
				params = lowerTypes(d.Parameters)
			}
			if len(params) == 0 {
				params = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			req.tools = append(req.tools, agent.Schema{Type: "function", Function: agent.SchemaFunction{Name: d.Name, Description: d.Description, Parameters: params}})
		}
	}
	return req, nil
}

// geminiConversation reads contents as chat messages. Calls without an id
// get one from their place in the conversation, and a response without
// one answers the first open call of its name, so ids stay the same from
// one request to the next.
func geminiConversation(contents []geminiContent) []agent.Message {
	var out []agent.Message
	var open []agent.ToolCall // calls not answered yet, in order
	for ci, c := range contents {
		if c.Role == "model" {
			msg := agent.Message{Role: "assistant"}
			var texts, thoughts []string
			for pi, p := range c.Parts {
				switch {
				case p.FunctionCall != nil:
					id := p.FunctionCall.ID
					if id == "" {
						id = fmt.Sprintf("call_%d_%d", ci, pi)
					}
					tc := agent.ToolCall{ID: id, Type: "function", Function: agent.FunctionCall{Name: p.FunctionCall.Name, Arguments: compact(p.FunctionCall.Args)}}
					msg.ToolCalls = append(msg.ToolCalls, tc)
					open = append(open, tc)
				case p.Thought:
					thoughts = append(thoughts, p.Text)
				case p.Text != "":
					texts = append(texts, p.Text)
				}
			}
			msg.Content, msg.Reasoning = strings.Join(texts, ""), strings.Join(thoughts, "")
			out = append(out, msg)
			continue
		}
		var texts []string
		var tools []agent.Message
		for _, p := range c.Parts {
			switch {
			case p.FunctionResponse != nil:
				var tc agent.ToolCall
				tc, open = answer(open, p.FunctionResponse)
				tools = append(tools, agent.Message{Role: "tool", ToolCallID: tc.ID, Name: p.FunctionResponse.Name, Content: responseText(p.FunctionResponse.Response)})
			case p.Text != "":
				texts = append(texts, p.Text)
			case len(p.InlineData) > 0:
				texts = append(texts, "[image]")
			}
		}
		out = append(out, tools...)
		if len(texts) > 0 || len(tools) == 0 {
			out = append(out, agent.Message{Role: "user", Content: strings.Join(texts, "\n")})
		}
	}
	return out
}

// answer finds the open call a function response answers: by id, else
// the first of its name, else the first.
func answer(open []agent.ToolCall, r *geminiResponse) (agent.ToolCall, []agent.ToolCall) {
	pick := -1
	for i, tc := range open {
		if r.ID != "" && tc.ID == r.ID || r.ID == "" && tc.Function.Name == r.Name {
			pick = i
			break
		}
	}
	if pick < 0 {
		if r.ID != "" || len(open) == 0 {
			return agent.ToolCall{ID: r.ID}, open
		}
		pick = 0
	}
	tc := open[pick]
	return tc, append(open[:pick:pick], open[pick+1:]...)
}

// responseText is a function response as the model reads it: its
// "output" when that is all it holds (what Gemini CLI sends), else its
// JSON.
func responseText(raw json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil && len(m) == 1 {
		var s string
		if json.Unmarshal(m["output"], &s) == nil {
			return s
		}
	}
	return compact(raw)
}

// lowerTypes turns a Gemini schema's upper-case types ("OBJECT") into
// JSON Schema's.
func lowerTypes(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "type" {
					x[k] = strings.ToLower(s)
				} else {
					walk(e)
				}
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	b, _ := json.Marshal(v)
	return b
}

type geminiUsage struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	TotalTokenCount         int64 `json:"totalTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount,omitempty"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount,omitempty"`
}

func (geminiCodec) encode(_ *request, reply agent.Reply, model string) (json.RawMessage, error) {
	m := reply.Message
	var parts []map[string]any
	if m.Reasoning != "" {
		parts = append(parts, map[string]any{"text": m.Reasoning, "thought": true})
	}
	if m.Content != "" || len(m.ToolCalls) == 0 {
		parts = append(parts, map[string]any{"text": m.Content})
	}
	for _, tc := range m.ToolCalls {
		parts = append(parts, map[string]any{"functionCall": geminiCall{ID: callID(tc.ID), Name: tc.Function.Name, Args: arguments(tc.Function.Arguments)}})
	}
	finish := "STOP"
	if reply.FinishReason == "length" && len(m.ToolCalls) == 0 {
		finish = "MAX_TOKENS"
	}
	u := reply.Usage
	return json.Marshal(map[string]any{
		"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": finish, "index": 0}},
		"usageMetadata": geminiUsage{PromptTokenCount: u.PromptTokens, CandidatesTokenCount: u.CompletionTokens, TotalTokenCount: u.PromptTokens + u.CompletionTokens,
			CachedContentTokenCount: u.CachedTokens, ThoughtsTokenCount: u.ReasoningTokens},
		"modelVersion": model, "responseId": newID(), "createTime": now().UTC().Format(time.RFC3339)})
}

func (geminiCodec) upstream(req *request, model string, e Endpoint) (json.RawMessage, string, error) {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(req.raw, &body); err != nil {
		return nil, "", err
	}
	if extra := sampling(e, "temperature", "maxOutputTokens"); len(extra) > 0 {
		var gc map[string]any
		json.Unmarshal(body["generationConfig"], &gc)
		if gc == nil {
			gc = map[string]any{}
		}
		for k, v := range extra {
			gc[k] = v
		}
		b, err := json.Marshal(gc)
		if err != nil {
			return nil, "", err
		}
		body["generationConfig"] = b
	}
	out, err := json.Marshal(body)
	return out, "models/" + url.PathEscape(model) + ":generateContent", err
}

func (geminiCodec) reply(answer []byte) (agent.Reply, error) {
	var a struct {
		Candidates []struct {
			Content      geminiContent `json:"content"`
			FinishReason string        `json:"finishReason"`
		} `json:"candidates"`
		UsageMetadata geminiUsage `json:"usageMetadata"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return agent.Reply{}, err
	}
	if len(a.Candidates) == 0 {
		return agent.Reply{}, fmt.Errorf("the answer has no candidates")
	}
	c := a.Candidates[0]
	c.Content.Role = "model"
	msgs := geminiConversation([]geminiContent{c.Content})
	msg := msgs[0]
	u := a.UsageMetadata
	return agent.Reply{Message: msg, FinishReason: chatFinish(msg, c.FinishReason == "MAX_TOKENS"), Usage: agent.Usage{PromptTokens: u.PromptTokenCount, CompletionTokens: u.CandidatesTokenCount,
		CachedTokens: u.CachedContentTokenCount, ReasoningTokens: u.ThoughtsTokenCount}}, nil
}

// stream writes an answer as one event, which is how little Gemini CLI
// needs: a stream's events are whole GenerateContentResponses.
func (geminiCodec) stream(s *sse, answer []byte) error {
	return s.event("", json.RawMessage(answer))
}

var geminiStatuses = map[int]string{http.StatusUnauthorized: "UNAUTHENTICATED", http.StatusNotFound: "NOT_FOUND", http.StatusTooManyRequests: "RESOURCE_EXHAUSTED"}

func geminiError(status int, msg string) map[string]any {
	st := statusKind(status, geminiStatuses, "INVALID_ARGUMENT", "INTERNAL")
	return map[string]any{"error": map[string]any{"code": status, "message": msg, "status": st}}
}

func (geminiCodec) fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, geminiError(status, msg))
}

func (geminiCodec) streamFail(s *sse, msg string) {
	s.event("", geminiError(http.StatusBadGateway, msg))
}
