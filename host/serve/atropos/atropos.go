// Package atropos is the client side of Atropos' rollout API (the FastAPI
// server `run-api` starts, atroposlib/api/server.py), as an Atropos
// environment speaks it (atroposlib/envs/base.py): register the
// environment, read the trainer's batch size and token limit, poll the
// environment's status, post scored groups, leave.
//
// Every answer is untrusted: bodies are read up to a bound, decoded
// strictly, and a field the endpoint always sends that is missing or of the
// wrong type is an *Error naming the endpoint, as is any HTTP error status.
// A request that never reached the server is a *TransportError with Sent
// false, so a caller knows when a resend cannot duplicate a group.
package atropos

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Bounds on what the client reads of an answer.
const (
	maxAnswer  = 1 << 20  // a control answer (register-env, info, status-env, scored_data)
	maxExample = 64 << 20 // /latest_example: a whole group
	// GzipMinimum is the body size from which a request is gzipped, as
	// the Python client does (_post_json_with_compression, minimum_size).
	GzipMinimum = 1024
)

// Client speaks to one rollout API.
type Client struct {
	base string
	http *http.Client
}

// New returns a client of the rollout API at baseURL (http://host:port).
// hc nil uses a client with no overall timeout: give ctx deadlines.
func New(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: hc}
}

// URL is the API's base URL.
func (c *Client) URL() string { return c.base }

// Registration is what an environment registers with (server.py
// RegisterEnv; base.py _register_env sends these five).
type Registration struct {
	MaxTokenLength int     `json:"max_token_length"`
	DesiredName    string  `json:"desired_name"`
	Weight         float64 `json:"weight"`
	// MinBatchAllocation is sent as null when unset.
	MinBatchAllocation *float64 `json:"min_batch_allocation"`
	GroupSize          int      `json:"group_size"`
}

// Env is the API's answer to a registration once the trainer has started.
type Env struct {
	ID                 int    `json:"env_id"`
	Name               string `json:"wandb_name"`
	CheckpointDir      string `json:"checkpoint_dir"`
	StartingStep       int    `json:"starting_step"`
	CheckpointInterval int    `json:"checkpoint_interval"`
	NumSteps           int    `json:"num_steps"`
}

// Info is GET /info: the trainer's batch size (in sequences) and token
// limit; -1 while no trainer has registered.
type Info struct {
	BatchSize   int `json:"batch_size"`
	MaxTokenLen int `json:"max_token_len"`
}

// Status is GET /status-env: the trainer's step and the queue as this
// environment should count it (server.py get_status_env). QueueSize and
// SelfQueueSize are in groups of the environment's group size.
type Status struct {
	CurrentStep         int     `json:"current_step"`
	QueueSize           int     `json:"queue_size"`
	UnallocatedFraction float64 `json:"unallocated_fraction"`
	SelfQueueSize       int     `json:"self_queue_size"`
	MaxGroupSize        int     `json:"max_group_size"`
	EnvWeight           float64 `json:"env_weight"`
}

// Group is one ScoredData as the API takes it (server.py ScoredData;
// base.py ScoredDataGroup). Tokens, Masks and Scores are required;
// EnvID is set by Send.
type Group struct {
	Tokens            [][]int          `json:"tokens"`
	Masks             [][]int          `json:"masks"`
	Scores            []float64        `json:"scores"`
	Advantages        [][]float64      `json:"advantages"`
	RefLogprobs       [][]float64      `json:"ref_logprobs"`
	Messages          any              `json:"messages"`
	GenerationParams  map[string]any   `json:"generation_params"`
	InferenceLogprobs [][]float64      `json:"inference_logprobs"`
	Overrides         []map[string]any `json:"overrides"`
	GroupOverrides    map[string]any   `json:"group_overrides"`
	Images            any              `json:"images"`
	EnvID             *int             `json:"env_id"`
	DistillTokenIDs   any              `json:"distill_token_ids"`
	DistillLogprobs   any              `json:"distill_logprobs"`
}

// Ack is the API's answer to posted groups: "received", or "buffered"
// when a group's length differs from the environment's group size and
// waits for others to fill one.
type Ack struct {
	Status          string `json:"status"`
	BufferSize      int    `json:"buffer_size"`
	GroupsProcessed int    `json:"groups_processed"`
	Buffered        int    `json:"buffered"`
}

// Error is an answer the client cannot use: an HTTP error status, or a
// body that is not what the endpoint answers.
type Error struct {
	Endpoint string // "POST /register-env"
	Status   int    // the HTTP status; 2xx when the body was the problem
	Msg      string // what was wrong, or the start of the body
}

func (e *Error) Error() string {
	if e.Status >= 200 && e.Status < 300 {
		return fmt.Sprintf("rollout API %s: malformed answer: %s", e.Endpoint, e.Msg)
	}
	return fmt.Sprintf("rollout API %s: HTTP %d: %s", e.Endpoint, e.Status, e.Msg)
}

// ClientError reports whether the API refused the request (4xx): the
// Python client does not retry those (base.py _send_scored_data_to_api).
func (e *Error) ClientError() bool { return e.Status >= 400 && e.Status < 500 }

// ServerError reports whether the API failed (5xx): worth retrying.
func (e *Error) ServerError() bool { return e.Status >= 500 }

// TransportError is a request that got no answer: the API is down,
// restarting or unreachable.
type TransportError struct {
	Endpoint string
	// Sent is false when the request never left (the connection was
	// refused): resending it cannot deliver anything twice.
	Sent bool
	Err  error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("rollout API %s: %v", e.Endpoint, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }

// Unreachable reports whether err is a request that got no answer.
func Unreachable(err error) bool {
	var te *TransportError
	return errors.As(err, &te)
}

// RegisterEnv registers the environment once. While the trainer has not
// started, the API answers a status other than "success" (server.py:
// "wait for trainer to start"): ok is false and waiting is that status;
// the caller waits and asks again, as base.py register_env does every
// second.
func (c *Client) RegisterEnv(ctx context.Context, r Registration) (env Env, waiting string, ok bool, err error) {
	b, err := c.do(ctx, epRegisterEnv, r, maxAnswer)
	if err != nil {
		return Env{}, "", false, err
	}
	return parseRegisterEnv(b)
}

// Info reads GET /info.
func (c *Client) Info(ctx context.Context) (Info, error) {
	b, err := c.do(ctx, epInfo, nil, maxAnswer)
	if err != nil {
		return Info{}, err
	}
	return parseInfo(b)
}

// Status reads GET /status-env for the environment envID. The server
// takes env_id in a JSON body of the GET (a query string is a 422), as
// base.py get_status sends it.
func (c *Client) Status(ctx context.Context, envID int) (Status, error) {
	b, err := c.do(ctx, epStatusEnv, map[string]int{"env_id": envID}, maxAnswer)
	if err != nil {
		return Status{}, err
	}
	return parseStatus(b)
}

// Send posts groups for the environment envID: one to /scored_data,
// several to /scored_data_list, each with env_id set, as base.py
// _send_scored_data_to_api does. It returns the endpoint it used with
// the answer. A 2xx answer whose body is odd still means the API took
// the groups (FastAPI answers 2xx only after the handler ran), so it
// comes back with a nil error and the oddity in Ack.Status.
func (c *Client) Send(ctx context.Context, envID int, groups []Group) (Ack, string, error) {
	if len(groups) == 0 {
		return Ack{}, "", errors.New("rollout API: no groups to send")
	}
	id := envID
	for i := range groups {
		groups[i].EnvID = &id
	}
	ep, body := epScoredData, any(groups[0])
	if len(groups) > 1 {
		ep, body = epScoredDataList, groups
	}
	b, err := c.do(ctx, ep, body, maxAnswer)
	var e *Error
	switch {
	case errors.As(err, &e) && e.Status >= 200 && e.Status < 300:
		return Ack{Status: "unreadable answer: " + e.Msg}, ep, nil // too long, but taken
	case err != nil:
		return Ack{}, ep, err
	}
	return parseAck(b), ep, nil
}

// LatestExample reads GET /latest_example: the last group the API queued
// from any environment (server.py keeps it as app.state.latest), or nil
// when it has none.
func (c *Client) LatestExample(ctx context.Context) (*Group, error) {
	b, err := c.do(ctx, epLatestExample, nil, maxExample)
	if err != nil {
		return nil, err
	}
	var g Group
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, &Error{Endpoint: epLatestExample, Status: 200, Msg: fmt.Sprintf("%v: %s", err, excerpt(b))}
	}
	if len(g.Tokens) == 0 {
		return nil, nil // the server's empty placeholder
	}
	return &g, nil
}

// Disconnect tells the API the environment leaves (POST /disconnect-env),
// so its weight and its min_batch_allocation no longer count: while a
// connected environment with a minimum allocation has nothing queued, the
// API forms no batch (utils.py grab_batch_with_minimum_allocations). known
// is false when the API did not know envID: server.py disconnect_env
// answers HTTP 200 {"status": "failure", "error": "list index out of
// range"} then (or, before any trainer registered, an AttributeError's
// text), and msg is that error.
func (c *Client) Disconnect(ctx context.Context, envID int) (known bool, msg string, err error) {
	b, err := c.do(ctx, epDisconnectEnv, map[string]int{"env_id": envID}, maxAnswer)
	if err != nil {
		return false, "", err
	}
	return parseDisconnect(b)
}

// The endpoints, as errors name them.
const (
	epRegisterEnv    = "POST /register-env"
	epInfo           = "GET /info"
	epStatusEnv      = "GET /status-env"
	epScoredData     = "POST /scored_data"
	epScoredDataList = "POST /scored_data_list"
	epLatestExample  = "GET /latest_example"
	epDisconnectEnv  = "POST /disconnect-env"
)

// parseRegisterEnv reads an answer of POST /register-env.
func parseRegisterEnv(b []byte) (env Env, waiting string, ok bool, err error) {
	raw, err := object(epRegisterEnv, b)
	if err != nil {
		return Env{}, "", false, err
	}
	var status string
	if err := field(epRegisterEnv, raw, "status", &status, true); err != nil {
		return Env{}, "", false, err
	}
	if status != "success" {
		return Env{}, status, false, nil
	}
	for _, f := range []struct {
		name     string
		v        any
		required bool
	}{{"env_id", &env.ID, true}, {"wandb_name", &env.Name, true}, {"starting_step", &env.StartingStep, true},
		{"checkpoint_interval", &env.CheckpointInterval, true}, {"num_steps", &env.NumSteps, true},
		{"checkpoint_dir", &env.CheckpointDir, false}} {
		if err := field(epRegisterEnv, raw, f.name, f.v, f.required); err != nil {
			return Env{}, "", false, err
		}
	}
	if env.ID < 0 {
		return Env{}, "", false, &Error{Endpoint: epRegisterEnv, Status: 200, Msg: fmt.Sprintf("env_id is %d", env.ID)}
	}
	return env, "", true, nil
}

// parseDisconnect reads an answer of POST /disconnect-env.
func parseDisconnect(b []byte) (known bool, msg string, err error) {
	raw, err := object(epDisconnectEnv, b)
	if err != nil {
		return false, "", err
	}
	var status string
	if err := field(epDisconnectEnv, raw, "status", &status, true); err != nil {
		return false, "", err
	}
	if status == "success" {
		return true, "", nil
	}
	field(epDisconnectEnv, raw, "error", &msg, false)
	return false, status + ": " + excerpt([]byte(msg)), nil
}

// parseInfo reads an answer of GET /info.
func parseInfo(b []byte) (Info, error) {
	raw, err := object(epInfo, b)
	if err != nil {
		return Info{}, err
	}
	var in Info
	if err := field(epInfo, raw, "batch_size", &in.BatchSize, true); err != nil {
		return Info{}, err
	}
	if err := field(epInfo, raw, "max_token_len", &in.MaxTokenLen, true); err != nil {
		return Info{}, err
	}
	return in, nil
}

// parseStatus reads an answer of GET /status-env.
func parseStatus(b []byte) (Status, error) {
	raw, err := object(epStatusEnv, b)
	if err != nil {
		return Status{}, err
	}
	// What the server sends when its state is broken (its except
	// branch) lacks self_queue_size and max_group_size.
	st := Status{UnallocatedFraction: 1}
	for _, f := range []struct {
		name     string
		v        any
		required bool
	}{{"current_step", &st.CurrentStep, true}, {"queue_size", &st.QueueSize, true},
		{"unallocated_fraction", &st.UnallocatedFraction, false}, {"self_queue_size", &st.SelfQueueSize, false},
		{"max_group_size", &st.MaxGroupSize, false}, {"env_weight", &st.EnvWeight, false}} {
		if err := field(epStatusEnv, raw, f.name, f.v, f.required); err != nil {
			return Status{}, err
		}
	}
	if st.QueueSize < 0 || st.SelfQueueSize < 0 || st.CurrentStep < 0 || st.MaxGroupSize < 0 {
		return Status{}, &Error{Endpoint: epStatusEnv, Status: 200, Msg: fmt.Sprintf("negative count: current_step %d, queue_size %d, self_queue_size %d, max_group_size %d",
			st.CurrentStep, st.QueueSize, st.SelfQueueSize, st.MaxGroupSize)}
	}
	if math.IsNaN(st.UnallocatedFraction) || st.UnallocatedFraction < 0 || st.UnallocatedFraction > 1 {
		return Status{}, &Error{Endpoint: epStatusEnv, Status: 200, Msg: fmt.Sprintf("unallocated_fraction is %v", st.UnallocatedFraction)}
	}
	return st, nil
}

// parseAck reads an answer of POST /scored_data or /scored_data_list.
// The API took the groups whatever it says (see Send): a body that is not
// an acknowledgement is kept in Status for the logs.
func parseAck(b []byte) Ack {
	var ack Ack
	if err := json.Unmarshal(b, &ack); err != nil || ack.Status == "" {
		return Ack{Status: "unreadable answer: " + excerpt(b)}
	}
	return ack
}

// object decodes an answer that must be a JSON object.
func object(ep string, b []byte) (map[string]json.RawMessage, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		if err == nil {
			err = errors.New("not an object")
		}
		return nil, &Error{Endpoint: ep, Status: 200, Msg: fmt.Sprintf("%v: %s", err, excerpt(b))}
	}
	return raw, nil
}

// do sends body (JSON, gzipped from GzipMinimum bytes when that is
// smaller) to the endpoint "METHOD /path" and returns the answer's body,
// at most limit bytes of it; an HTTP error status is an *Error.
func (c *Client) do(ctx context.Context, ep string, body any, limit int64) ([]byte, error) {
	method, path, _ := strings.Cut(ep, " ")
	var rd io.Reader
	gz := false
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("rollout API %s: encode: %w", ep, err)
		}
		if len(b) >= GzipMinimum {
			if z := Gzip(b); len(z) < len(b) {
				b, gz = z, true
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("rollout API %s: %w", ep, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &TransportError{Endpoint: ep, Sent: !refused(err), Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &TransportError{Endpoint: ep, Sent: true, Err: fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &Error{Endpoint: ep, Status: resp.StatusCode, Msg: excerpt(b)}
	}
	if int64(len(b)) > limit {
		return nil, &Error{Endpoint: ep, Status: resp.StatusCode, Msg: fmt.Sprintf("answer larger than %d bytes", limit)}
	}
	return b, nil
}

// field decodes raw[name] into v; a missing (or null) field is an error
// when required.
func field(ep string, raw map[string]json.RawMessage, name string, v any, required bool) error {
	b, ok := raw[name]
	if !ok || string(b) == "null" {
		if required {
			return &Error{Endpoint: ep, Status: 200, Msg: fmt.Sprintf("no %q in the answer", name)}
		}
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &Error{Endpoint: ep, Status: 200, Msg: fmt.Sprintf("%q is %s: %v", name, excerpt(b), err)}
	}
	return nil
}

// Gzip compresses b, as the Python client compresses large bodies and
// FastAPI's GZipMiddleware large answers.
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// refused reports whether the request never reached a server: the
// connection could not be made.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// excerpt is the start of an answer for an error message: at most 200
// bytes, valid UTF-8, on one line.
func excerpt(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "..."
	}
	if s == "" {
		return "(empty)"
	}
	return s
}
