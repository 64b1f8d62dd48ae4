package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// sse writes a server-sent event stream: its headers on the first write,
// each event flushed as it is written.
type sse struct {
	w   http.ResponseWriter
	f   http.Flusher
	buf bytes.Buffer
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event: "event: NAME" when name is set, and data, v as
// JSON (a json.RawMessage as it is).
func (s *sse) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf.Reset()
	if name != "" {
		s.buf.WriteString("event: " + name + "\n")
	}
	s.buf.WriteString("data: ")
	s.buf.Write(data)
	s.buf.WriteString("\n\n")
	return s.flush()
}

// raw writes one data line as it is ("[DONE]").
func (s *sse) raw(data string) error {
	s.buf.Reset()
	s.buf.WriteString("data: " + data + "\n\n")
	return s.flush()
}

// comment writes a comment line, which clients ignore: a keepalive.
func (s *sse) comment(text string) error {
	s.buf.Reset()
	s.buf.WriteString(": " + text + "\n\n")
	return s.flush()
}

func (s *sse) flush() error {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	if s.f != nil {
		s.f.Flush()
	}
	return nil
}
