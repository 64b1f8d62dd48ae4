package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/local"
)

// client is a Client of srv with cfg, retrying as a run's default
// retry_budget does unless cfg says, with short backoffs.
func client(srv *openaitest.Server, cfg Config) *Client {
	cfg.BaseURL, cfg.Model = srv.URL(), "scripted"
	if cfg.BaseBackoff == 0 {
		cfg.BaseBackoff = 5 * time.Millisecond
	}
	if cfg.RetryBudget == 0 {
		cfg.RetryBudget = 8
	}
	return NewFactory(cfg, NewLimiter(4)).New()
}

var hello = []agent.Message{{Role: "user", Content: "hi"}}

func TestRetriesHonourRetryAfter(t *testing.T) {
	srv := openaitest.New(
		openaitest.Step{Status: 429, RetryAfter: "0.2"},
		openaitest.Step{Status: 429, RetryAfter: "0.2"},
		openaitest.Step{Body: openaitest.Reply("ok")},
	)
	defer srv.Close()
	start := time.Now()
	r, err := client(srv, Config{}).Complete(context.Background(), hello, nil)
	if err != nil || r.Message.Content != "ok" {
		t.Fatalf("%v %+v", err, r)
	}
	if time.Since(start) < 350*time.Millisecond {
		t.Errorf("Retry-After was not honoured")
	}
	if r.Usage.PromptTokens != 100 || r.Usage.CachedTokens != 40 || r.Usage.ReasoningTokens != 5 || r.Message.Reasoning == "" {
		t.Errorf("usage or reasoning lost: %+v", r)
	}
}

func TestServerErrorStormExhaustsBudget(t *testing.T) {
	var steps []openaitest.Step
	for range 10 {
		steps = append(steps, openaitest.Step{Status: 500})
	}
	srv := openaitest.New(steps...)
	defer srv.Close()
	_, err := client(srv, Config{RetryBudget: 3}).Complete(context.Background(), hello, nil)
	if !errors.Is(err, ErrBudget) || len(srv.Requests()) != 4 {
		t.Fatalf("want the budget exhausted after 4 tries, got %v after %d", err, len(srv.Requests()))
	}
}

// The first answer never comes: the request is cut at its timeout and
// tried again. Every later answer is "after", so a try that a busy machine
// also lets time out is followed by another that gets it.
func TestHangingResponseIsCut(t *testing.T) {
	steps := []openaitest.Step{{Delay: time.Hour}}
	for range 8 {
		steps = append(steps, openaitest.Step{Body: openaitest.Reply("after")})
	}
	srv := openaitest.New(steps...)
	defer srv.Close()
	r, err := client(srv, Config{RequestTimeout: 200 * time.Millisecond}).Complete(context.Background(), hello, nil)
	if err != nil || r.Message.Content != "after" || len(srv.Requests()) < 2 {
		t.Fatalf("timeout then retry: %v %+v after %d requests", err, r, len(srv.Requests()))
	}
}

func TestFinalErrors(t *testing.T) {
	srv := openaitest.New(
		openaitest.Step{Status: 400, Body: openaitest.Error("context_length_exceeded", "This model's maximum context length is 8192 tokens")},
		openaitest.Step{Status: 401, Body: openaitest.Error("invalid_api_key", "bad key")},
		openaitest.Step{Body: `{"choices":[]}`}, openaitest.Step{Body: `{"choices":[]}`},
	)
	defer srv.Close()
	c := client(srv, Config{RetryBudget: 1})
	if _, err := c.Complete(context.Background(), hello, nil); !errors.Is(err, agent.ErrContextLength) {
		t.Errorf("context length: %v", err)
	}
	if _, err := c.Complete(context.Background(), hello, nil); err == nil || !strings.Contains(err.Error(), "401") || len(srv.Requests()) != 2 {
		t.Errorf("401 must fail at once: %v", err)
	}
	if _, err := c.Complete(context.Background(), hello, nil); !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "no choices") {
		t.Errorf("empty choices: %v", err)
	}
}

// TestLoopAgainstScriptedServer: an llm rollout driven by the scripted
// server edits files in a real sandbox; bad arguments and unknown tools are
// answered; the key never reaches the trajectory.
func TestLoopAgainstScriptedServer(t *testing.T) {
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: "write_file", Args: map[string]any{"path": "app/main.py", "content": "print('hi')\n"}})},
		openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: "terminal", Args: `{"command": "ls`}, openaitest.Call{Name: "browser", Args: map[string]any{}})},
		openaitest.Step{Status: 429, RetryAfter: "0"},
		openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: "patch", Args: map[string]any{"path": "app/main.py", "old_string": "'hi'", "new_string": "'hello'"}})},
		openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: "terminal", Args: map[string]any{"command": "python3 app/main.py"}})},
		openaitest.Step{Body: openaitest.Reply("All done.")},
	)
	defer srv.Close()
	sb, err := local.Backend{}.Start(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	tools, _ := agent.NewToolset([]string{"terminal", "file"})
	c := client(srv, Config{APIKey: "sk-secret-test-key"})
	l := &agent.Loop{Model: c, Tools: tools, MaxTurns: 10}
	tr, err := l.Run(context.Background(), sb, "make it say hello")
	if err != nil {
		t.Fatal(err)
	}
	if tr.StopReason != agent.StopDone || len(tr.Turns) != 5 {
		t.Fatalf("stop %s after %d turns", tr.StopReason, len(tr.Turns))
	}
	b, _, _ := sb.ReadFile(context.Background(), "app/main.py", 0)
	if string(b) != "print('hello')\n" {
		t.Fatalf("file: %q", b)
	}
	js, _ := json.Marshal(tr)
	for _, want := range []string{"Invalid JSON in tool arguments", "Unknown tool 'browser'", `{\"output\": \"hello\", \"exit_code\": 0, \"error\": null}`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("trajectory lacks %q", want)
		}
	}
	if strings.Contains(string(js), "sk-secret") {
		t.Error("the API key reached the trajectory")
	}
	if got := srv.Requests()[0].Auth; got != "Bearer sk-secret-test-key" {
		t.Errorf("auth header %q", got)
	}
	if tr.Usage.PromptTokens != 500 {
		t.Errorf("usage %+v", tr.Usage)
	}
}

// TestReturnTokens: the switch adds the request keys (both ids keys, so
// older SGLang releases return the prompt's ids too); the ids and logprobs
// come back wherever vLLM or SGLang put them; without the switch nothing
// is asked and nothing is recorded.
func TestReturnTokens(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		step     openaitest.Step
		wantKeys bool
	}{
		{"vllm", Config{ReturnTokens: true}, openaitest.Step{Body: openaitest.Reply("ok")}, true},
		{"sglang", Config{ReturnTokens: true}, openaitest.Step{Body: openaitest.Reply("ok"), PromptIDsInChoice: true}, true},
		{"older sglang", Config{ReturnTokens: true}, openaitest.Step{Body: openaitest.Reply("ok"), PromptIDsInChoice: true, PromptIDsOnlyWhenAsked: true}, true},
		{"extra body", Config{ExtraBody: map[string]any{"return_token_ids": true, "logprobs": true}}, openaitest.Step{Body: openaitest.Reply("ok")}, true},
		{"off", Config{}, openaitest.Step{Body: openaitest.Reply("ok")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(tc.step)
			defer srv.Close()
			r, err := client(srv, tc.cfg).Complete(context.Background(), hello, nil)
			if err != nil {
				t.Fatal(err)
			}
			body := srv.Requests()[0].Body
			if asked := body["return_token_ids"] == true && body["logprobs"] == true; asked != tc.wantKeys {
				t.Fatalf("request keys: %v", body)
			}
			if prompt := body["return_prompt_token_ids"] == true; prompt != tc.cfg.ReturnTokens {
				t.Fatalf("return_prompt_token_ids with return_tokens %v: %v", tc.cfg.ReturnTokens, body)
			}
			if !tc.wantKeys {
				if r.PromptTokenIDs != nil || r.CompletionTokenIDs != nil || r.CompletionLogprobs != nil {
					t.Fatalf("ids recorded without being asked: %+v", r)
				}
				return
			}
			want, _ := openaitest.Chat([]openaitest.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "ok", Reasoning: "thinking about ok"}})
			got := append(append([]int(nil), r.PromptTokenIDs...), r.CompletionTokenIDs...)
			// The prompt ends with the generation header, which Chat
			// renders as the assistant message's header.
			if !slices.Equal(got, want) {
				t.Fatalf("ids %v, want %v", got, want)
			}
			if len(r.CompletionLogprobs) != len(r.CompletionTokenIDs) || r.CompletionLogprobs[0] != openaitest.Logprob(r.CompletionTokenIDs[0]) {
				t.Fatalf("logprobs %v for ids %v", r.CompletionLogprobs, r.CompletionTokenIDs)
			}
			if r.Usage.PromptTokens != int64(len(r.PromptTokenIDs)) {
				t.Errorf("usage %+v", r.Usage)
			}
		})
	}
}

func TestCompletionLogprobsShapes(t *testing.T) {
	for raw, want := range map[string]int{
		`{"content":[{"logprob":-0.5},{"logprob":0}]}`: 2,
		`{"content":[{"logprob":-0.5},{"token":"x"}]}`: 0, // one missing: none kept
		`{"content":[]}`:                         0,
		`{"tokens":["a"],"token_logprobs":[-1]}`: 0, // completions-style shape is not a chat's
		`[1,2]`:                                  0,
	} {
		if got := completionLogprobs(json.RawMessage(raw)); len(got) != want {
			t.Errorf("%s: %v", raw, got)
		}
	}
}

// TestSampling: the client reports what its requests send as temperature,
// max_tokens and seed, the extra body included, and the loop records it
// in the trajectory.
func TestSampling(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	cases := []struct {
		name string
		cfg  Config
		seed *int64
		want agent.Sampling
	}{
		{"config", Config{Temperature: f(0.5), MaxTokens: 100}, i(7), agent.Sampling{Temperature: f(0.5), MaxTokens: 100, Seed: i(7)}},
		{"extra body overrides", Config{Temperature: f(0.5), ExtraBody: map[string]any{"temperature": 0.9, "max_tokens": int64(50), "seed": int64(1) << 60}}, nil,
			agent.Sampling{Temperature: f(0.9), MaxTokens: 50, Seed: i(1 << 60)}},
		{"endpoint defaults", Config{}, nil, agent.Sampling{}},
		{"not a number", Config{ExtraBody: map[string]any{"temperature": "hot"}}, nil, agent.Sampling{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New()
			defer srv.Close()
			tc.cfg.BaseURL, tc.cfg.Model = srv.URL(), "scripted"
			fac := NewFactory(tc.cfg, NewLimiter(1))
			c := fac.New()
			if tc.seed != nil {
				c = fac.NewSeeded(*tc.seed)
			}
			l := &agent.Loop{Model: c, Tools: &agent.Toolset{}, MaxTurns: 1}
			tr, err := l.Run(context.Background(), nil, "hi")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(tr.Sampling)
			want, _ := json.Marshal(tc.want)
			if tr.Sampling == nil || string(got) != string(want) {
				t.Fatalf("sampling %s, want %s", got, want)
			}
			// What was reported is what was sent.
			body := srv.Requests()[0].Body
			if tc.want.Temperature != nil && body["temperature"] != *tc.want.Temperature {
				t.Errorf("sent temperature %v", body["temperature"])
			}
			if tc.want.MaxTokens > 0 && body["max_tokens"] != float64(tc.want.MaxTokens) {
				t.Errorf("sent max_tokens %v", body["max_tokens"])
			}
		})
	}
}

// An endpoint that answers with a gigabyte costs a bounded read: the
// answer is a model error, not 1 GiB in memory (it once took proctor to
// 5.9 GB).
func TestHugeResponseIsRefused(t *testing.T) {
	for _, declared := range []bool{false, true} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if declared {
				w.Header().Set("Content-Length", strconv.Itoa(1<<30))
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"choices":[{"message":{"content":"`))
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			w.Write([]byte(`"}}]}`))
		}))
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		c := NewFactory(Config{BaseURL: srv.URL, Model: "m", MaxResponseBytes: 8 << 20, RetryBudget: 2, BaseBackoff: time.Millisecond}, NewLimiter(1)).New()
		_, err := c.Complete(context.Background(), hello, nil)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		srv.Close()
		if !errors.Is(err, ErrResponseTooLarge) {
			t.Errorf("declared=%v: want ErrResponseTooLarge, got %v", declared, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
			t.Errorf("declared=%v: reading the answer allocated %d MiB", declared, grew>>20)
		}
	}
}

// The budget's error keeps its cause: errors.As finds the endpoint's 5xx.
func TestBudgetErrorKeepsCause(t *testing.T) {
	srv := openaitest.New(openaitest.Step{Status: 503}, openaitest.Step{Status: 503})
	defer srv.Close()
	_, err := client(srv, Config{RetryBudget: 1}).Complete(context.Background(), hello, nil)
	var apiErr *oa.Error
	if !errors.Is(err, ErrBudget) || !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Fatalf("want the budget error wrapping the 503, got %v", err)
	}
}

// TestFinishReason: the reply says why the model stopped, so agents that
// treat a cut answer apart (Terminus-2, mini-swe-agent) can tell.
func TestFinishReason(t *testing.T) {
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Finished(openaitest.Reply("half an ans"), "length")},
		openaitest.Step{Body: openaitest.Reply("whole")},
	)
	defer srv.Close()
	c := client(srv, Config{})
	for _, want := range []string{"length", "stop"} {
		r, err := c.Complete(context.Background(), hello, nil)
		if err != nil || r.FinishReason != want {
			t.Fatalf("finish reason %q (%v), want %q", r.FinishReason, err, want)
		}
	}
}
