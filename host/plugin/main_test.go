package plugin_test

import (
	"os"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
)

// TestMain removes the plugins the tests built once the tests are done.
func TestMain(m *testing.M) { os.Exit(wasmtest.Run(m)) }
