package terminus

import (
	"fmt"
	"os"
	"testing"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestMain puts the warden this checkout builds in place for the docker
// sandboxes of the benchmarks.
func TestMain(m *testing.M) {
	if err := sandboxtest.EnsureWarden(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
