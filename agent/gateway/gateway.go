// Package gateway is the model gateway of installed agents: an HTTP
// server, one per rollout, that a CLI in the sandbox reaches at
// http://127.0.0.1:PORT through the warden's relay (sandbox/mux), and that
// speaks the wire formats those CLIs use: Anthropic Messages (Claude
// Code), OpenAI Responses (Codex), Gemini generateContent (Gemini CLI) and
// Chat Completions (OpenCode), streaming included.
//
// Each request goes to the run's model endpoint with the run's key, which
// never enters the sandbox (the CLI holds a token worth nothing outside
// its rollout): as it is when the endpoint speaks the caller's format,
// translated to Chat Completions when the endpoint speaks only that. The
// endpoint is always asked for a whole answer; a caller that asked for a
// stream gets one made from it. The gateway holds the rollout to its
// limits (model calls, tokens, cost) and ends it with a stop reason when
// one is hit, and it records every exchange: the rollout's trajectory
// (OpenAI-format messages, usage and token ids per call) comes from here,
// not from the CLI's own logs.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
)

// Endpoint is the run's model endpoint as the gateway uses it: one
// rollout's client (agent/openai), with its retries and the run's limiter.
type Endpoint interface {
	agent.Model
	agent.Sampler
	// Raw passes a request through to an endpoint that speaks api.
	Raw(ctx context.Context, api, path string, body json.RawMessage) (json.RawMessage, error)
	// Body is the run's [model] fields of a chat completion request.
	Body() map[string]any
}

var _ Endpoint = (*openai.Client)(nil)

// Limits end a rollout's agent: at most MaxCalls model calls, MaxTokens
// tokens (prompt and completion, summed over its calls, as a bill counts
// them), MaxCostUSD dollars as Cost prices its usage. Zero is no limit.
type Limits struct {
	MaxCalls   int
	MaxTokens  int64
	MaxCostUSD float64
	Cost       func(agent.Usage) float64
}

// Stop reasons the gateway ends a rollout with, besides the loop's
// (agent.StopMaxTurns, agent.StopContextLength, agent.StopModelError).
const (
	StopTokenLimit = "token_limit"
	StopCostLimit  = "cost_limit"
)

// Config is one rollout's gateway.
type Config struct {
	// API is the wire format the endpoint speaks (openai.APIChat, ...).
	API      string
	Endpoint Endpoint
	// Model is the run's model name: every request is made for it,
	// whatever model the CLI named.
	Model string
	// Token is what the CLI authenticates with (NewToken).
	Token  string
	Limits Limits
	// OnStop is called once, when a limit or a failed model call ends the
	// rollout, with the stop reason: the caller stops the CLI.
	OnStop func(reason string)
	// Log, when set, receives one JSON line per exchange (see Exchange),
	// at most MaxLogBytes in all (default 64 MiB): once bodies would take
	// more than seven eighths of it, lines keep their numbers and drop
	// their bodies.
	Log         io.Writer
	MaxLogBytes int64
	// MaxRequestBytes caps a request's body (default 64 MiB).
	MaxRequestBytes int64
	// Keepalive is how long a streaming caller waits for the endpoint
	// before the gateway starts its stream with comments, one per
	// interval (default 15s), so the CLI's own idle timeout does not fire.
	Keepalive time.Duration
}

// NewToken makes a rollout's token: random, for one gateway only.
func NewToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "proctor-" + hex.EncodeToString(b)
}

// Gateway is one rollout's model gateway, an http.Handler.
type Gateway struct {
	cfg   Config
	rec   *recorder
	start time.Time

	mu       sync.Mutex
	calls    int // calls the CLI made, refused ones included
	answered int // calls the endpoint answered
	usage    agent.Usage
	stop     string
	err      error // the failed call that ended the rollout
	logged   int64
	log      sync.Mutex
}

// New makes a rollout's gateway.
func New(cfg Config) *Gateway {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 64 << 20
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = 64 << 20
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = 15 * time.Second
	}
	if cfg.API == "" {
		cfg.API = openai.APIChat
	}
	return &Gateway{cfg: cfg, rec: newRecorder(), start: time.Now()}
}

// Serves reports whether a gateway in front of an endpoint that speaks
// api can serve a caller that speaks caller: the same format is passed
// through, and every format is translated to Chat Completions.
func Serves(api, caller string) bool { return api == caller || api == openai.APIChat }

// StopReason is why the gateway ended the rollout ("" when it did not).
func (g *Gateway) StopReason() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stop
}

// Err is the failed model call that ended the rollout, if one did.
func (g *Gateway) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Token is what the CLI authenticates with.
func (g *Gateway) Token() string { return g.cfg.Token }

// Calls is how many model calls the endpoint answered.
func (g *Gateway) Calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.answered
}

// ServeHTTP answers one request of the CLI.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := route(r)
	if c == nil {
		g.logExchange(Exchange{Call: -1, Path: r.Method + " " + r.URL.Path, Error: "not found"})
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"message": "proctor's model gateway has no " + r.Method + " " + r.URL.Path, "type": "not_found"}})
		return
	}
	if !g.authorized(r) {
		c.fail(w, http.StatusUnauthorized, "proctor's model gateway: wrong or missing token")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, g.cfg.MaxRequestBytes+1))
	if err != nil {
		c.fail(w, http.StatusBadRequest, "read the request: "+err.Error())
		return
	}
	if int64(len(body)) > g.cfg.MaxRequestBytes {
		c.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request is over the gateway's %d-byte cap", g.cfg.MaxRequestBytes))
		return
	}
	req, err := c.parse(body, r)
	if err != nil {
		c.fail(w, http.StatusBadRequest, "proctor's model gateway cannot read the request: "+err.Error())
		return
	}
	req.raw = body
	g.serveCall(w, r, c, req)
}

// serveCall makes one model call for req and answers it, in a stream when
// the caller asked for one.
func (g *Gateway) serveCall(w http.ResponseWriter, r *http.Request, c codec, req *request) {
	index, refusal := g.begin()
	if refusal != "" {
		g.ended(refusal)
		c.fail(w, http.StatusBadRequest, "proctor: "+limitMessage(refusal, g.cfg.Limits))
		g.logExchange(Exchange{Call: index, API: c.api(), Path: r.URL.Path, Stream: req.stream, Request: req.raw, Error: refusal})
		return
	}
	done := make(chan callResult, 1)
	start := time.Now()
	at := start.Sub(g.start).Seconds()
	go func() { done <- g.call(r.Context(), c, req, index) }()
	var s *sse
	var res callResult
	tick := time.NewTicker(g.cfg.Keepalive)
wait:
	for {
		select {
		case res = <-done:
			break wait
		case <-tick.C:
			if !req.stream {
				continue
			}
			if s == nil {
				s = newSSE(w)
			}
			s.comment("proctor: waiting for the model")
		}
	}
	tick.Stop()
	secs := time.Since(start).Seconds()
	g.record(index, req, res, secs)
	ex := Exchange{Call: index, At: at, API: c.api(), Path: r.URL.Path, Stream: req.stream, Secs: secs, Request: req.raw, Response: res.answer}
	if res.err != nil {
		ex.Error = res.err.Error()
		g.logExchange(ex)
		g.mu.Lock()
		if g.err == nil {
			g.err = res.err
		}
		g.mu.Unlock()
		reason := agent.StopModelError
		if errors.Is(res.err, agent.ErrContextLength) {
			reason = agent.StopContextLength
		}
		g.ended(reason)
		msg := "proctor: the model call failed: " + res.err.Error()
		if s != nil {
			c.streamFail(s, msg)
			return
		}
		c.fail(w, res.status, msg)
		return
	}
	g.logExchange(ex)
	if !req.stream {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(res.answer)
		return
	}
	if s == nil {
		s = newSSE(w)
	}
	if err := c.stream(s, res.answer); err != nil {
		c.streamFail(s, "proctor: "+err.Error())
	}
}

// authorized reports whether r carries the rollout's token, in any of the
// places the CLIs put a key.
func (g *Gateway) authorized(r *http.Request) bool {
	want := []byte(g.cfg.Token)
	candidates := []string{
		strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
		r.Header.Get("x-api-key"),
		r.Header.Get("x-goog-api-key"),
		r.URL.Query().Get("key"),
	}
	for _, c := range candidates {
		if c != "" && subtle.ConstantTimeCompare([]byte(c), want) == 1 {
			return true
		}
	}
	return false
}

// begin counts a call and returns its index, or the stop reason that
// refuses it: the rollout was ended, or is at one of its limits.
func (g *Gateway) begin() (int, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	index := g.calls
	g.calls++
	l := g.cfg.Limits
	switch {
	case g.stop != "":
		return index, g.stop
	case l.MaxCalls > 0 && index >= l.MaxCalls:
		return index, agent.StopMaxTurns
	case l.MaxTokens > 0 && g.usage.PromptTokens+g.usage.CompletionTokens >= l.MaxTokens:
		return index, StopTokenLimit
	case l.MaxCostUSD > 0 && l.Cost != nil && l.Cost(g.usage) >= l.MaxCostUSD:
		return index, StopCostLimit
	}
	return index, ""
}

// ended records the stop reason, once, and tells the caller.
func (g *Gateway) ended(reason string) {
	g.mu.Lock()
	first := g.stop == ""
	if first {
		g.stop = reason
	}
	g.mu.Unlock()
	if first && g.cfg.OnStop != nil {
		g.cfg.OnStop(reason)
	}
}

func limitMessage(reason string, l Limits) string {
	switch reason {
	case agent.StopMaxTurns:
		return fmt.Sprintf("the rollout made its %d model calls ([agent] max_turns)", l.MaxCalls)
	case StopTokenLimit:
		return fmt.Sprintf("the rollout used its %d tokens ([agent] token_limit)", l.MaxTokens)
	case StopCostLimit:
		return fmt.Sprintf("the rollout spent its %g USD ([agent] cost_limit_usd)", l.MaxCostUSD)
	}
	return "the rollout was ended (" + reason + ")"
}

// callResult is a model call's outcome: the answer in the caller's format
// (JSON), and the reply it holds.
type callResult struct {
	answer json.RawMessage
	reply  agent.Reply
	err    error
	status int // the HTTP status a failure is answered with
}

// call makes the model call: passed through when the endpoint speaks the
// caller's format, translated to Chat Completions otherwise.
func (g *Gateway) call(ctx context.Context, c codec, req *request, index int) callResult {
	if c.api() == g.cfg.API {
		return g.passThrough(ctx, c, req)
	}
	if g.cfg.API != openai.APIChat {
		return callResult{err: fmt.Errorf("the endpoint speaks %s, and proctor translates %s only to chat completions ([model] api)", g.cfg.API, c.api()), status: http.StatusNotImplemented}
	}
	g.rec.restore(req.messages)
	reply, err := g.cfg.Endpoint.Complete(ctx, req.messages, req.tools)
	if err != nil {
		return callResult{err: err, status: http.StatusBadGateway}
	}
	g.rec.unique(&reply.Message, index)
	answer, err := c.encode(req, reply, g.cfg.Model)
	if err != nil {
		return callResult{reply: reply, err: fmt.Errorf("write the answer: %w", err), status: http.StatusInternalServerError}
	}
	return callResult{answer: answer, reply: reply}
}

// passThrough sends the caller's request as it is, for the run's model
// and without streaming, and reads the reply out of the answer for the
// record.
func (g *Gateway) passThrough(ctx context.Context, c codec, req *request) callResult {
	body, path, err := c.upstream(req, g.cfg.Model, g.cfg.Endpoint)
	if err != nil {
		return callResult{err: err, status: http.StatusBadRequest}
	}
	answer, err := g.cfg.Endpoint.Raw(ctx, c.api(), path, body)
	if err != nil {
		return callResult{err: err, status: http.StatusBadGateway}
	}
	reply, err := c.reply(answer)
	if err != nil {
		return callResult{answer: answer, err: fmt.Errorf("the endpoint's answer: %w", err), status: http.StatusBadGateway}
	}
	return callResult{answer: answer, reply: reply}
}

// record adds a finished call to the rollout's usage and trajectory.
func (g *Gateway) record(index int, req *request, res callResult, secs float64) {
	g.mu.Lock()
	g.usage = g.usage.Add(res.reply.Usage)
	if res.err == nil {
		g.answered++
	}
	g.mu.Unlock()
	g.rec.add(index, req, res, secs)
}

// Trajectory is what the rollout's agent did, as the gateway saw it.
// agentName and the stop reason are the caller's; the usage counts every
// call.
func (g *Gateway) Trajectory(agentName, stop string) agent.Trajectory {
	g.mu.Lock()
	usage := g.usage
	g.mu.Unlock()
	tr := g.rec.trajectory()
	tr.Agent, tr.Model, tr.StopReason, tr.Usage = agentName, g.cfg.Model, stop, usage
	if g.cfg.Endpoint != nil {
		sp := g.cfg.Endpoint.Sampling()
		tr.Sampling = &sp
	}
	return tr
}

// Exchange is one line of the gateway's log: a call's request as the CLI
// sent it and the answer it got (before a stream was made of it).
type Exchange struct {
	Call int `json:"call"`
	// At is when the call came, in seconds since the gateway started
	// (the rollout's agent started then).
	At       float64         `json:"at"`
	API      string          `json:"api"`
	Path     string          `json:"path"`
	Stream   bool            `json:"stream,omitempty"`
	Secs     float64         `json:"secs"`
	Request  json.RawMessage `json:"request,omitempty"`
	Response json.RawMessage `json:"response,omitempty"`
	Error    string          `json:"error,omitempty"`
	// Dropped says the bodies were left out: the log was at its cap.
	Dropped bool `json:"dropped,omitempty"`
}

func (g *Gateway) logExchange(ex Exchange) {
	if g.cfg.Log == nil {
		return
	}
	g.log.Lock()
	defer g.log.Unlock()
	if !json.Valid(ex.Request) {
		ex.Request = nil
	}
	if !json.Valid(ex.Response) {
		ex.Response = nil
	}
	line, err := json.Marshal(ex)
	if err != nil {
		return
	}
	// An eighth of the cap is kept for the lines without bodies.
	if g.logged+int64(len(line))+1 > g.cfg.MaxLogBytes-g.cfg.MaxLogBytes/8 {
		ex.Request, ex.Response, ex.Dropped = nil, nil, true
		if line, err = json.Marshal(ex); err != nil || g.logged+int64(len(line))+1 > g.cfg.MaxLogBytes {
			return
		}
	}
	g.logged += int64(len(line)) + 1
	g.cfg.Log.Write(append(line, '\n'))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
