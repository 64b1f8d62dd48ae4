// Package sdk is the Go SDK for proctor environment plugins. It depends on
// the standard library only, and is a module of its own
// (github.com/proctor-dev/proctor/sdk) that a plugin's module requires;
// `proctor plugin new NAME` writes such a module, ready to build.
//
// A plugin is a main package that registers its environment in init and
// has an empty main:
//
//	func init() { sdk.Register(&myEnv{}) }
//	func main() {}
//
// built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o my.wasm .
//
// The environment implements Environment and any of the optional hook
// interfaces (Prompter, SandboxProvider, SetUpper, Verifier, Oracler,
// TearDowner, RewardScorer). A plugin that only scores rollouts
// registers with RegisterReward instead. Hooks reach the rollout's sandbox and the
// host's datasets through the functions of this package (Exec, ReadFile,
// WriteFile, Upload, Download, ReadDataset, Log). Built natively (plain `go
// test`), the same calls go to an emulated host: see package sdktest.
package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// Environment is what every environment plugin implements.
type Environment interface {
	// Manifest names the plugin and declares the host operations it uses
	// (abi.Op*). Hooks are filled in by the SDK.
	Manifest() abi.Manifest
	// LoadTasks returns the tasks the config selects.
	LoadTasks(config json.RawMessage) (abi.TasksResponse, error)
}

// Optional hooks.
type (
	Prompter interface {
		Prompt(r abi.RolloutRequest) (abi.PromptResponse, error)
	}
	SandboxProvider interface {
		Sandbox(r abi.RolloutRequest) (abi.SandboxSpec, error)
	}
	SetUpper interface {
		Setup(r abi.RolloutRequest) error
	}
	Verifier interface {
		Verify(r abi.VerifyRequest) (abi.VerifyResponse, error)
	}
	Oracler interface {
		Oracle(r abi.RolloutRequest) (abi.OracleResponse, error)
	}
	TearDowner interface {
		Teardown(r abi.RolloutRequest) error
	}
	RewardScorer interface {
		Score(r abi.RewardRequest) (abi.RewardResponse, error)
	}
	// ConfigChecker checks a run's config table for the plugin before
	// any rollout starts (config.check, ABI v1.1), so a misspelt key
	// fails the run at once instead of in every rollout. Environments get
	// [env.config], reward plugins their [[reward]] table's config.
	// DecodeConfig into the plugin's config type is the usual body.
	ConfigChecker interface {
		CheckConfig(config json.RawMessage) error
	}
)

// Version is this SDK's version, the sdk module's tag without its "sdk/v"
// prefix. describe reports it in the manifest's SDK field.
const Version = "0.1.0"

var env Environment

// Register makes e the plugin's environment. Call it from init.
func Register(e Environment) { env = e }

// Rewarder is a reward plugin: it only scores rollouts of any
// environment, stacked in a run with [[reward]].
type Rewarder interface {
	Manifest() abi.Manifest
	Score(r abi.RewardRequest) (abi.RewardResponse, error)
}

// RegisterReward makes r the plugin's reward scorer, for a plugin that
// has no environment of its own. Call it from init.
func RegisterReward(r Rewarder) { env = rewardOnly{r} }

type rewardOnly struct{ Rewarder }

// CheckConfig passes config.check on to the Rewarder when it has it.
func (r rewardOnly) CheckConfig(config json.RawMessage) error {
	if c, ok := r.Rewarder.(ConfigChecker); ok {
		return c.CheckConfig(config)
	}
	return nil
}

func (r rewardOnly) checksConfig() bool {
	_, ok := r.Rewarder.(ConfigChecker)
	return ok
}

func (rewardOnly) LoadTasks(json.RawMessage) (abi.TasksResponse, error) {
	return abi.TasksResponse{}, errors.New("this is a reward plugin, which has no tasks: name it in a [[reward]] table, not in [env]")
}

// DecodeConfig decodes a run's config table ([env.config] or
// [reward.config], as JSON) into v strictly: a key v has no field for is an
// error that names it and the closest key v has, so a misspelt key is
// never silently ignored. An empty or null config leaves v as it is (set
// defaults first).
func DecodeConfig(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if key, ok := strings.CutPrefix(msg, "unknown field "); ok {
			msg = "unknown key " + key
			if best := closestKey(strings.Trim(key, `"`), v); best != "" {
				msg += fmt.Sprintf("; did you mean %q?", best)
			}
		}
		return errors.New(msg)
	}
	return nil
}

// Error is a hook failure with the class the host should record
// (abi.ClassSetup, abi.ClassVerifier, abi.ClassPlugin); see Errorf.
type Error struct {
	Class string
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an error of the given class (abi.Class*). A class the host
// does not know is recorded as abi.ClassPlugin.
func Errorf(class, format string, args ...any) error {
	return &Error{Class: class, Err: fmt.Errorf(format, args...)}
}

// hooks lists the methods e implements.
func hooks(e Environment) []string {
	if r, ok := e.(rewardOnly); ok {
		if r.checksConfig() {
			return []string{abi.HookDescribe, abi.HookReward, abi.HookConfig}
		}
		return []string{abi.HookDescribe, abi.HookReward}
	}
	h := []string{abi.HookDescribe, abi.HookTasks}
	if _, ok := e.(Prompter); ok {
		h = append(h, abi.HookPrompt)
	}
	if _, ok := e.(SandboxProvider); ok {
		h = append(h, abi.HookSandbox)
	}
	if _, ok := e.(SetUpper); ok {
		h = append(h, abi.HookSetup)
	}
	if _, ok := e.(Verifier); ok {
		h = append(h, abi.HookVerify)
	}
	if _, ok := e.(Oracler); ok {
		h = append(h, abi.HookOracle)
	}
	if _, ok := e.(TearDowner); ok {
		h = append(h, abi.HookTeardown)
	}
	if _, ok := e.(RewardScorer); ok {
		h = append(h, abi.HookReward)
	}
	if _, ok := e.(ConfigChecker); ok {
		h = append(h, abi.HookConfig)
	}
	return h
}

// Handle runs one hook. The wasm entry point and the native emulator both
// call it; plugin authors do not.
func Handle(method string, input []byte) (status uint32, output []byte) {
	defer func() {
		if r := recover(); r != nil {
			status, output = fail(Errorf(abi.ClassPlugin, "panic in %s: %v\n%s", method, r, debug.Stack()))
		}
	}()
	if env == nil {
		return fail(Errorf(abi.ClassPlugin, "no environment registered: call sdk.Register in init"))
	}
	switch method {
	case abi.HookDescribe:
		m := env.Manifest()
		m.ABI, m.ABIMinor, m.SDK = abi.Version, abi.Minor, "go "+Version
		m.Hooks = hooks(env)
		return ok(m)
	case abi.HookConfig:
		if h, k := env.(ConfigChecker); k {
			var req abi.ConfigRequest
			if err := json.Unmarshal(input, &req); err != nil {
				return bad(err)
			}
			return result(abi.Empty{}, h.CheckConfig(req.Config))
		}
	case abi.HookTasks:
		var req abi.TasksRequest
		if err := json.Unmarshal(input, &req); err != nil {
			return bad(err)
		}
		return result(env.LoadTasks(req.Config))
	case abi.HookPrompt:
		if h, k := env.(Prompter); k {
			return rollout(input, h.Prompt)
		}
	case abi.HookSandbox:
		if h, k := env.(SandboxProvider); k {
			return rollout(input, h.Sandbox)
		}
	case abi.HookSetup:
		if h, k := env.(SetUpper); k {
			return rollout(input, func(r abi.RolloutRequest) (abi.Empty, error) { return abi.Empty{}, h.Setup(r) })
		}
		return ok(abi.Empty{})
	case abi.HookVerify:
		if h, k := env.(Verifier); k {
			var req abi.VerifyRequest
			if err := json.Unmarshal(input, &req); err != nil {
				return bad(err)
			}
			return result(h.Verify(req))
		}
	case abi.HookOracle:
		if h, k := env.(Oracler); k {
			return rollout(input, h.Oracle)
		}
	case abi.HookTeardown:
		if h, k := env.(TearDowner); k {
			return rollout(input, func(r abi.RolloutRequest) (abi.Empty, error) { return abi.Empty{}, h.Teardown(r) })
		}
		return ok(abi.Empty{})
	case abi.HookReward:
		if h, k := env.(RewardScorer); k {
			var req abi.RewardRequest
			if err := json.Unmarshal(input, &req); err != nil {
				return bad(err)
			}
			return result(h.Score(req))
		}
	}
	return abi.StatusUnknown, mustJSON(abi.Error{Error: "plugin does not implement " + method})
}

func rollout[T any](input []byte, f func(abi.RolloutRequest) (T, error)) (uint32, []byte) {
	var req abi.RolloutRequest
	if err := json.Unmarshal(input, &req); err != nil {
		return bad(err)
	}
	return result(f(req))
}

func result[T any](v T, err error) (uint32, []byte) {
	if err != nil {
		return fail(err)
	}
	return ok(v)
}

func ok(v any) (uint32, []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		return fail(Errorf(abi.ClassPlugin, "encode result: %w", err))
	}
	return abi.StatusOK, b
}

func fail(err error) (uint32, []byte) {
	e := abi.Error{Error: err.Error()}
	var se *Error
	if errors.As(err, &se) {
		e.Class = se.Class
	}
	return abi.StatusError, mustJSON(e)
}

func bad(err error) (uint32, []byte) {
	return abi.StatusBadRequest, mustJSON(abi.Error{Error: "bad input: " + err.Error()})
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
