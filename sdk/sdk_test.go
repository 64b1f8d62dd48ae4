//go:build !wasip1

package sdk

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
)

func TestDecodeConfig(t *testing.T) {
	type config struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	}
	c := config{Count: 3}
	for _, raw := range []string{"", "null"} {
		if err := DecodeConfig(json.RawMessage(raw), &c); err != nil || c.Count != 3 {
			t.Errorf("%q: %v %+v", raw, err, c)
		}
	}
	if err := DecodeConfig(json.RawMessage(`{"name":"a","count":2}`), &c); err != nil || c != (config{"a", 2}) {
		t.Errorf("%v %+v", err, c)
	}
	err := DecodeConfig(json.RawMessage(`{"name":"a","cuont":2}`), &c)
	if err == nil || !strings.Contains(err.Error(), `"cuont"`) || strings.HasPrefix(err.Error(), "json:") {
		t.Errorf("an unknown key must be named: %v", err)
	}
	if err := DecodeConfig(json.RawMessage(`{"count":"x"}`), &c); err == nil {
		t.Error("a wrong type decoded")
	}
}

type checked struct{ fail bool }

type checkedConfig struct {
	Weight float64 `json:"weight"`
	Nested struct {
		Threshold int `json:"threshold"`
	} `json:"nested"`
}

func (checked) Manifest() abi.Manifest { return abi.Manifest{Name: "checked", Version: "1"} }
func (checked) LoadTasks(json.RawMessage) (abi.TasksResponse, error) {
	return abi.TasksResponse{}, nil
}
func (c checked) Verify(abi.VerifyRequest) (abi.VerifyResponse, error) {
	if c.fail {
		return abi.VerifyResponse{}, Errorf(abi.ClassVerifier, "no verdict")
	}
	panic("verifier bug")
}
func (checked) CheckConfig(raw json.RawMessage) error {
	var c checkedConfig
	return DecodeConfig(raw, &c)
}

func handle(t *testing.T, method string, in any) (uint32, abi.Error, []byte) {
	t.Helper()
	b, _ := json.Marshal(in)
	status, out := Handle(method, b)
	var e abi.Error
	if status != abi.StatusOK {
		if err := json.Unmarshal(out, &e); err != nil {
			t.Fatalf("%s: error output %q: %v", method, out, err)
		}
	}
	return status, e, out
}

// A panic in a hook is the plugin's bug: class plugin, whatever the phase
// (it used to carry no class and be recorded as the phase's: verifier).
func TestPanicIsClassPlugin(t *testing.T) {
	defer func(e Environment) { env = e }(env)
	Register(checked{})
	status, e, _ := handle(t, abi.HookVerify, abi.VerifyRequest{})
	if status != abi.StatusError || e.Class != abi.ClassPlugin || !strings.Contains(e.Error, "panic in rollout.verify: verifier bug") {
		t.Errorf("panic: status %d, %+v", status, e)
	}
	Register(checked{fail: true})
	if status, e, _ := handle(t, abi.HookVerify, abi.VerifyRequest{}); status != abi.StatusError || e.Class != abi.ClassVerifier {
		t.Errorf("Errorf: status %d, %+v", status, e)
	}
	env = nil
	if status, e, _ := handle(t, abi.HookTasks, abi.TasksRequest{}); status != abi.StatusError || e.Class != abi.ClassPlugin {
		t.Errorf("nothing registered: status %d, %+v", status, e)
	}
}

func TestDescribeSaysVersions(t *testing.T) {
	defer func(e Environment) { env = e }(env)
	Register(checked{})
	_, _, out := handle(t, abi.HookDescribe, abi.Empty{})
	var m abi.Manifest
	json.Unmarshal(out, &m)
	if m.ABI != abi.Version || m.ABIMinor != abi.Minor || m.SDK != "go "+Version {
		t.Errorf("manifest %+v", m)
	}
	want := []string{abi.HookDescribe, abi.HookTasks, abi.HookVerify, abi.HookConfig}
	if strings.Join(m.Hooks, ",") != strings.Join(want, ",") {
		t.Errorf("hooks %v, want %v", m.Hooks, want)
	}
}

func TestConfigCheck(t *testing.T) {
	defer func(e Environment) { env = e }(env)
	Register(checked{})
	if status, e, _ := handle(t, abi.HookConfig, abi.ConfigRequest{Config: json.RawMessage(`{"weight":2,"nested":{"threshold":1}}`)}); status != abi.StatusOK {
		t.Errorf("a valid config: status %d %+v", status, e)
	}
	for raw, want := range map[string]string{
		`{"wieght":2}`:              `unknown key "wieght"; did you mean "weight"?`,
		`{"nested":{"treshold":1}}`: `unknown key "treshold"; did you mean "threshold"?`,
		`{"colour":1}`:              `unknown key "colour"`,
		`{"weight":"heavy"}`:        `cannot unmarshal string`,
	} {
		status, e, _ := handle(t, abi.HookConfig, abi.ConfigRequest{Config: json.RawMessage(raw)})
		if status != abi.StatusError || !strings.Contains(e.Error, want) || strings.Contains(want, "colour") && strings.Contains(e.Error, "mean") {
			t.Errorf("%s: status %d %q, want %q", raw, status, e.Error, want)
		}
	}
}
