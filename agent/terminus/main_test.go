package terminus

import (
	"os"
	"testing"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestMain puts the warden this checkout builds in place for the docker sandboxes of the benchmarks.
func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m)) }
