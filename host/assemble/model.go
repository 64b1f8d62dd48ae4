package assemble

import (
	"fmt"
	"os"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/scheduler"
)

// models builds the per-rollout model clients of the llm agent: one
// connection pool for the run and the run's limiter (shared with judges),
// one retry budget per rollout. With [process] temperatures, attempt i samples at
// temperatures[i % len]; with [model] send_seed, a rollout's requests carry
// its seed. The key comes from the environment variable the config names.
func models(c *config.Config, lim *openai.Limiter) (func(in scheduler.AgentInput) agent.Model, error) {
	temps := []*float64{c.Model.Temperature}
	if len(c.Process.Temperatures) > 0 {
		temps = nil
		for i := range c.Process.Temperatures {
			temps = append(temps, &c.Process.Temperatures[i])
		}
	}
	var fs []*openai.Factory
	for _, temp := range temps {
		f, err := modelFactory(c, temp, lim)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	return func(in scheduler.AgentInput) agent.Model {
		f := fs[in.Attempt%len(fs)]
		if c.Model.SendSeed {
			return f.NewSeeded(int64(in.Seed >> 1)) // a non-negative int64: what endpoints accept
		}
		return f.New()
	}, nil
}

func modelFactory(c *config.Config, temp *float64, lim *openai.Limiter) (*openai.Factory, error) {
	key := ""
	if c.Model.APIKeyEnv != "" {
		key = os.Getenv(c.Model.APIKeyEnv)
		if key == "" {
			return nil, &fault.Usage{Err: fmt.Errorf("model.api_key_env names %s, which is not set", c.Model.APIKeyEnv), Hint: "export " + c.Model.APIKeyEnv + "=... before running"}
		}
	}
	return openai.NewFactory(openai.Config{
		BaseURL: c.Model.BaseURL, Model: c.Model.Name, APIKey: key,
		Temperature: temp, MaxTokens: c.Model.MaxTokens, ExtraBody: c.Model.ExtraBody,
		RequestTimeout: c.Model.RequestTimeout.Duration, RetryBudget: c.Model.RetryBudget,
		ReturnTokens:     c.Model.ReturnTokens,
		MaxResponseBytes: c.Model.MaxResponseMB << 20,
	}, lim), nil
}
