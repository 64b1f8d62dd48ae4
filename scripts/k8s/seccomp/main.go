// Command seccomp prints the seccomp profile of an isolated sandbox in the
// container runtime's format, for this machine's architecture (or the one
// named by its argument): the file the local cluster's kubelet loads as
// the Localhost profile proctor's pods ask for.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"

	"github.com/proctor-dev/proctor/sandbox/seccomp"
)

func main() {
	arch := runtime.GOARCH
	if len(os.Args) > 1 {
		arch = os.Args[1]
	}
	p, err := seccomp.OCI(arch)
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccomp:", err)
		os.Exit(1)
	}
}
