package kubernetes

import (
	"fmt"
	"os"
	"testing"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	if err := sandboxtest.EnsureWarden(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
