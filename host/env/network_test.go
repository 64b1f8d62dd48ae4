package env

import (
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestNetworkFor: a task that asks for the internet gets what the run's
// [sandbox] network gives, and its record says why when that is nothing;
// a task that does not ask gets none in every mode; the image build gets
// the run's network either way.
func TestNetworkFor(t *testing.T) {
	for _, tc := range []struct {
		mode, noDefault string
		ask             string
		run, build      sandbox.Network
		withheld        string
	}{
		{"auto", "", abi.NetworkInternet, sandbox.NetworkDefault, sandbox.NetworkDefault, ""},
		{"auto", "", "host", sandbox.NetworkDefault, sandbox.NetworkDefault, ""},
		{"auto", "", "", sandbox.NetworkNone, sandbox.NetworkDefault, ""},
		{"auto", "no bridge", abi.NetworkInternet, sandbox.NetworkNone, sandbox.NetworkNone, "the task asks for the internet; no bridge; [sandbox] network = \"host\""},
		{"host", "", abi.NetworkInternet, sandbox.NetworkHost, sandbox.NetworkHost, ""},
		{"host", "", "none", sandbox.NetworkNone, sandbox.NetworkHost, ""},
		{"none", "", abi.NetworkInternet, sandbox.NetworkNone, sandbox.NetworkNone, `[sandbox] network = "none" withholds it`},
		{"", "", abi.NetworkInternet, sandbox.NetworkNone, sandbox.NetworkNone, `withholds it`},
	} {
		r := &pluginRollout{env: &Plugin{Network: tc.mode, NoDefaultNetwork: tc.noDefault}}
		s, err := r.convertSpec(abi.SandboxSpec{Network: tc.ask, BuildTimeoutSec: 1.5})
		if err != nil {
			t.Fatal(err)
		}
		if s.Network != tc.run || s.BuildNetwork != tc.build || (tc.withheld == "") != (r.NetworkWithheld() == "") || !strings.Contains(r.NetworkWithheld(), tc.withheld) {
			t.Errorf("%s/%q asks %q: got %s build %s withheld %q", tc.mode, tc.noDefault, tc.ask, s.Network, s.BuildNetwork, r.NetworkWithheld())
		}
		if s.StartTimeout.Seconds() != 1.5 {
			t.Errorf("start timeout %s", s.StartTimeout)
		}
	}
	r := &pluginRollout{env: &Plugin{Network: "auto"}}
	if _, err := r.convertSpec(abi.SandboxSpec{Network: "bridge"}); err == nil {
		t.Error("an unknown network was accepted")
	}
}
