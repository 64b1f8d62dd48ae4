package config

import (
	"fmt"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// badFunc makes the error of one key: what is wrong with it and what to do.
type badFunc = func(key, msg, hint string) error

// oneOfFunc refuses a value that is not one of allowed, naming the closest.
type oneOfFunc = func(key, v string, allowed ...string) error

// validate checks the whole config, section by section, and returns the
// first mistake as an *Error naming the key and its line in data.
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
	for _, check := range []func(badFunc, oneOfFunc) error{
		c.validateRun, c.validateAgent, c.validateSandbox, c.validateParts, c.validateProcess, c.validateRewards,
	} {
		if err := check(bad, oneOf); err != nil {
			return err
		}
	}
	if c.Model.APIKeyEnv != "" && strings.ContainsAny(c.Model.APIKeyEnv, " -/") {
		return bad("model.api_key_env", "must name an environment variable, not hold the key", "e.g. api_key_env = \"OPENAI_API_KEY\"")
	}
	if key, msg := checkNumbers(reflect.ValueOf(*c), ""); key != "" {
		return bad(key, msg, "give a positive value, or leave the key out for its default")
	}
	return nil
}

// validateRun checks [run] (and env.memory_mb).
func (c *Config) validateRun(bad badFunc, oneOf oneOfFunc) error {
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
	return oneOf("run.verifier_failure", c.Run.VerifierFailure, VerifierOutcome, VerifierInfraError)
}

// validateAgent checks [agent] and the settings of its kind.
func (c *Config) validateAgent(bad badFunc, oneOf oneOfFunc) error {
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
	return nil
}

// validateSandbox checks [sandbox] (and model.max_response_mb).
func (c *Config) validateSandbox(bad badFunc, oneOf oneOfFunc) error {
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
	return nil
}

// validateParts checks that the agent and the environment have what they
// need: a model, a script, a plugin.
func (c *Config) validateParts(bad badFunc, _ oneOfFunc) error {
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
	return nil
}

// validateProcess checks [process] and [serve].
func (c *Config) validateProcess(bad badFunc, oneOf oneOfFunc) error {
	switch {
	case c.Process.GroupSize < 1:
		return bad("process.group_size", "must be at least 1", "")
	case c.Process.GroupSize > MaxAttempts:
		return bad("process.group_size", fmt.Sprintf("%d is over %d, the most attempts a run makes of a task", c.Process.GroupSize, MaxAttempts), "")
	case c.Process.MaxTokens < 0:
		return bad("process.max_tokens", "must not be negative", "0 means no limit")
	}
	return c.validateServe(bad, oneOf)
}

// validateRewards checks the grants of [env] and each [[reward]].
func (c *Config) validateRewards(bad badFunc, _ oneOfFunc) error {
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

// validateReference checks the reference agents' settings, and that they
// have a model (or a recorded run to replay).
func (c *Config) validateReference(bad badFunc, oneOf oneOfFunc) error {
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
func (c *Config) validateInstalled(bad badFunc, oneOf oneOfFunc) error {
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

// validateServe checks [serve]; bad and oneOf make the errors.
func (c *Config) validateServe(bad badFunc, oneOf oneOfFunc) error {
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
func (c *Config) validateKubernetes(bad badFunc, oneOf oneOfFunc) error {
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
func checkGrants(key string, grants []string, bad badFunc) error {
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
