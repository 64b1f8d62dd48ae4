package shell

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
)

// The warden (sandbox/warden) is the static program backends put into an
// isolated sandbox to keep the agent's processes apart from the plugin's.
// `make warden` builds it for each architecture into warden/, and `go
// build` embeds it.
//
//go:embed all:warden
var wardens embed.FS

// WardenPath is where backends put the warden in the sandbox, and
// WardenDir the folder that holds it (sealed read-only by the warden's
// first run).
const (
	WardenDir  = "/.proctor"
	WardenPath = WardenDir + "/warden"
)

// Warden returns the warden built for a Linux architecture ("amd64",
// "arm64"). PROCTOR_WARDEN names a file to use instead, for development.
func Warden(arch string) ([]byte, error) {
	if p := os.Getenv("PROCTOR_WARDEN"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("PROCTOR_WARDEN: %w", err)
		}
		return b, nil
	}
	if arch == "" {
		arch = "amd64"
	}
	b, err := fs.ReadFile(wardens, "warden/warden-linux-"+arch)
	if err != nil {
		return nil, fmt.Errorf("the sandbox warden for linux/%s is not in this binary: build it with `make warden` (or `make build`)", arch)
	}
	return b, nil
}
