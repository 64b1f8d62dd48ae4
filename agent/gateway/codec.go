package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/proctor-dev/proctor/agent"
)

// codec is one wire format: how its requests read as a chat conversation,
// how its answers are written (from a chat reply, or as a stream from its
// own JSON answer), and how a request of it is passed through.
type codec interface {
	api() string
	// parse reads a request of the format into the conversation.
	parse(body []byte, r *http.Request) (*request, error)
	// encode writes a chat reply as the format's (non-streaming) answer.
	encode(req *request, reply agent.Reply, model string) (json.RawMessage, error)
	// upstream is the request to pass through to an endpoint of the same
	// format: the body for the run's model, without streaming, and the
	// path under the endpoint's base URL.
	upstream(req *request, model string, e Endpoint) (json.RawMessage, string, error)
	// reply reads an answer of the format, for the record.
	reply(answer []byte) (agent.Reply, error)
	// stream writes an answer of the format as its event stream.
	stream(s *sse, answer []byte) error
	// fail answers an error as the format does; streamFail does so in a
	// stream already started.
	fail(w http.ResponseWriter, status int, msg string)
	streamFail(s *sse, msg string)
}

// request is a caller's request: its conversation as chat messages and
// tools, whether it wants a stream, and its body.
type request struct {
	messages []agent.Message
	tools    []agent.Schema
	stream   bool
	model    string // the model the caller named
	raw      []byte
	// custom names the caller's free-form tools (Responses' custom
	// tools), which a chat endpoint sees as functions of one string.
	custom map[string]bool
	// geminiModel is the model named in a Gemini request's path.
	geminiModel string
}

// route picks the codec of a request by its method and path; nil when the
// gateway does not serve it. Paths are matched by their end, so a base URL
// with or without a version folder works.
func route(r *http.Request) codec {
	if r.Method != http.MethodPost {
		return nil
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return chatCodec{}
	case strings.HasSuffix(p, "/messages"):
		return anthropicCodec{}
	case strings.HasSuffix(p, "/responses"):
		return responsesCodec{}
	case strings.Contains(p, "/models/") && (strings.HasSuffix(p, ":generateContent") || strings.HasSuffix(p, ":streamGenerateContent")):
		return geminiCodec{}
	}
	return nil
}

// arguments are a tool call's arguments as an object for the formats
// that carry one: the model's JSON object, {} for none, and otherwise
// the text it wrote under "arguments".
func arguments(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &obj) == nil && obj != nil {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(map[string]string{"arguments": s})
	return b
}

// compact is a JSON value as text, compacted; "{}" for nothing.
func compact(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// text joins the text of content given as a string or as a list of parts
// with a "text" field (every format's shape), one part per line.
func text(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var out []string
	for _, p := range parts {
		switch {
		case p.Text != "":
			out = append(out, p.Text)
		case strings.Contains(p.Type, "image"):
			out = append(out, "[image]")
		}
	}
	return strings.Join(out, "\n")
}

// set returns body with its top-level fields replaced by fields (a nil
// value deletes the field).
func set(body []byte, fields map[string]any) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for k, v := range fields {
		if v == nil {
			delete(m, k)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		m[k] = b
	}
	return json.Marshal(m)
}

// chatFinish is the chat finish reason of a reply read from another
// format: tool calls, cut at the length limit, or a stop.
func chatFinish(m agent.Message, cut bool) string {
	switch {
	case len(m.ToolCalls) > 0:
		return "tool_calls"
	case cut:
		return "length"
	}
	return "stop"
}

// statusKind names an HTTP error status in a format's words: as kinds
// says, else client for a 4xx and server for the rest.
func statusKind(status int, kinds map[int]string, client, server string) string {
	if k, ok := kinds[status]; ok {
		return k
	}
	if status < 500 {
		return client
	}
	return server
}

// sampling is what the run's [model] sets of temperature and the answer's
// length, for the fields a passed-through request names them by.
func sampling(e Endpoint, temperature, maxTokens string) map[string]any {
	out := map[string]any{}
	if e == nil {
		return out
	}
	s := e.Sampling()
	if s.Temperature != nil && temperature != "" {
		out[temperature] = *s.Temperature
	}
	if s.MaxTokens > 0 && maxTokens != "" {
		out[maxTokens] = s.MaxTokens
	}
	return out
}
