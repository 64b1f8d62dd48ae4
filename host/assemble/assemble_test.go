package assemble

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/env"
	"github.com/proctor-dev/proctor/host/fault"
	hostrun "github.com/proctor-dev/proctor/host/run"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestModelsSampleByAttempt: with [process] temperatures, attempt i
// samples at temperatures[i % len]; with [model] send_seed, a rollout's
// requests carry its seed, halved to a non-negative int64. Without them,
// every attempt samples at [model] temperature and sends no seed.
func TestModelsSampleByAttempt(t *testing.T) {
	c := &config.Config{}
	c.Model.Name, c.Model.BaseURL = "m", "http://127.0.0.1:9/v1"
	c.Process.Temperatures = []float64{0.2, 0.9}
	c.Model.SendSeed = true
	newModel, err := models(c, openai.NewLimiter(1))
	if err != nil {
		t.Fatal(err)
	}
	for attempt, want := range []float64{0.2, 0.9, 0.2, 0.9} {
		seed := uint64(1)<<63 | uint64(attempt)
		s := newModel(scheduler.AgentInput{Attempt: attempt, Seed: seed}).(agent.Sampler).Sampling()
		if s.Temperature == nil || *s.Temperature != want || s.Seed == nil || *s.Seed != int64(seed>>1) {
			t.Errorf("attempt %d: sampling %+v, want temperature %g and seed %d", attempt, s, want, int64(seed>>1))
		}
	}
	temp := 0.5
	c.Process.Temperatures, c.Model.SendSeed, c.Model.Temperature = nil, false, &temp
	if newModel, err = models(c, openai.NewLimiter(1)); err != nil {
		t.Fatal(err)
	}
	for attempt := range 3 {
		s := newModel(scheduler.AgentInput{Attempt: attempt, Seed: 7}).(agent.Sampler).Sampling()
		if s.Temperature == nil || *s.Temperature != temp || s.Seed != nil {
			t.Errorf("attempt %d: sampling %+v, want temperature %g and no seed", attempt, s, temp)
		}
	}
}

// TestModelKeyMustBeSet: a [model] api_key_env that names an unset
// variable is the user's mistake, with what to export.
func TestModelKeyMustBeSet(t *testing.T) {
	c := &config.Config{}
	c.Model.Name, c.Model.BaseURL, c.Model.APIKeyEnv = "m", "http://127.0.0.1:9/v1", "PROCTOR_TEST_UNSET_KEY"
	t.Setenv("PROCTOR_TEST_UNSET_KEY", "")
	_, err := models(c, openai.NewLimiter(1))
	if !fault.IsUsage(err) || fault.Hint(err) != "export PROCTOR_TEST_UNSET_KEY=... before running" {
		t.Errorf("unset key: %v (hint %q)", err, fault.Hint(err))
	}
}

func TestGrantsWith(t *testing.T) {
	for _, tc := range []struct {
		granted, declared []string
		want              string
	}{
		{nil, nil, "grants = []"},
		{[]string{"host.info"}, []string{"host.info", "model.complete"}, `grants = ["host.info", "model.complete"]`},
		{[]string{"dataset.read"}, []string{"host.info"}, `grants = ["dataset.read", "host.info"]`},
	} {
		if got := GrantsWith(tc.granted, tc.declared); got != tc.want {
			t.Errorf("GrantsWith(%q, %q) = %s, want %s", tc.granted, tc.declared, got, tc.want)
		}
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv("PROCTOR_CACHE_DIR", "/some/cache")
	if d := CacheDir(); d != "/some/cache" {
		t.Errorf("with PROCTOR_CACHE_DIR: %s", d)
	}
	t.Setenv("PROCTOR_CACHE_DIR", "")
	if d := CacheDir(); filepath.Base(d) != "proctor" && filepath.Base(d) != "proctor-cache" {
		t.Errorf("without PROCTOR_CACHE_DIR: %s", d)
	}
}

// TestEvalParts: the evaluations of [serve] steps_per_eval run the same
// plugin with [serve.eval] config; the training parts keep theirs.
func TestEvalParts(t *testing.T) {
	c := &config.Config{}
	c.Env.Config = map[string]any{"split": "train"}
	c.Serve.Eval.Config = map[string]any{"split": "test"}
	train := &env.Plugin{Config: json.RawMessage(`{"split":"train"}`)}
	parts := EvalParts(hostrun.Parts{Env: train}, c)
	if got := string(parts.Env.(*env.Plugin).Config); got != string(c.EvalConfig()) {
		t.Errorf("eval config %s, want %s", got, c.EvalConfig())
	}
	if got := string(train.Config); got != `{"split":"train"}` {
		t.Errorf("the training parts' config became %s", got)
	}
}

// TestJudgeSharesRunLimiter: a judge's request holds the run's limiter,
// the one the agent's requests go through, so [model]
// max_concurrent_requests bounds both together.
func TestJudgeSharesRunLimiter(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, openaitest.Reply("SCORE: 5"))
	}))
	defer srv.Close()
	c := &config.Config{}
	c.Model.Name, c.Model.BaseURL, c.Model.MaxConcurrent = "judge-model", srv.URL+"/v1", 2
	lim := openai.NewLimiter(c.Model.MaxConcurrent)
	complete, err := JudgeModel(c, lim)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := complete(context.Background(), abi.ModelRequest{Messages: []abi.ChatMessage{{Role: "user", Content: "grade"}}})
		done <- err
	}()
	<-arrived
	if n := lim.InFlight(); n != 1 {
		t.Errorf("the run's limiter holds %d requests while the judge's is in flight, want 1", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
