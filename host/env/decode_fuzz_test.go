package env

import (
	"encoding/json"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// FuzzPluginOutputs feeds arbitrary bytes where the host decodes what a
// plugin returned (tasks, sandbox spec, verdict): decoding and conversion
// must fail cleanly, never panic, and a converted spec never gets a network
// the run did not allow.
func FuzzPluginOutputs(f *testing.F) {
	f.Add([]byte(`{"tasks":[{"id":"a","agent_timeout_sec":1e308,"data":{"x":1}}],"skipped":[{"id":"b"}]}`))
	f.Add([]byte(`{"image":"x","network":"host","memory_mb":-5,"build_context":"AAAA"}`))
	f.Add([]byte(`{"reward":1,"passed":true,"tests":[{"name":"t","status":"passed"}],"scores":{"a":0.5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var tr abi.TasksResponse
		if json.Unmarshal(b, &tr) == nil {
			for _, task := range tr.Tasks {
				raw, _ := json.Marshal(task)
				var back abi.Task
				if err := json.Unmarshal(raw, &back); err != nil {
					t.Fatalf("task does not round-trip: %v", err)
				}
			}
		}
		var spec abi.SandboxSpec
		if json.Unmarshal(b, &spec) == nil {
			r := &pluginRollout{env: &Plugin{}, inst: nil}
			s, err := r.convertSpec(spec)
			if err == nil && (s.Network != "none" || s.BuildNetwork != "none") {
				t.Fatalf("spec got network %q (build %q) without the run allowing it", s.Network, s.BuildNetwork)
			}
			r.env.Network = "auto"
			if s, err := r.convertSpec(spec); err == nil && (s.Network == "host" || s.BuildNetwork == "host") {
				t.Fatalf("spec got the host's network without the run allowing it")
			}
		}
		var v abi.VerifyResponse
		if json.Unmarshal(b, &v) == nil {
			verdict(v)
		}
	})
}
