package sandboxtest

import (
	"fmt"
	"os"
)

// Main is the TestMain of a package whose tests start docker or
// kubernetes sandboxes: it puts the warden this checkout builds in place
// (EnsureWarden), failing the whole test binary when it cannot, and runs
// the tests. A TestMain ends with os.Exit(sandboxtest.Main(m)).
func Main(m interface{ Run() int }) int {
	if err := EnsureWarden(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
