// Package openai is the agent's model client for any OpenAI-compatible
// chat completions endpoint, over openai-go (the only package importing
// it). It owns retries: exponential backoff with jitter, Retry-After
// honoured, on 429, 5xx, connection errors and timeouts, bounded by a
// per-rollout budget; a 4xx that will not change fails at once; a
// context-length error becomes agent.ErrContextLength. One Limiter shared
// by all rollouts of a run caps concurrent requests and makes them back off
// together when the endpoint says to.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/proctor-dev/proctor/agent"
)

// Config describes the endpoint and sampling.
type Config struct {
	BaseURL        string
	Model          string
	APIKey         string // read from the environment variable the config names; never logged
	Temperature    *float64
	MaxTokens      int
	ExtraBody      map[string]any
	RequestTimeout time.Duration // bounds each request; 0: only the context does
	RetryBudget    int           // retries per rollout; 0: none
	BaseBackoff    time.Duration
	MaxBackoff     time.Duration
	// ReturnTokens asks the endpoint for the token ids of every call
	// ("return_token_ids": true, vLLM and SGLang; "return_prompt_token_ids":
	// true as well, which older SGLang releases need for the prompt's ids)
	// and the logprobs of the completion ("logprobs": true). Whatever the
	// request asked, the ids and logprobs an answer carries are kept in the
	// Reply.
	ReturnTokens bool
	// MaxResponseBytes caps an answer's body (default 32 MiB): a larger one
	// is a model error, never read into memory whole.
	MaxResponseBytes int64
}

// DefaultMaxResponseBytes is the cap on an answer's body.
const DefaultMaxResponseBytes = 32 << 20

// ErrResponseTooLarge: the endpoint sent a body over MaxResponseBytes.
var ErrResponseTooLarge = errors.New("model response too large")

// Limiter is shared by every rollout of a run.
type Limiter struct {
	sem   chan struct{}
	mu    sync.Mutex
	until time.Time
}

// NewLimiter allows at most n requests at once.
func NewLimiter(n int) *Limiter {
	if n <= 0 {
		n = 64
	}
	return &Limiter{sem: make(chan struct{}, n)}
}

func (l *Limiter) acquire(ctx context.Context) error {
	for {
		l.mu.Lock()
		wait := time.Until(l.until)
		l.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			continue
		}
		select {
		case l.sem <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *Limiter) release() { <-l.sem }

// InFlight is how many requests hold the limiter now.
func (l *Limiter) InFlight() int { return len(l.sem) }

// pause makes every caller wait until t.
func (l *Limiter) pause(t time.Time) {
	l.mu.Lock()
	if t.After(l.until) {
		l.until = t
	}
	l.mu.Unlock()
}

// Factory makes one Client per rollout over a shared connection pool and
// limiter.
type Factory struct {
	cfg Config
	c   oa.Client
	lim *Limiter
	key string // what the requests authenticate with ("none" without a key)
}

// NewFactory prepares the endpoint.
func NewFactory(cfg Config, lim *Limiter) *Factory {
	if cfg.BaseBackoff <= 0 {
		cfg.BaseBackoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Minute
	}
	key := cfg.APIKey
	if key == "" {
		key = "none"
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	c := oa.NewClient(option.WithBaseURL(cfg.BaseURL), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithMiddleware(capBody(cfg.MaxResponseBytes)))
	return &Factory{cfg: cfg, c: c, lim: lim, key: key}
}

// capBody makes every answer's body fail once it has given max bytes.
func capBody(max int64) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(req)
		if err == nil && resp != nil && resp.Body != nil {
			if resp.ContentLength > max {
				resp.Body.Close()
				return nil, fmt.Errorf("%w: the endpoint announces %d bytes, over the %d-byte cap ([model] max_response_mb)", ErrResponseTooLarge, resp.ContentLength, max)
			}
			resp.Body = &cappedBody{rc: resp.Body, left: max}
		}
		return resp, err
	}
}

// cappedBody reads at most left bytes, then fails.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the cap from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: over the cap ([model] max_response_mb)", ErrResponseTooLarge)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// New makes the client of one rollout, with its own retry budget.
func (f *Factory) New() *Client { return &Client{f: f, left: f.cfg.RetryBudget} }

// NewSeeded is New with a sampling seed sent in every request ("seed"),
// for endpoints that honour it (vLLM, SGLang, OpenAI best effort).
func (f *Factory) NewSeeded(seed int64) *Client {
	c := f.New()
	c.seed = &seed
	return c
}

// Client is one rollout's model.
type Client struct {
	f    *Factory
	left int
	seed *int64
}

var _ agent.Model = (*Client)(nil)

// ErrBudget: the rollout's retries ran out.
var ErrBudget = errors.New("model retry budget exhausted")

var _ agent.Sampler = (*Client)(nil)

// body is every request's fields but the messages and tools: the model,
// the sampling, the token switches and, last, the extra body, which may
// override any of them.
func (c *Client) body() map[string]any {
	body := map[string]any{"model": c.f.cfg.Model}
	if c.seed != nil {
		body["seed"] = *c.seed
	}
	if c.f.cfg.Temperature != nil {
		body["temperature"] = *c.f.cfg.Temperature
	}
	if c.f.cfg.MaxTokens > 0 {
		body["max_tokens"] = c.f.cfg.MaxTokens
	}
	if c.f.cfg.ReturnTokens {
		body["return_token_ids"] = true
		body["return_prompt_token_ids"] = true
		body["logprobs"] = true
	}
	for k, v := range c.f.cfg.ExtraBody {
		body[k] = v
	}
	return body
}

// Sampling says what the client's requests send as temperature,
// max_tokens and seed, after the extra body (a value it sets that is not a
// number is not reported).
func (c *Client) Sampling() agent.Sampling {
	var s agent.Sampling
	b := c.body()
	if t, ok := number(b["temperature"]); ok {
		s.Temperature = &t
	}
	if n, ok := number(b["max_tokens"]); ok && n > 0 && n == float64(int(n)) {
		s.MaxTokens = int(n)
	}
	switch seed := b["seed"].(type) {
	case int64: // NewSeeded's, and TOML's integers: exact beyond 2^53
		s.Seed = &seed
	default:
		if n, ok := number(seed); ok && n == math.Trunc(n) {
			v := int64(n)
			s.Seed = &v
		}
	}
	return s
}

// number reads a JSON-bound number as the config or the code holds it.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// Complete sends one chat completion, retrying what can be retried.
func (c *Client) Complete(ctx context.Context, msgs []agent.Message, tools []agent.Schema) (agent.Reply, error) {
	body := c.body()
	body["messages"] = msgs
	if len(tools) > 0 {
		body["tools"] = tools
	}
	var reply agent.Reply
	err := c.retry(ctx, func(ctx context.Context) error {
		raw, err := c.once(ctx, "chat/completions", body)
		if err != nil {
			return err
		}
		if reply, err = ParseReply(raw); err != nil {
			return &retryError{err}
		}
		return nil
	})
	return reply, err
}

// Wire formats of model endpoints: what an endpoint speaks, and what a
// model gateway's caller speaks (agent/gateway).
const (
	APIChat      = "chat"      // OpenAI Chat Completions, POST chat/completions
	APIResponses = "responses" // OpenAI Responses, POST responses
	APIAnthropic = "anthropic" // Anthropic Messages, POST messages
	APIGemini    = "gemini"    // Gemini generateContent, POST models/MODEL:generateContent
)

// Raw sends a request as it is to an endpoint that speaks api: body goes
// to path under the base URL with the endpoint's key in the header that
// format uses (an Anthropic endpoint's x-api-key, Gemini's
// x-goog-api-key, a Bearer token otherwise), under the client's retries,
// limiter and answer cap. It returns the answer's body. The model gateway
// passes requests through with it.
func (c *Client) Raw(ctx context.Context, api, path string, body json.RawMessage) (json.RawMessage, error) {
	var opts []option.RequestOption
	switch api {
	case APIAnthropic:
		opts = append(opts, option.WithHeaderDel("authorization"), option.WithHeader("x-api-key", c.f.key),
			option.WithHeader("anthropic-version", "2023-06-01"))
	case APIGemini:
		opts = append(opts, option.WithHeaderDel("authorization"), option.WithHeader("x-goog-api-key", c.f.key))
	}
	var raw json.RawMessage
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		raw, err = c.once(ctx, path, body, opts...)
		return err
	})
	return raw, err
}

// Body is every request's fields but the conversation, as the run's
// [model] sets them: the model, the sampling, the token switches and the
// extra body. The model gateway lays them over the requests it passes
// through.
func (c *Client) Body() map[string]any { return c.body() }

// retry runs try until it succeeds, fails for good, or the rollout's
// retries run out, waiting between tries as the endpoint asks.
func (c *Client) retry(ctx context.Context, try func(context.Context) error) error {
	var last error
	for attempt := 0; ; attempt++ {
		err := try(ctx)
		if err == nil {
			return nil
		}
		var retryAfter time.Duration
		var ae *afterError
		if errors.As(err, &ae) {
			retryAfter = ae.after
		}
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
		last = err
		if c.left <= 0 {
			return fmt.Errorf("%w after %d tries: %w", ErrBudget, attempt+1, last)
		}
		c.left--
		wait := backoff(c.f.cfg.BaseBackoff, c.f.cfg.MaxBackoff, attempt)
		if retryAfter > 0 {
			wait = retryAfter
			c.f.lim.pause(time.Now().Add(retryAfter))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func backoff(base, maxB time.Duration, attempt int) time.Duration {
	d := base << min(attempt, 20)
	if d > maxB || d <= 0 {
		d = maxB
	}
	return d/2 + rand.N(d/2+1)
}

// retryError marks failures worth another try.
type retryError struct{ err error }

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

func retryable(err error) bool {
	var re *retryError
	return errors.As(err, &re)
}

// response is a chat completion. Token ids come as vLLM sends them
// (prompt_token_ids at the top, token_ids in the choice) or as SGLang does
// (both in the choice).
type response struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		Message struct {
			Content          *string          `json:"content"`
			ReasoningContent string           `json:"reasoning_content"`
			Reasoning        string           `json:"reasoning"`
			ToolCalls        []agent.ToolCall `json:"tool_calls"`
		} `json:"message"`
		Logprobs       json.RawMessage `json:"logprobs"`
		FinishReason   string          `json:"finish_reason"`
		TokenIDs       []int           `json:"token_ids"`
		PromptTokenIDs []int           `json:"prompt_token_ids"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		CompletionTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
}

// once sends one request to path under the endpoint's base URL, through
// the run's limiter, and returns the answer's body.
func (c *Client) once(ctx context.Context, path string, body any, opts ...option.RequestOption) (json.RawMessage, error) {
	if err := c.f.lim.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.f.lim.release()
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if d := c.f.cfg.RequestTimeout; d > 0 {
		rctx, cancel = context.WithTimeout(ctx, d)
	}
	defer cancel()
	var raw json.RawMessage
	var httpResp *http.Response
	err := c.f.c.Post(rctx, path, body, &raw, append(opts, option.WithResponseInto(&httpResp))...)
	if err != nil {
		return nil, classify(ctx, rctx, err)
	}
	return raw, nil
}

// ParseReply reads a chat completion's body: the first choice's message,
// the usage, and the token ids and logprobs when the endpoint sent them.
func ParseReply(raw []byte) (agent.Reply, error) {
	var r response
	if err := json.Unmarshal(raw, &r); err != nil {
		return agent.Reply{}, fmt.Errorf("model response is not a chat completion: %v", err)
	}
	if len(r.Choices) == 0 {
		return agent.Reply{}, errors.New("model response has no choices")
	}
	ch := r.Choices[0]
	m := agent.Message{Role: "assistant", ToolCalls: ch.Message.ToolCalls, Reasoning: ch.Message.ReasoningContent}
	if ch.Message.Content != nil {
		m.Content = *ch.Message.Content
	}
	if m.Reasoning == "" {
		m.Reasoning = ch.Message.Reasoning
	}
	for i := range m.ToolCalls {
		if m.ToolCalls[i].Type == "" {
			m.ToolCalls[i].Type = "function"
		}
		if m.ToolCalls[i].ID == "" {
			m.ToolCalls[i].ID = fmt.Sprintf("call_%d", i)
		}
	}
	reply := agent.Reply{Message: m, FinishReason: ch.FinishReason, Usage: agent.Usage{
		PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens,
		CachedTokens: r.Usage.PromptTokensDetails.CachedTokens, ReasoningTokens: r.Usage.CompletionTokensDetails.ReasoningTokens,
	}}
	if len(ch.Logprobs) > 0 && string(ch.Logprobs) != "null" {
		reply.Logprobs = ch.Logprobs
		reply.CompletionLogprobs = completionLogprobs(ch.Logprobs)
	}
	reply.PromptTokenIDs = r.PromptTokenIDs
	if len(reply.PromptTokenIDs) == 0 {
		reply.PromptTokenIDs = ch.PromptTokenIDs
	}
	reply.CompletionTokenIDs = ch.TokenIDs
	reply.FinishReason = ch.FinishReason
	return reply, nil
}

// completionLogprobs reads the sampled tokens' logprobs out of a choice's
// logprobs object ({"content": [{"logprob": ...}, ...]}). It returns nil
// when the object has another shape: no value is invented.
func completionLogprobs(raw json.RawMessage) []float64 {
	var lp struct {
		Content []struct {
			Logprob *float64 `json:"logprob"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &lp) != nil || len(lp.Content) == 0 {
		return nil
	}
	out := make([]float64, len(lp.Content))
	for i, c := range lp.Content {
		if c.Logprob == nil {
			return nil
		}
		out[i] = *c.Logprob
	}
	return out
}

// classify sorts a failed request: context length, retryable (with the
// server's Retry-After), or final.
func classify(ctx, rctx context.Context, err error) error {
	var apiErr *oa.Error
	if errors.As(err, &apiErr) {
		msg := strings.ToLower(apiErr.Message + " " + apiErr.Code + " " + apiErr.RawJSON())
		status := apiErr.StatusCode
		if status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge {
			if strings.Contains(msg, "context_length") || strings.Contains(msg, "context length") || strings.Contains(msg, "maximum context") || strings.Contains(msg, "too many tokens") {
				return fmt.Errorf("%w: %s", agent.ErrContextLength, apiErr.Message)
			}
		}
		if status == http.StatusTooManyRequests || status >= 500 || status == http.StatusRequestTimeout || status == 409 {
			re := &retryError{&statusError{status: status, msg: apiErr.Message, err: apiErr}}
			return &afterError{re, retryAfter(apiErr.Response)}
		}
		return fmt.Errorf("model endpoint: HTTP %d: %s (not retried: fix the request, the model name or the key)", status, apiErr.Message)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, ErrResponseTooLarge) {
		return fmt.Errorf("model endpoint: %w", err)
	}
	if rctx.Err() != nil {
		return &retryError{fmt.Errorf("model request timed out: %w", err)}
	}
	return &retryError{fmt.Errorf("model endpoint: %w", err)}
}

// statusError is an endpoint's HTTP error; errors.As still finds the
// client's own error (and its response) behind it.
type statusError struct {
	status int
	msg    string
	err    error
}

func (e *statusError) Error() string {
	return fmt.Sprintf("model endpoint: HTTP %d: %s", e.status, e.msg)
}
func (e *statusError) Unwrap() error { return e.err }

// afterError carries the server's Retry-After.
type afterError struct {
	re    *retryError
	after time.Duration
}

func (e *afterError) Error() string { return e.re.Error() }
func (e *afterError) Unwrap() error { return e.re }

func retryAfter(r *http.Response) time.Duration {
	if r == nil {
		return 0
	}
	v := r.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return min(time.Duration(s*float64(time.Second)), 5*time.Minute)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), 5*time.Minute)
	}
	return 0
}
