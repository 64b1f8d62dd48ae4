package main

import (
	"fmt"
	"os"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host"
	"github.com/proctor-dev/proctor/host/config"
)

// modelFor builds the per-rollout model clients of the llm agent: one
// connection pool and one limiter for the run, one retry budget per
// rollout. The key comes from the environment variable the config names.
func modelFor(c *config.Config) (func() agent.Model, error) {
	f, err := modelFactory(c, c.Model.Temperature)
	if err != nil {
		return nil, err
	}
	return func() agent.Model { return f.New() }, nil
}

// modelPerAttempt is modelFor with [process] temperatures: attempt i
// samples at temperatures[i % len], over one limiter for the run; with
// [model] send_seed, each rollout's requests carry the rollout's seed.
func modelPerAttempt(c *config.Config) (func(in host.AgentInput) agent.Model, error) {
	client := func(f *openai.Factory, in host.AgentInput) agent.Model {
		if c.Model.SendSeed {
			return f.NewSeeded(int64(in.Seed >> 1)) // a non-negative int64: what endpoints accept
		}
		return f.New()
	}
	if len(c.Process.Temperatures) == 0 {
		f, err := modelFactory(c, c.Model.Temperature)
		if err != nil {
			return nil, err
		}
		return func(in host.AgentInput) agent.Model { return client(f, in) }, nil
	}
	lim := openai.NewLimiter(c.Model.MaxConcurrent)
	var fs []*openai.Factory
	for _, temp := range c.Process.Temperatures {
		f, err := modelFactoryWith(c, &temp, lim)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	return func(in host.AgentInput) agent.Model { return client(fs[in.Attempt%len(fs)], in) }, nil
}

func modelFactory(c *config.Config, temp *float64) (*openai.Factory, error) {
	return modelFactoryWith(c, temp, openai.NewLimiter(c.Model.MaxConcurrent))
}

func modelFactoryWith(c *config.Config, temp *float64, lim *openai.Limiter) (*openai.Factory, error) {
	key := ""
	if c.Model.APIKeyEnv != "" {
		key = os.Getenv(c.Model.APIKeyEnv)
		if key == "" {
			return nil, &usageError{err: fmt.Errorf("model.api_key_env names %s, which is not set", c.Model.APIKeyEnv), hint: "export " + c.Model.APIKeyEnv + "=... before running"}
		}
	}
	return openai.NewFactory(openai.Config{
		BaseURL: c.Model.BaseURL, Model: c.Model.Name, APIKey: key,
		Temperature: temp, MaxTokens: c.Model.MaxTokens, ExtraBody: c.Model.ExtraBody,
		RequestTimeout: c.Model.RequestTimeout.Duration, RetryBudget: c.Model.RetryBudget,
		ReturnTokens: c.Model.ReturnTokens,
	}, lim), nil
}
