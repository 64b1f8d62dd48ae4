package docker

import (
	"fmt"
	"os"
	"testing"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	cleanup, err := sandboxtest.EnsureWarden()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
