// Package bundled holds the plugins shipped inside the proctor binary.
// `make plugins` compiles plugins/<name> to wasm/<name>.wasm from source and
// `go build` embeds them; a binary built without them says how to fix it.
package bundled

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed all:wasm
var files embed.FS

// Known lists the short names of the plugins proctor ships, built or not.
var Known = []string{"tb2", "swesmith", "sweshaped"}

// Lookup returns the wasm bytes of a bundled plugin by its short name.
func Lookup(name string) ([]byte, error) {
	b, err := fs.ReadFile(files, "wasm/"+name+".wasm")
	if err == nil {
		return b, nil
	}
	for _, k := range Known {
		if k == name {
			return nil, fmt.Errorf("bundled plugin %q is not in this binary: build it with `make build` (which runs `make plugins` first)", name)
		}
	}
	return nil, fmt.Errorf("no bundled plugin %q (bundled: %s); to load a file, give its path ending in .wasm", name, strings.Join(Known, ", "))
}

// Names lists the bundled plugins present in this binary.
func Names() []string {
	entries, _ := fs.ReadDir(files, "wasm")
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".wasm"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// IsName reports whether ref names a bundled plugin rather than a file.
func IsName(ref string) bool {
	return ref != "" && !strings.ContainsAny(ref, `/\.`)
}
