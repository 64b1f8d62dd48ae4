package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/proctor-dev/proctor/host/fault"
)

// TestUsageWinsAnywhereInTheChain: a usage fault wrapped by an infra fault
// is still the user's to fix (exit code 2), with its own hint, as
// cmd/proctor's exit codes have always read them.
func TestUsageWinsAnywhereInTheChain(t *testing.T) {
	usage := &fault.Usage{Err: errors.New("bad key"), Hint: "fix the key"}
	infra := &fault.Infra{Err: fmt.Errorf("load: %w", usage), Hint: "retry"}
	for _, tc := range []struct {
		err   error
		usage bool
		hint  string
	}{
		{infra, true, "fix the key"},
		{fmt.Errorf("run: %w", usage), true, "fix the key"},
		{&fault.Infra{Err: errors.New("engine gone"), Hint: "start it"}, false, "start it"},
		{errors.New("plain"), false, ""},
	} {
		if fault.IsUsage(tc.err) != tc.usage || fault.Hint(tc.err) != tc.hint {
			t.Errorf("%v: usage %v hint %q, want %v %q", tc.err, fault.IsUsage(tc.err), fault.Hint(tc.err), tc.usage, tc.hint)
		}
	}
}
