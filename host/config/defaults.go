package config

import (
	"path/filepath"
	"strings"
	"time"
)

// DefaultPrestartMax bounds the default [run] prestart: a pool that size
// keeps up with rollouts finishing many times a second, and a run with
// 1,000 in flight does not hold 1,000 more sandboxes idle.
const DefaultPrestartMax = 32

// A terminal command's default time limit in seconds: hermes-agent's
// TERMINAL_TIMEOUT, and the 300 its Terminal-Bench 2 environment sets
// (environments/benchmarks/terminalbench_2/terminalbench2_env.py:218 at
// 475205e3), which runs on the bundled tb2 plugin take.
const (
	DefaultTerminalTimeout = 180
	TB2TerminalTimeout     = 300
)

// ForPlugin fills in the defaults that depend on the environment plugin
// the run loaded (by its manifest's name, whatever path or reference
// named it): hermes' Terminal-Bench 2 environment gives terminal commands
// 300 s, so a run of the tb2 plugin that sets no terminal_timeout does too.
func (c *Config) ForPlugin(name string) {
	if name == "tb2" && c.Agent.terminalDefault {
		c.Agent.TerminalTimeout = TB2TerminalTimeout
	}
}

// DefaultRewardGrants are the host operations a reward plugin may use
// unless its [[reward]] table says otherwise. model.complete (for judges)
// must be granted explicitly.
var DefaultRewardGrants = []string{"host.info"}

// DefaultGrants are the host operations a plugin may use unless the config
// says otherwise.
var DefaultGrants = []string{"sandbox.exec", "sandbox.read_file", "sandbox.write_file", "sandbox.upload", "sandbox.download", "sandbox.reset", "dataset.read", "host.info"}

// defaults fills in every default of a run, section by section; the
// later sections' defaults read the earlier ones' ([serve] takes the run's
// name and concurrency).
func (c *Config) defaults() {
	c.runDefaults()
	c.agentDefaults()
	c.sandboxDefaults()
	c.serveDefaults()
	c.rewardDefaults()
}

// runDefaults fills in [run].
func (c *Config) runDefaults() {
	r := &c.Run
	if r.Name == "" {
		r.Name = strings.TrimSuffix(filepath.Base(c.Path), filepath.Ext(c.Path))
	}
	if r.OutDir == "" {
		r.OutDir = "runs"
	}
	if r.Concurrency == 0 {
		r.Concurrency = 4
	}
	if r.SandboxStartConcurrency == 0 {
		r.SandboxStartConcurrency = r.Concurrency
	}
	if r.Prestart == nil {
		n := min(r.Concurrency, DefaultPrestartMax)
		r.Prestart = &n
	}
	if r.Attempts == 0 {
		r.Attempts = 1
	}
	if r.AgentTimeout.Duration == 0 {
		r.AgentTimeout.Duration = 30 * time.Minute
	}
	if r.AgentTimeoutScale == 0 {
		r.AgentTimeoutScale = 1
	}
	if r.VerifyTimeout.Duration == 0 {
		r.VerifyTimeout.Duration = 15 * time.Minute
	}
	if r.SandboxStartTimeout.Duration == 0 {
		r.SandboxStartTimeout.Duration = 20 * time.Minute
	}
	if r.SetupTimeout.Duration == 0 {
		r.SetupTimeout.Duration = 10 * time.Minute
	}
	if r.TeardownTimeout.Duration == 0 {
		r.TeardownTimeout.Duration = 2 * time.Minute
	}
	if r.ProgressInterval.Duration == 0 {
		r.ProgressInterval.Duration = 30 * time.Second
	}
	if r.VerifierFailure == "" {
		r.VerifierFailure = VerifierOutcome
	}
}

// agentDefaults fills in [agent] and [model].
func (c *Config) agentDefaults() {
	if c.Agent.Kind == "" {
		c.Agent.Kind = "llm"
	}
	if c.Agent.MaxTurns == 0 && (c.Agent.Kind == "llm" || c.Agent.Kind == "replay") {
		c.Agent.MaxTurns = 60
	}
	c.referenceDefaults()
	if c.Agent.Tools == nil {
		c.Agent.Tools = []string{"terminal", "file"}
	}
	if c.Agent.TerminalTimeout == 0 {
		c.Agent.TerminalTimeout, c.Agent.terminalDefault = DefaultTerminalTimeout, true
	}
	if c.Model.RequestTimeout.Duration == 0 {
		c.Model.RequestTimeout.Duration = 10 * time.Minute
	}
	if c.Model.RetryBudget == 0 {
		c.Model.RetryBudget = 8
	}
	if c.Model.MaxConcurrent == 0 {
		c.Model.MaxConcurrent = 64
	}
	if c.Model.API == "" {
		c.Model.API = "chat"
	}
}

// sandboxDefaults fills in [sandbox], [env] and [process].
func (c *Config) sandboxDefaults() {
	if c.Sandbox.Backend == "" {
		c.Sandbox.Backend = "docker"
	}
	if c.Sandbox.Network == "" {
		c.Sandbox.Network = NetworkAuto
	}
	if c.Env.Grants == nil {
		c.Env.Grants = DefaultGrants
	}
	if c.Env.HookTimeout.Duration == 0 {
		c.Env.HookTimeout.Duration = 2 * time.Minute
	}
	if c.Env.MemoryMB == 0 {
		c.Env.MemoryMB = 256
	}
	if c.Env.Config == nil {
		c.Env.Config = map[string]any{}
	}
	if c.Process.GroupSize == 0 {
		c.Process.GroupSize = 8
	}
}

// rewardDefaults fills in each [[reward]].
func (c *Config) rewardDefaults() {
	for i := range c.Reward {
		rw := &c.Reward[i]
		if rw.Weight == nil {
			one := 1.0
			rw.Weight = &one
		}
		if rw.Grants == nil {
			rw.Grants = DefaultRewardGrants
		}
	}
}

func (c *Config) serveDefaults() {
	s := &c.Serve
	if s.API == "" {
		s.API = "http://localhost:8000" // Atropos' rollout_server_url
	}
	if s.Name == "" {
		s.Name = c.Run.Name
	}
	if s.Weight == nil {
		one := 1.0
		s.Weight = &one
	}
	if s.MaxTokenLength == 0 {
		s.MaxTokenLength = 2048
		if c.Process.MaxTokens > 0 {
			s.MaxTokenLength = c.Process.MaxTokens
		}
	}
	if s.MaxBatchesOffpolicy == 0 {
		s.MaxBatchesOffpolicy = 3
	}
	if s.MaxGroups == 0 {
		s.MaxGroups = max(1, c.Run.Concurrency/max(c.Process.GroupSize, 1))
	}
	if s.EvalHandling == "" {
		s.EvalHandling = EvalStopTrain
	}
	s.EvalHandling = strings.ToUpper(s.EvalHandling) // pydantic's enum takes the value; be kind to case
	if s.EvalLimitRatio == 0 {
		s.EvalLimitRatio = 0.5
	}
	if s.OnInterrupt == "" {
		s.OnInterrupt = "drop"
	}
	if s.DrainTimeout.Duration == 0 {
		s.DrainTimeout.Duration = time.Minute
	}
	if s.Eval.Attempts == 0 {
		s.Eval.Attempts = 1
	}
	if s.Eval.Concurrency == 0 {
		s.Eval.Concurrency = c.Run.Concurrency
	}
}

// referenceDefaults fills in the reference agents' defaults that are not
// their zero values: swebench.yaml's cost limit, consecutive format
// errors and timeout; Harbor's summarization and recording, on.
func (c *Config) referenceDefaults() {
	t, m := &c.Agent.Terminus2, &c.Agent.MiniSWEAgent
	if c.Agent.Kind != KindTerminus2 {
		*t = Terminus2{}
	} else if t.ParserName == "" {
		t.ParserName = "json"
	}
	if c.Agent.Kind == KindTerminus2 {
		if t.EnableSummarize == nil {
			t.EnableSummarize = ptr(true)
		}
		if t.ProactiveSummarizationThreshold == nil {
			t.ProactiveSummarizationThreshold = ptr(8000)
		}
		if t.RecordTerminalSession == nil {
			t.RecordTerminalSession = ptr(true)
		}
		if t.TmuxPaneWidth == 0 {
			t.TmuxPaneWidth = 160
		}
		if t.TmuxPaneHeight == 0 {
			t.TmuxPaneHeight = 40
		}
	}
	if c.Agent.Kind != KindMiniSWEAgent {
		*m = MiniSWEAgent{}
		return
	}
	if m.CostLimit == nil {
		m.CostLimit = ptr(3.0)
	}
	if m.MaxConsecutiveFormatErrors == nil {
		m.MaxConsecutiveFormatErrors = ptr(3)
	}
	if m.Timeout == 0 {
		m.Timeout = 60
	}
}

func ptr[T any](v T) *T { return &v }
