// Package config loads run configurations: TOML decoded strictly (an unknown
// key or a wrong type names the file, the line and the key, with the
// closest valid key), every key overridable with --set section.key=value,
// secrets only as names of environment variables.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/proctor-dev/proctor/sdk/abi"
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

// DefaultPrestartMax bounds the default [run] prestart: a pool that size
// keeps up with rollouts finishing many times a second, and a run with
// 1,000 in flight does not hold 1,000 more sandboxes idle.
const DefaultPrestartMax = 32

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

// A terminal command's default time limit in seconds: hermes-agent's
// TERMINAL_TIMEOUT, and the 300 its Terminal-Bench 2 environment sets
// (environments/benchmarks/terminalbench_2/terminalbench2_env.py:218 at
// 475205e3), which runs on the bundled tb2 plugin take.
const (
	DefaultTerminalTimeout = 180
	TB2TerminalTimeout     = 300
)

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

// ForPlugin fills in the defaults that depend on the environment plugin
// the run loaded (by its manifest's name, whatever path or reference
// named it): hermes' Terminal-Bench 2 environment gives terminal commands
// 300 s, so a run of the tb2 plugin that sets no terminal_timeout does too.
func (c *Config) ForPlugin(name string) {
	if name == "tb2" && c.Agent.terminalDefault {
		c.Agent.TerminalTimeout = TB2TerminalTimeout
	}
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

// DefaultRewardGrants are the host operations a reward plugin may use
// unless its [[reward]] table says otherwise. model.complete (for judges)
// must be granted explicitly.
var DefaultRewardGrants = []string{"host.info"}

// DefaultGrants are the host operations a plugin may use unless the config
// says otherwise.
var DefaultGrants = []string{"sandbox.exec", "sandbox.read_file", "sandbox.write_file", "sandbox.upload", "sandbox.download", "sandbox.reset", "dataset.read", "host.info"}

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

// Error is a config mistake: where, which key, what to do.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
	Hint string
}

func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	s := where + ": "
	if e.Key != "" {
		s += e.Key + ": "
	}
	return s + e.Msg
}

// Load reads path, applies the --set overrides, fills defaults and
// validates. Every mistake is an *Error.
func Load(path string, sets []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error(), Hint: "check the path of the config file"}
	}
	abs, _ := filepath.Abs(path)
	return Parse(data, abs, sets)
}

// Parse is Load for bytes already read; name is used in messages and to
// resolve relative paths.
func Parse(data []byte, name string, sets []string) (*Config, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, tomlError(name, err)
	}
	if err := checkKeys(raw, reflect.TypeOf(Config{}), "", name, data); err != nil {
		return nil, err
	}
	for _, s := range sets {
		if err := applySet(raw, s); err != nil {
			return nil, err
		}
		if err := checkKeys(raw, reflect.TypeOf(Config{}), "", "--set "+s, nil); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(raw); err != nil {
		return nil, &Error{File: name, Msg: err.Error()}
	}
	var c Config
	if _, err := toml.Decode(buf.String(), &c); err != nil {
		// Positions refer to the re-encoded text: find the key in the file.
		e := tomlError(name, err)
		ce, ok := e.(*Error)
		if m := lastKey.FindStringSubmatch(err.Error()); ok && m != nil {
			ce.Key, ce.Msg = m[1], strings.TrimPrefix(m[2], "incompatible types: ")
		}
		if ok && ce.Key != "" {
			ce.Line = lineOf(data, ce.Key)
		}
		return nil, e
	}
	c.Path = name
	c.BaseDir = filepath.Dir(name)
	c.defaults()
	if err := c.validate(data); err != nil {
		return nil, err
	}
	return &c, nil
}

var lastKey = regexp.MustCompile(`last key "([^"]+)"\): (.*)`)

func tomlError(name string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if strings.Contains(msg, "incompatible types") || strings.Contains(msg, "bad duration") {
			return &Error{File: name, Line: pe.Position.Line, Key: pe.LastKey, Msg: msg}
		}
		return &Error{File: name, Line: pe.Position.Line, Key: pe.LastKey, Msg: msg}
	}
	return &Error{File: name, Msg: err.Error()}
}

// checkKeys walks the decoded table against the struct's toml tags and
// reports the first unknown key with the closest valid one. Free-form
// tables (env.config, model.extra_body) are not checked.
func checkKeys(m map[string]any, t reflect.Type, prefix, file string, data []byte) error {
	valid := map[string]reflect.Type{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("toml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		valid[tag] = f.Type
		names = append(names, tag)
	}
	for _, k := range slices.Sorted(mapsKeys(m)) {
		full := strings.TrimPrefix(prefix+"."+k, ".")
		ft, ok := valid[k]
		if ok && ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if !ok {
			e := &Error{File: file, Key: full, Msg: "unknown key"}
			if data != nil {
				e.Line = lineOf(data, full)
			}
			if k == "api_key" || strings.HasSuffix(k, "_key") || k == "token" {
				e.Msg = "secrets do not go in config files"
				e.Hint = "put the key in an environment variable and name it with api_key_env"
			} else if best := closest(k, names); best != "" {
				e.Hint = fmt.Sprintf("did you mean %q?", strings.TrimPrefix(prefix+"."+best, "."))
			} else {
				e.Hint = "valid keys here: " + strings.Join(names, ", ")
			}
			return e
		}
		if ft.Kind() == reflect.Map {
			continue
		}
		switch v := m[k].(type) {
		case map[string]any:
			if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(Duration{}) {
				if err := checkKeys(v, ft, full, file, data); err != nil {
					return err
				}
			}
		case []map[string]any:
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				for _, item := range v {
					if err := checkKeys(item, ft.Elem(), full, file, data); err != nil {
						return err
					}
				}
			}
		case []any: // an array of inline tables
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				for _, item := range v {
					if item, ok := item.(map[string]any); ok {
						if err := checkKeys(item, ft.Elem(), full, file, data); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// lineOf finds the line where a dotted key is set, looking for its last
// part under its table header.
func lineOf(data []byte, key string) int {
	parts := strings.Split(key, ".")
	last := parts[len(parts)-1]
	table := strings.Join(parts[:len(parts)-1], ".")
	cur := ""
	header := regexp.MustCompile(`^\s*\[\[?\s*([^\]]+?)\s*\]\]?`)
	assign := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(last) + `"?\s*=`)
	for i, line := range strings.Split(string(data), "\n") {
		if m := header.FindStringSubmatch(line); m != nil {
			cur = m[1]
			if cur == key {
				return i + 1
			}
			continue
		}
		if cur == table && assign.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// closest returns the valid name nearest to k by edit distance, if close.
func closest(k string, names []string) string {
	best, bd := "", 1<<30
	for _, n := range names {
		if d := editDistance(k, n); d < bd {
			best, bd = n, d
		}
	}
	if bd <= max(2, len(k)/3) {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// applySet sets one dotted key from "a.b.c=value". The value is read as a
// TOML value (number, bool, array, quoted string), else as a plain string.
func applySet(raw map[string]any, s string) error {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return &Error{File: "--set", Msg: fmt.Sprintf("%q is not key=value", s), Hint: "write --set section.key=value, e.g. --set agent.max_turns=30"}
	}
	var holder map[string]any
	var val any = v
	if _, err := toml.Decode("v = "+v, &holder); err == nil {
		val = holder["v"]
	}
	parts := strings.Split(k, ".")
	m := raw
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = val
	return nil
}

func (c *Config) defaults() {
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
	c.serveDefaults()
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

// RewardConfig is the i-th [[reward]] table's config as JSON.
func (c *Config) RewardConfig(i int) json.RawMessage {
	b, _ := json.Marshal(c.Reward[i].Config)
	if c.Reward[i].Config == nil {
		b = []byte("{}")
	}
	return b
}

func (c *Config) validate(data []byte) error {
	bad := func(key, msg, hint string) error {
		return &Error{File: c.Path, Line: lineOf(data, key), Key: key, Msg: msg, Hint: hint}
	}
	oneOf := func(key, v string, allowed ...string) error {
		if !slices.Contains(allowed, v) {
			h := "one of: " + strings.Join(allowed, ", ")
			if b := closest(v, allowed); b != "" {
				h = fmt.Sprintf("did you mean %q?", b)
			}
			return bad(key, fmt.Sprintf("%q is not valid", v), h)
		}
		return nil
	}
	if err := checkName(c.Run.Name); err != nil {
		return bad("run.name", err.Error(), "run.name is a folder inside run.out_dir: to write elsewhere, set run.out_dir or --out")
	}
	switch {
	case c.Env.MemoryMB > MaxPluginMemoryMB:
		return bad("env.memory_mb", fmt.Sprintf("%d is over %d", c.Env.MemoryMB, MaxPluginMemoryMB), "a plugin is a 32-bit WebAssembly module: it can address at most 4 GiB")
	case c.Run.Concurrency < 1:
		return bad("run.concurrency", "must be at least 1", "")
	case c.Run.Attempts < 1:
		return bad("run.attempts", "must be at least 1", "")
	case c.Run.Attempts > MaxAttempts:
		return bad("run.attempts", fmt.Sprintf("%d is over %d, the most attempts a run makes of a task", c.Run.Attempts, MaxAttempts), "")
	case c.Run.Retries < 0:
		return bad("run.retries", "must not be negative", "")
	case c.Run.Prestart != nil && *c.Run.Prestart < 0:
		return bad("run.prestart", "must not be negative", "0 turns starting sandboxes ahead off")
	}
	if err := oneOf("run.verifier_failure", c.Run.VerifierFailure, VerifierOutcome, VerifierInfraError); err != nil {
		return err
	}
	if err := oneOf("agent.kind", c.Agent.Kind, "llm", "oracle", "nop", "replay", "installed", KindTerminus2, KindMiniSWEAgent); err != nil {
		return err
	}
	if err := c.validateReference(bad, oneOf); err != nil {
		return err
	}
	if err := c.validateInstalled(bad, oneOf); err != nil {
		return err
	}
	for _, t := range c.Agent.Tools {
		if err := oneOf("agent.tools", t, "terminal", "file"); err != nil {
			return err
		}
	}
	if c.Agent.TerminalTimeout < 0 {
		return bad("agent.terminal_timeout", fmt.Sprintf("terminal_timeout is %d", c.Agent.TerminalTimeout), "give seconds, e.g. 300 as hermes' Terminal-Bench 2 environment uses")
	}
	if err := oneOf("sandbox.backend", c.Sandbox.Backend, "docker", "local", "kubernetes"); err != nil {
		return err
	}
	if err := c.validateKubernetes(bad, oneOf); err != nil {
		return err
	}
	if err := oneOf("sandbox.network", c.Sandbox.Network, NetworkAuto, "none", "host"); err != nil {
		return err
	}
	switch {
	case c.Model.MaxResponseMB < 0:
		return bad("model.max_response_mb", "must not be negative", "")
	case c.Sandbox.CPUs < 0:
		return bad("sandbox.cpus", "must not be negative", "")
	case c.Sandbox.MemoryMB < 0:
		return bad("sandbox.memory_mb", "must not be negative", "")
	case c.Sandbox.PidsMax < 0:
		return bad("sandbox.pids_max", "must not be negative", "")
	case c.Sandbox.DiskMB < 0:
		return bad("sandbox.disk_mb", "must not be negative", "")
	case c.Sandbox.DiskInodes < 0:
		return bad("sandbox.disk_inodes", "must not be negative", "")
	}
	if c.Agent.Kind == "llm" {
		if c.Model.Name == "" {
			return bad("model.name", "the llm agent needs a model", `set [model] name = "..." and base_url, or use agent.kind = "oracle"`)
		}
		if c.Model.BaseURL == "" {
			return bad("model.base_url", "the llm agent needs an endpoint", `set [model] base_url = "https://.../v1"`)
		}
	}
	if c.Agent.Kind == "replay" && c.Agent.Script == "" {
		return bad("agent.script", "the replay agent needs a script file", `set [agent] script = "path/to/script.json"`)
	}
	if c.Env.Plugin == "" {
		return bad("env.plugin", "no environment plugin", `set [env] plugin = "tb2" (bundled) or a path to a .wasm file`)
	}
	switch {
	case c.Process.GroupSize < 1:
		return bad("process.group_size", "must be at least 1", "")
	case c.Process.GroupSize > MaxAttempts:
		return bad("process.group_size", fmt.Sprintf("%d is over %d, the most attempts a run makes of a task", c.Process.GroupSize, MaxAttempts), "")
	case c.Process.MaxTokens < 0:
		return bad("process.max_tokens", "must not be negative", "0 means no limit")
	}
	if err := c.validateServe(bad, oneOf); err != nil {
		return err
	}
	if err := checkGrants("env.grants", c.Env.Grants, bad); err != nil {
		return err
	}
	for _, rw := range c.Reward {
		if err := checkGrants("reward.grants", rw.Grants, bad); err != nil {
			return err
		}
	}
	names := map[string]bool{}
	for _, rw := range c.Reward {
		switch {
		case rw.Plugin == "":
			return bad("reward.plugin", "a [[reward]] table names no plugin", `set plugin = "path/to/reward.wasm" (or oci://...) in every [[reward]]`)
		case rw.Name != "" && names[rw.Name]:
			return bad("reward.name", fmt.Sprintf("two [[reward]] tables are named %q", rw.Name), "give each [[reward]] its own name")
		case math.IsNaN(*rw.Weight) || math.IsInf(*rw.Weight, 0):
			return bad("reward.weight", "must be a number", "")
		}
		names[rw.Name] = true
	}
	if c.Model.APIKeyEnv != "" && strings.ContainsAny(c.Model.APIKeyEnv, " -/") {
		return bad("model.api_key_env", "must name an environment variable, not hold the key", "e.g. api_key_env = \"OPENAI_API_KEY\"")
	}
	if key, msg := checkNumbers(reflect.ValueOf(*c), ""); key != "" {
		return bad(key, msg, "give a positive value, or leave the key out for its default")
	}
	return nil
}

// MaxPluginMemoryMB is the most memory a plugin instance can have: a
// 32-bit WebAssembly module addresses 4 GiB.
const MaxPluginMemoryMB = 4096

// Bounds on what a run plans, which it holds in memory before the first
// rollout starts: at most MaxAttempts attempts of a task ([run] attempts,
// [process] group_size, [serve.eval] attempts), and at most MaxRollouts
// rollouts (tasks times attempts).
const (
	MaxAttempts = 10_000
	MaxRollouts = 1_000_000
)

// checkName refuses a run name that is not one folder's name: it would
// put the run directory outside run.out_dir.
func checkName(name string) error {
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, 0) {
		return fmt.Errorf("%q is not a plain name", name)
	}
	return nil
}

// HTTPURL reports whether s is an http or https URL with a host.
func HTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// validateServe checks [serve]; bad and oneOf make the errors.
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

// validateReference checks the reference agents' settings, and that they
// have a model (or a recorded run to replay).
func (c *Config) validateReference(bad func(key, msg, hint string) error, oneOf func(key, v string, allowed ...string) error) error {
	t, m := c.Agent.Terminus2, c.Agent.MiniSWEAgent
	if c.Agent.MaxTurns < 0 {
		return bad("agent.max_turns", "must not be negative", "")
	}
	switch c.Agent.Kind {
	case KindTerminus2:
		if err := oneOf("agent.terminus_2.parser_name", t.ParserName, "json", "xml"); err != nil {
			return err
		}
	case KindMiniSWEAgent:
	default:
		return nil
	}
	switch {
	case t.TmuxPaneWidth < 0 || t.TmuxPaneHeight < 0:
		return bad("agent.terminus_2.tmux_pane_width", "the pane's size must not be negative", "Harbor's is 160 x 40")
	case t.MaxInputTokens < 0 || t.MaxOutputTokens < 0:
		return bad("agent.terminus_2.max_input_tokens", "token limits must not be negative", "0 means unknown")
	case m.CostLimit != nil && (*m.CostLimit < 0 || math.IsNaN(*m.CostLimit) || math.IsInf(*m.CostLimit, 0)):
		return bad("agent.mini_swe_agent.cost_limit", "must be a finite amount of dollars, 0 or more", "0 turns the limit off")
	case m.MaxConsecutiveFormatErrors != nil && *m.MaxConsecutiveFormatErrors < 0:
		return bad("agent.mini_swe_agent.max_consecutive_format_errors", "must not be negative", "0 turns the limit off")
	case m.Timeout < 0:
		return bad("agent.mini_swe_agent.timeout", "must not be negative", "seconds, 60 in swebench.yaml")
	}
	if c.Agent.Script == "" && (c.Model.Name == "" || c.Model.BaseURL == "") {
		return bad("model.name", "the "+c.Agent.Kind+" agent needs a model", `set [model] name = "..." and base_url = "https://.../v1", or [agent] script = a recorded run's transcript to replay`)
	}
	return nil
}

// validateInstalled checks [model] api and the keys of installed agents.
func (c *Config) validateInstalled(bad func(key, msg, hint string) error, oneOf func(key, v string, allowed ...string) error) error {
	if err := oneOf("model.api", c.Model.API, "chat", "responses", "anthropic", "gemini"); err != nil {
		return err
	}
	a := c.Agent
	switch {
	case a.TokenLimit < 0:
		return bad("agent.token_limit", "must not be negative", "0 means no limit")
	case a.CostLimitUSD < 0 || math.IsNaN(a.CostLimitUSD) || math.IsInf(a.CostLimitUSD, 0):
		return bad("agent.cost_limit_usd", fmt.Sprintf("%v is not a limit", a.CostLimitUSD), "give dollars, e.g. 2.5; 0 means no limit")
	case a.MaxLogMB < 0:
		return bad("agent.max_log_mb", "must not be negative", "")
	case a.Kind != "installed":
		return nil
	case a.Name == "":
		return bad("agent.name", "the installed agent needs a definition", `set [agent] name = "claude-code" (or codex, gemini-cli, opencode), or a path to a definition (.toml)`)
	case c.Model.Name == "":
		return bad("model.name", "the installed agent needs a model", `set [model] name = "..." and base_url`)
	case c.Model.BaseURL == "":
		return bad("model.base_url", "the installed agent needs an endpoint", `set [model] base_url = "https://.../v1"`)
	case c.Sandbox.Backend == "local":
		return bad("sandbox.backend", "an installed agent runs in an image, which the local backend does not run", `use [sandbox] backend = "docker" (or "kubernetes")`)
	case !c.Sandbox.Isolated():
		return bad("sandbox.isolation", "an installed agent reaches its model through the warden, which runs only with isolation", "remove isolation = false")
	}
	return nil
}

func (c *Config) validateServe(bad func(key, msg, hint string) error, oneOf func(key, v string, allowed ...string) error) error {
	s := c.Serve
	if !HTTPURL(s.API) {
		return bad("serve.api", fmt.Sprintf("%q is not an http(s) URL", s.API), `give the rollout API's address, e.g. api = "http://localhost:8000" (what run-api serves)`)
	}
	if err := oneOf("serve.eval_handling", s.EvalHandling, EvalStopTrain, EvalLimitTrain, EvalNone); err != nil {
		return err
	}
	if err := oneOf("serve.on_interrupt", s.OnInterrupt, "drop", "finish"); err != nil {
		return err
	}
	switch {
	case math.IsNaN(*s.Weight) || math.IsInf(*s.Weight, 0) || *s.Weight <= 0:
		return bad("serve.weight", "must be above 0", "the API divides by the weights of its environments; 1 is Atropos' default")
	case s.MinBatchAllocation != nil && !(*s.MinBatchAllocation >= 0 && *s.MinBatchAllocation <= 1):
		return bad("serve.min_batch_allocation", "must be between 0 and 1", "a fraction of each batch, e.g. 0.25")
	case s.MaxTokenLength < 1:
		return bad("serve.max_token_length", "must be at least 1", "")
	case s.MaxBatchesOffpolicy < -1:
		return bad("serve.max_batches_offpolicy", "must be -1 (never stop generating) or at least 1", "")
	case s.MaxGroups < 1:
		return bad("serve.max_groups", "must be at least 1", "")
	case s.TotalSteps < 0:
		return bad("serve.total_steps", "must not be negative", "0 takes the trainer's num_steps")
	case s.Epochs < 0:
		return bad("serve.epochs", "must not be negative", "0 serves the tasks until the trainer is done")
	case s.StepsPerEval < 0:
		return bad("serve.steps_per_eval", "must not be negative", "0 runs no evaluation")
	case !(s.EvalLimitRatio > 0 && s.EvalLimitRatio <= 1):
		return bad("serve.eval_limit_ratio", "must be above 0 and at most 1", "")
	case s.DrainTimeout.Duration < 0:
		return bad("serve.drain_timeout", "must not be negative", "")
	case s.Eval.Attempts < 1:
		return bad("serve.eval.attempts", "must be at least 1", "")
	case s.Eval.Attempts > MaxAttempts:
		return bad("serve.eval.attempts", fmt.Sprintf("%d is over %d, the most attempts a run makes of a task", s.Eval.Attempts, MaxAttempts), "")
	case s.Eval.Concurrency < 1:
		return bad("serve.eval.concurrency", "must be at least 1", "")
	}
	return nil
}

// validateKubernetes checks [sandbox.kubernetes]; without the section the
// backend takes everything from the kubeconfig.
func (c *Config) validateKubernetes(bad func(key, msg, hint string) error, oneOf func(key, v string, allowed ...string) error) error {
	k := c.Sandbox.Kubernetes
	if k == nil {
		return nil
	}
	if c.Sandbox.Backend != "kubernetes" {
		return bad("sandbox.kubernetes", fmt.Sprintf("set, but the backend is %q", c.Sandbox.Backend), `set [sandbox] backend = "kubernetes", or remove the section`)
	}
	switch {
	case k.RequestFraction < 0 || k.RequestFraction > 1:
		return bad("sandbox.kubernetes.request_fraction", "must be between 0 and 1", "requests are this fraction of the limits; 0 means 1 (requests equal limits)")
	case k.QPS < 0:
		return bad("sandbox.kubernetes.qps", "must not be negative", "")
	case k.Burst < 0:
		return bad("sandbox.kubernetes.burst", "must not be negative", "")
	case k.ScheduleTimeout.Duration < 0:
		return bad("sandbox.kubernetes.schedule_timeout", "must not be negative", "")
	case k.ActiveDeadline.Duration < 0:
		return bad("sandbox.kubernetes.active_deadline", "must not be negative", "")
	case k.SeccompProfile != "" && (strings.HasPrefix(k.SeccompProfile, "/") || slices.Contains(strings.Split(k.SeccompProfile, "/"), "..")):
		return bad("sandbox.kubernetes.seccomp_profile", fmt.Sprintf("%q is not a path inside the kubelet's seccomp folder", k.SeccompProfile), `write it relative to that folder, e.g. seccomp_profile = "proctor-isolated.json"`)
	case strings.Contains(k.Registry, "://"):
		return bad("sandbox.kubernetes.registry", fmt.Sprintf("%q has a scheme", k.Registry), `write host[:port][/path], e.g. registry = "127.0.0.1:5001/proctor"`)
	}
	for _, t := range k.Tolerations {
		if err := oneOf("sandbox.kubernetes.tolerations", t.Operator, "", "Equal", "Exists"); err != nil {
			return err
		}
		if err := oneOf("sandbox.kubernetes.tolerations", t.Effect, "", "NoSchedule", "PreferNoSchedule", "NoExecute"); err != nil {
			return err
		}
	}
	return nil
}

// checkGrants refuses a grant that names no host operation, with the
// closest one and the list of those that exist.
func checkGrants(key string, grants []string, bad func(key, msg, hint string) error) error {
	ops := abi.Ops()
	for _, g := range grants {
		if slices.Contains(ops, g) {
			continue
		}
		hint := "the host operations are " + strings.Join(ops, ", ")
		if best := closest(g, ops); best != "" {
			hint = fmt.Sprintf("did you mean %q? %s", best, hint)
		}
		return bad(key, fmt.Sprintf("unknown capability %q", g), hint)
	}
	return nil
}

// Resolve turns a path from the config into one relative to the current
// directory (relative paths in a config are relative to its folder).
func (c *Config) Resolve(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.BaseDir, p)
}

// Resolved is the configuration with every default filled in, as TOML. It
// holds no secret: only names of environment variables.
func (c *Config) Resolved() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("# resolved configuration of this run (defaults filled in)\n")
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Hash is the sha256 of the resolved configuration.
func (c *Config) Hash() string {
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Named is every string [env.config] holds, in tables and arrays too: the
// datasets (paths relative to the config file's folder, hf:// names) the
// plugin may read through dataset.read, whichever keys name them.
func (c *Config) Named() []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case []map[string]any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, k := range slices.Sorted(mapsKeys(x)) {
				walk(x[k])
			}
		}
	}
	walk(c.Env.Config)
	return out
}

// PluginConfig is env.config as JSON, for the plugin.
func (c *Config) PluginConfig() json.RawMessage {
	b, _ := json.Marshal(c.Env.Config)
	return b
}

// mayBeNegative are the numeric keys a negative value makes sense for:
// weights (a penalty) and reward thresholds.
var mayBeNegative = map[string]bool{"reward.weight": true, "env.reward_weight": true, "process.min_reward": true, "process.temperatures": true}

// checkNumbers refuses a negative duration or number (but for the keys of
// mayBeNegative) and a float that is not finite, anywhere in v (the
// config): a negative timeout or scale would switch a limit off, nan or
// inf (which TOML can write) would poison every sum. It returns the first
// offending key and what is wrong with it.
func checkNumbers(v reflect.Value, prefix string) (key, msg string) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("toml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := strings.TrimPrefix(prefix+"."+tag, ".")
		if k, m := checkValue(v.Field(i), key); k != "" {
			return k, m
		}
	}
	return "", ""
}

func checkValue(f reflect.Value, key string) (string, string) {
	if d, ok := f.Interface().(Duration); ok {
		if d.Duration < 0 {
			return key, fmt.Sprintf("%s is negative", d.Duration)
		}
		return "", ""
	}
	switch f.Kind() {
	case reflect.Pointer:
		if !f.IsNil() {
			return checkValue(f.Elem(), key)
		}
	case reflect.Struct:
		return checkNumbers(f, key)
	case reflect.Slice:
		for j := 0; j < f.Len(); j++ {
			if k, m := checkValue(f.Index(j), key); k != "" {
				return k, m
			}
		}
	case reflect.Int, reflect.Int64:
		if f.Int() < 0 && !mayBeNegative[key] {
			return key, fmt.Sprintf("%d is negative", f.Int())
		}
	case reflect.Float64:
		x := f.Float()
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return key, fmt.Sprintf("%v is not a number", x)
		}
		if x < 0 && !mayBeNegative[key] {
			return key, fmt.Sprintf("%v is negative", x)
		}
	}
	return "", ""
}
