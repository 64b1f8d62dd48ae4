package agent

import (
	"fmt"
	"os"
	"testing"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestMain builds the sandbox warden the golden tests' docker sandboxes
// need, when the binary has none embedded.
func TestMain(m *testing.M) {
	if err := sandboxtest.EnsureWarden(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
