package main

import (
	"fmt"
	"os"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host/config"
)

// modelFor builds the per-rollout model clients of the llm agent: one
// connection pool and one limiter for the run, one retry budget per
// rollout. The key comes from the environment variable the config names.
func modelFor(c *config.Config) (func() agent.Model, error) {
	key := ""
	if c.Model.APIKeyEnv != "" {
		key = os.Getenv(c.Model.APIKeyEnv)
		if key == "" {
			return nil, &usageError{err: fmt.Errorf("model.api_key_env names %s, which is not set", c.Model.APIKeyEnv), hint: "export " + c.Model.APIKeyEnv + "=... before running"}
		}
	}
	f := openai.NewFactory(openai.Config{
		BaseURL: c.Model.BaseURL, Model: c.Model.Name, APIKey: key,
		Temperature: c.Model.Temperature, MaxTokens: c.Model.MaxTokens, ExtraBody: c.Model.ExtraBody,
		RequestTimeout: c.Model.RequestTimeout.Duration, RetryBudget: c.Model.RetryBudget,
	}, openai.NewLimiter(c.Model.MaxConcurrent))
	return func() agent.Model { return f.New() }, nil
}
