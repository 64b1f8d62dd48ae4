package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// Config is a whole run configuration.
type Config struct {
	Run     Run      `toml:"run" json:"run"`
	Model   Model    `toml:"model" json:"model"`
	Agent   Agent    `toml:"agent" json:"agent"`
	Sandbox Sandbox  `toml:"sandbox" json:"sandbox"`
	Env     Env      `toml:"env" json:"env"`
	Reward  []Reward `toml:"reward" json:"reward,omitempty"`
	Process Process  `toml:"process" json:"process"`
	Serve   Serve    `toml:"serve" json:"serve"`

	// Path is the config file; BaseDir resolves relative paths in it.
	Path    string `toml:"-" json:"-"`
	BaseDir string `toml:"-" json:"-"`
}

// Run is the [run] section.
type Run struct {
	Name                    string   `toml:"name" json:"name"`
	OutDir                  string   `toml:"out_dir" json:"out_dir"`
	Concurrency             int      `toml:"concurrency" json:"concurrency"`
	SandboxStartConcurrency int      `toml:"sandbox_start_concurrency" json:"sandbox_start_concurrency"`
	Attempts                int      `toml:"attempts" json:"attempts"`
	Retries                 int      `toml:"retries" json:"retries"`
	Seed                    uint64   `toml:"seed" json:"seed"`
	SandboxStartTimeout     Duration `toml:"sandbox_start_timeout" json:"sandbox_start_timeout"`
	SetupTimeout            Duration `toml:"setup_timeout" json:"setup_timeout"`
	AgentTimeout            Duration `toml:"agent_timeout" json:"agent_timeout"`
	AgentTimeoutScale       float64  `toml:"agent_timeout_scale" json:"agent_timeout_scale"`
	VerifyTimeout           Duration `toml:"verify_timeout" json:"verify_timeout"`
	TeardownTimeout         Duration `toml:"teardown_timeout" json:"teardown_timeout"`
	ProgressInterval        Duration `toml:"progress_interval" json:"progress_interval"`
	// VerifierFailure is what a verifier that ran and reached no reward
	// (its tests past their timeout, no reward file, an empty or
	// unreadable one) makes of a rollout: VerifierOutcome (the default,
	// Harbor's: the outcome verifier_failed, reward 0, never retried) or
	// VerifierInfraError (an infra_error of class verifier, retried).
	VerifierFailure string `toml:"verifier_failure" json:"verifier_failure"`

	// Prestart is how many rollouts may have their sandbox started ahead
	// of their turn while others run; 0 turns it off. Default: the
	// concurrency, at most DefaultPrestartMax.
	Prestart *int `toml:"prestart" json:"prestart"`
}

// Model is the [model] section.
type Model struct {
	BaseURL        string         `toml:"base_url" json:"base_url"`
	Name           string         `toml:"name" json:"name"`
	APIKeyEnv      string         `toml:"api_key_env" json:"api_key_env"`
	Temperature    *float64       `toml:"temperature" json:"temperature,omitempty"`
	MaxTokens      int            `toml:"max_tokens" json:"max_tokens,omitempty"`
	ExtraBody      map[string]any `toml:"extra_body" json:"extra_body,omitempty"`
	RequestTimeout Duration       `toml:"request_timeout" json:"request_timeout"`
	RetryBudget    int            `toml:"retry_budget" json:"retry_budget"`
	MaxConcurrent  int            `toml:"max_concurrent_requests" json:"max_concurrent_requests"`
	Prices         Prices         `toml:"prices" json:"prices"`
	// ReturnTokens asks the endpoint for token ids and logprobs of every
	// call (vLLM, SGLang), for exact training data.
	ReturnTokens bool `toml:"return_tokens" json:"return_tokens"`
	// SendSeed sends each rollout's seed (from run.seed, task and attempt)
	// as the request's "seed", so sampling can be replayed where the
	// endpoint honours it.
	SendSeed bool `toml:"send_seed" json:"send_seed"`
	// MaxResponseMB caps one answer's body (default 32); a larger answer
	// is a model error.
	MaxResponseMB int64 `toml:"max_response_mb" json:"max_response_mb,omitempty"`
	// API is the wire format the endpoint speaks: "chat" (Chat
	// Completions, the default), "responses", "anthropic" or "gemini".
	// An installed agent that speaks the same is passed through; any
	// other is translated to chat, which needs "chat" here.
	API string `toml:"api" json:"api,omitempty"`
}

// Process is the [process] section: rollout generation for training
// (proctor process).
type Process struct {
	// GroupSize is the number of rollouts per task (default 8).
	GroupSize int `toml:"group_size" json:"group_size"`
	// Temperatures, when set, give attempt i the temperature
	// Temperatures[i % len]; otherwise every attempt uses [model]'s.
	Temperatures []float64 `toml:"temperatures" json:"temperatures,omitempty"`
	// MinReward drops groups whose best reward is below it, and SFT lines
	// below it.
	MinReward *float64 `toml:"min_reward" json:"min_reward,omitempty"`
	// DropEqualScores drops groups whose rollouts all scored the same.
	DropEqualScores bool `toml:"drop_equal_scores" json:"drop_equal_scores"`
	// MaxTokens drops groups with a rollout of this many tokens or more,
	// as Atropos's max_token_len does (0: no limit).
	MaxTokens int `toml:"max_tokens" json:"max_tokens,omitempty"`
}

// Serve is the [serve] section: proctor serve, proctor as a live
// environment of Atropos' rollout API. Groups are shaped and filtered by
// [process]; these keys say how the environment meets the trainer. Their
// names and defaults are those of Atropos' BaseEnvConfig
// (atroposlib/envs/base.py) where it has the setting.
type Serve struct {
	// API is the rollout API's URL (Atropos' rollout_server_url).
	API string `toml:"api" json:"api"`
	// Name is the name the environment registers under (desired_name;
	// default run.name). The API answers with it and a number: name_0.
	Name string `toml:"name" json:"name,omitempty"`
	// Weight is the environment's share of the batches against other
	// environments (inference_weight, default 1).
	Weight *float64 `toml:"weight" json:"weight,omitempty"`
	// MinBatchAllocation is the smallest fraction of each batch kept
	// for this environment's groups (0 to 1; unset: none).
	MinBatchAllocation *float64 `toml:"min_batch_allocation" json:"min_batch_allocation,omitempty"`
	// MaxTokenLength is the token length registered with the API, which
	// weighs environments against each other (default [process]
	// max_tokens, else Atropos' 2048).
	MaxTokenLength int `toml:"max_token_length" json:"max_token_length"`
	// MaxBatchesOffpolicy stops generation while the API holds this many
	// batches the trainer has not taken (default 3; -1: never stop).
	MaxBatchesOffpolicy int `toml:"max_batches_offpolicy" json:"max_batches_offpolicy"`
	// MaxGroups is how many groups run at once (Atropos' max_num_workers;
	// default run.concurrency / group_size, at least 1).
	MaxGroups int `toml:"max_groups" json:"max_groups"`
	// TotalSteps ends serving once the trainer is this many steps in,
	// counting the batches queued (0: the trainer's num_steps).
	TotalSteps int `toml:"total_steps" json:"total_steps,omitempty"`
	// Epochs is how many times every task is served (0: until the
	// trainer's steps are done).
	Epochs int `toml:"epochs" json:"epochs,omitempty"`
	// StepsPerEval runs an evaluation every this many trainer steps (0:
	// none).
	StepsPerEval int `toml:"steps_per_eval" json:"steps_per_eval,omitempty"`
	// EvalHandling is what training does while an evaluation runs:
	// STOP_TRAIN, LIMIT_TRAIN (eval_limit_ratio of max_groups) or NONE.
	EvalHandling   string  `toml:"eval_handling" json:"eval_handling"`
	EvalLimitRatio float64 `toml:"eval_limit_ratio" json:"eval_limit_ratio"`
	// IncludeMessages sends each rollout's chat messages with its group.
	IncludeMessages bool `toml:"include_messages" json:"include_messages"`
	// OnInterrupt is what Ctrl-C does to the groups running: "drop" (stop
	// them; a restart runs them again) or "finish" (let them finish and
	// send them).
	OnInterrupt string `toml:"on_interrupt" json:"on_interrupt"`
	// DrainTimeout bounds the sending of whole groups after Ctrl-C or at
	// the end; what is not sent by then waits in the index for the next
	// start.
	DrainTimeout Duration  `toml:"drain_timeout" json:"drain_timeout"`
	Eval         ServeEval `toml:"eval" json:"eval"`
}

// ServeEval is [serve.eval]: the evaluation proctor serve runs every
// steps_per_eval steps.
type ServeEval struct {
	// Config is laid over [env.config] for the evaluation's tasks (a
	// held-out split, other task ids).
	Config map[string]any `toml:"config" json:"config,omitempty"`
	// Attempts per task (default 1).
	Attempts int `toml:"attempts" json:"attempts"`
	// Concurrency is the evaluation's rollouts at once (Atropos'
	// max_eval_workers; default run.concurrency).
	Concurrency int `toml:"concurrency" json:"concurrency"`
}

// Eval handling modes of [serve] eval_handling (Atropos' EvalHandlingEnum).
const (
	EvalStopTrain  = "STOP_TRAIN"
	EvalLimitTrain = "LIMIT_TRAIN"
	EvalNone       = "NONE"
)

// EvalConfig is the plugin config of the serve evaluation's tasks:
// [env.config] with [serve.eval] config laid over it, key by key.
func (c *Config) EvalConfig() json.RawMessage {
	m := make(map[string]any, len(c.Env.Config)+len(c.Serve.Eval.Config))
	for k, v := range c.Env.Config {
		m[k] = v
	}
	for k, v := range c.Serve.Eval.Config {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// Prices are US dollars per million tokens.
type Prices struct {
	InputPerMTok       float64 `toml:"input_per_mtok" json:"input_per_mtok"`
	OutputPerMTok      float64 `toml:"output_per_mtok" json:"output_per_mtok"`
	CachedInputPerMTok float64 `toml:"cached_input_per_mtok" json:"cached_input_per_mtok"`
}

// Cost prices tokens in US dollars: prompt tokens (cached ones among
// them at the cached price) and completion tokens.
func (p Prices) Cost(prompt, cached, completion int64) float64 {
	return (float64(prompt-cached)*p.InputPerMTok + float64(cached)*p.CachedInputPerMTok + float64(completion)*p.OutputPerMTok) / 1e6
}

// Agent is the [agent] section.
type Agent struct {
	Kind         string   `toml:"kind" json:"kind"`
	MaxTurns     int      `toml:"max_turns" json:"max_turns"`
	Tools        []string `toml:"tools" json:"tools"`
	SystemPrompt string   `toml:"system_prompt" json:"system_prompt,omitempty"`
	Script       string   `toml:"script" json:"script,omitempty"`

	// TerminalTimeout is hermes' TERMINAL_TIMEOUT in seconds: a terminal
	// command's default time limit and the longest process wait.
	TerminalTimeout int `toml:"terminal_timeout" json:"terminal_timeout"`

	// Installed agents (kind = "installed", docs/agents.md). Name is a
	// bundled definition (claude-code, codex, gemini-cli, opencode) or
	// the path to one, relative to the config file; Version replaces the
	// version the definition pins.
	Name    string `toml:"name" json:"name,omitempty"`
	Version string `toml:"version" json:"version,omitempty"`
	// TokenLimit ends a rollout whose model calls used this many tokens,
	// prompt and completion summed over its calls (stop reason
	// "token_limit"); CostLimitUSD one that spent this much at [model]
	// prices ("cost_limit"). 0: no limit. MaxTurns bounds its model calls.
	TokenLimit   int64   `toml:"token_limit" json:"token_limit,omitempty"`
	CostLimitUSD float64 `toml:"cost_limit_usd" json:"cost_limit_usd,omitempty"`
	// MaxLogMB caps the agent's own logs kept per rollout (default 16).
	MaxLogMB int64 `toml:"max_log_mb" json:"max_log_mb,omitempty"`
	// terminalDefault: the config left terminal_timeout out.
	terminalDefault bool

	// Terminus2 and MiniSWEAgent tune the reference agents of those kinds
	// (docs/agents.md); their zero values are the references' defaults.
	Terminus2    Terminus2    `toml:"terminus_2,omitempty" json:"terminus_2,omitzero"`
	MiniSWEAgent MiniSWEAgent `toml:"mini_swe_agent,omitempty" json:"mini_swe_agent,omitzero"`
}

// Agent kinds that reproduce a benchmark's reference agent.
const (
	KindTerminus2    = "terminus-2"
	KindMiniSWEAgent = "mini-swe-agent"
)

// Terminus2 is [agent.terminus_2]: arguments of Harbor's Terminus2 agent,
// by their Harbor names.
type Terminus2 struct {
	ParserName                      string `toml:"parser_name" json:"parser_name"`
	TmuxPaneWidth                   int    `toml:"tmux_pane_width" json:"tmux_pane_width"`
	TmuxPaneHeight                  int    `toml:"tmux_pane_height" json:"tmux_pane_height"`
	EnableSummarize                 *bool  `toml:"enable_summarize" json:"enable_summarize"`
	ProactiveSummarizationThreshold *int   `toml:"proactive_summarization_threshold" json:"proactive_summarization_threshold"`
	InterleavedThinking             bool   `toml:"interleaved_thinking" json:"interleaved_thinking"`
	RecordTerminalSession           *bool  `toml:"record_terminal_session" json:"record_terminal_session"`
	// MaxInputTokens and MaxOutputTokens are Harbor's model_info: the
	// model's context, for summarization, and its output limit, for the
	// message after a reply cut at it (0: unknown, Harbor's fallbacks).
	MaxInputTokens  int `toml:"max_input_tokens" json:"max_input_tokens,omitempty"`
	MaxOutputTokens int `toml:"max_output_tokens" json:"max_output_tokens,omitempty"`
}

// MiniSWEAgent is [agent.mini_swe_agent]: settings of mini-swe-agent's
// swebench.yaml, by their names there.
type MiniSWEAgent struct {
	CostLimit                  *float64 `toml:"cost_limit" json:"cost_limit"`
	MaxConsecutiveFormatErrors *int     `toml:"max_consecutive_format_errors" json:"max_consecutive_format_errors"`
	// Cwd is environment.cwd (default /testbed where it exists, else the
	// task's working directory); Timeout environment.timeout in seconds.
	Cwd     string `toml:"cwd" json:"cwd,omitempty"`
	Timeout int    `toml:"timeout" json:"timeout"`
}

// Sandbox is the [sandbox] section.
type Sandbox struct {
	Backend string `toml:"backend" json:"backend"`
	// Network is what a task that asks for the internet gets: NetworkAuto
	// (the default) the backend's ordinary network, "host" the host's,
	// "none" nothing (the record of each such rollout says it was
	// withheld). A task that does not ask gets none in every mode.
	Network  string  `toml:"network" json:"network"`
	CPUs     float64 `toml:"cpus" json:"cpus,omitempty"`
	MemoryMB int64   `toml:"memory_mb" json:"memory_mb,omitempty"`
	PidsMax  int64   `toml:"pids_max" json:"pids_max,omitempty"`
	// DiskMB is what a sandbox may write, for tasks that set no limit of
	// their own (default 10240).
	DiskMB int64 `toml:"disk_mb" json:"disk_mb,omitempty"`
	// DiskInodes is how many files, folders and links a sandbox may
	// create, for tasks that set no limit of their own (default
	// 1,000,000).
	DiskInodes int64 `toml:"disk_inodes" json:"disk_inodes,omitempty"`
	Pull       bool  `toml:"pull" json:"pull"`
	// Isolation keeps the agent's processes apart from the verifier's
	// (docker: the warden's namespaces, which need CAP_SYS_ADMIN in the
	// container's bounding set). Default true; off only for engines that
	// refuse the capability, and then tasks with private verifier folders
	// cannot run.
	Isolation *bool `toml:"isolation" json:"isolation,omitempty"`
	// Kubernetes is [sandbox.kubernetes], for backend = "kubernetes".
	Kubernetes *Kubernetes `toml:"kubernetes,omitempty" json:"kubernetes,omitempty"`
}

// Kubernetes is the [sandbox.kubernetes] section (docs/kubernetes.md).
type Kubernetes struct {
	Kubeconfig       string            `toml:"kubeconfig" json:"kubeconfig,omitempty"`
	Context          string            `toml:"context" json:"context,omitempty"`
	Namespace        string            `toml:"namespace" json:"namespace,omitempty"`
	NodeSelector     map[string]string `toml:"node_selector" json:"node_selector,omitempty"`
	Tolerations      []Toleration      `toml:"tolerations" json:"tolerations,omitempty"`
	RuntimeClass     string            `toml:"runtime_class" json:"runtime_class,omitempty"`
	ImagePullSecrets []string          `toml:"image_pull_secrets" json:"image_pull_secrets,omitempty"`
	ServiceAccount   string            `toml:"service_account" json:"service_account,omitempty"`
	QPS              float64           `toml:"qps" json:"qps,omitempty"`
	Burst            int               `toml:"burst" json:"burst,omitempty"`
	Registry         string            `toml:"registry" json:"registry,omitempty"`
	RequestFraction  float64           `toml:"request_fraction" json:"request_fraction,omitempty"`
	ScheduleTimeout  Duration          `toml:"schedule_timeout" json:"schedule_timeout"`
	ActiveDeadline   Duration          `toml:"active_deadline" json:"active_deadline"`
	// SeccompProfile is the Localhost seccomp profile isolated pods ask
	// for, relative to the kubelet's seccomp folder.
	SeccompProfile string `toml:"seccomp_profile" json:"seccomp_profile,omitempty"`
}

// Toleration is one of [sandbox.kubernetes] tolerations.
type Toleration struct {
	Key      string `toml:"key" json:"key,omitempty"`
	Operator string `toml:"operator" json:"operator,omitempty"`
	Value    string `toml:"value" json:"value,omitempty"`
	Effect   string `toml:"effect" json:"effect,omitempty"`
	Seconds  *int64 `toml:"seconds" json:"seconds,omitempty"`
}

// [run] verifier_failure values.
const (
	VerifierOutcome    = "outcome"
	VerifierInfraError = "infra_error"
)

// NetworkAuto is [sandbox] network's default.
const NetworkAuto = "auto"

// Isolated reports whether sandboxes keep the agent apart (the default).
func (s Sandbox) Isolated() bool { return s.Isolation == nil || *s.Isolation }

// Env is the [env] section: the environment plugin and its config.
type Env struct {
	Plugin      string         `toml:"plugin" json:"plugin"`
	SHA256      string         `toml:"sha256" json:"sha256,omitempty"`
	Grants      []string       `toml:"grants" json:"grants"`
	HookTimeout Duration       `toml:"hook_timeout" json:"hook_timeout"`
	MemoryMB    int            `toml:"memory_mb" json:"memory_mb,omitempty"`
	Config      map[string]any `toml:"config" json:"config"`
	// RewardWeight weighs the verifier's reward when [[reward]] plugins
	// are stacked (default 1).
	RewardWeight *float64 `toml:"reward_weight" json:"reward_weight,omitempty"`
}

// Reward is one [[reward]] plugin stacked on the environment's verifier.
// The run's reward is env.reward_weight × the verifier's reward plus each
// stacked reward × its weight.
type Reward struct {
	Plugin string         `toml:"plugin" json:"plugin"`
	Name   string         `toml:"name" json:"name"`
	Weight *float64       `toml:"weight" json:"weight"`
	SHA256 string         `toml:"sha256" json:"sha256,omitempty"`
	Grants []string       `toml:"grants" json:"grants"`
	Config map[string]any `toml:"config" json:"config,omitempty"`
}

// Duration is a time.Duration written as a string ("30m", "90s").
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q: write it like \"90s\", \"30m\" or \"1h30m\"", b)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration back as a string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }
