package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/python"
)

//go:embed scaffold
var scaffold embed.FS

type newCmd struct {
	Name   string `arg:"" help:"The plugin's name: lowercase letters, digits and dashes."`
	Reward bool   `help:"A reward plugin ([[reward]]) instead of an environment."`
	Python bool   `help:"In Python (built with proctor plugin build) instead of Go."`
	Dir    string `help:"Where to write it (default: ./NAME)." type:"path"`
	Module string `help:"The Go module path (default: NAME)."`
	SDK    string `help:"A proctor checkout's sdk folder to build against (a replace to it), instead of a copy of the SDK inside the module." type:"existingdir" placeholder:"DIR"`
}

var pluginName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Where plugin new puts its copy of the Go SDK in the module, and of the
// Python SDK next to a Python plugin (for its native tests).
const (
	vendoredSDK   = "third_party/proctor-sdk"
	vendoredPySDK = "third_party/proctor-python"
)

// Run writes the module: go.mod, main.go with every hook stubbed and
// commented, its native test, a sample dataset (environments), a run
// config and a Makefile. Nothing is overwritten.
func (n newCmd) Run(g *globals) error {
	if !pluginName.MatchString(n.Name) {
		return &fault.Usage{Err: fmt.Errorf("plugin name %q", n.Name), Hint: "use lowercase letters, digits and dashes, starting with a letter (say csv-fix)"}
	}
	dir := n.Dir
	if dir == "" {
		dir = n.Name
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return &fault.Usage{Err: fmt.Errorf("%s already exists and is not empty", dir), Hint: "give another name or --dir"}
	}
	if n.Python {
		if n.SDK != "" || n.Module != "" {
			return &fault.Usage{Err: errors.New("--sdk and --module are for Go plugins"), Hint: "leave them out with --python"}
		}
		return n.write(g, dir, map[string]string{"Name": n.Name, "PySDK": vendoredPySDK})
	}
	data := map[string]string{"Name": n.Name, "Module": n.Module, "SDKVersion": sdk.Version}
	if data["Module"] == "" {
		data["Module"] = n.Name
	}
	if n.SDK != "" {
		abs, err := filepath.Abs(n.SDK)
		if err != nil {
			return &fault.Usage{Err: err}
		}
		if _, err := os.Stat(filepath.Join(abs, "abi", "abi.go")); err != nil {
			return &fault.Usage{Err: fmt.Errorf("--sdk %s: not the sdk folder of a proctor checkout (no abi/abi.go)", n.SDK)}
		}
		data["SDKPath"], data["ReplaceNote"] = abs, "The SDK of a proctor checkout. Once the SDK is published, drop this line and run go mod tidy."
	} else {
		data["SDKPath"], data["ReplaceNote"] = "./"+vendoredSDK, "A copy of the SDK that built this module (proctor plugin new). Once the SDK is published, drop this line and the folder, and run go mod tidy."
	}
	return n.write(g, dir, data)
}

// write renders the templates of the plugin's kind into dir and copies
// the SDK in where the module needs it.
func (n newCmd) write(g *globals, dir string, data map[string]string) error {
	kind, lang := "env", "go"
	if n.Reward {
		kind = "reward"
	}
	files := map[string]string{
		"go.mod":         "go.mod.tmpl",
		"Makefile":       "Makefile.tmpl",
		".gitignore":     "gitignore.tmpl",
		"main.go":        kind + "/main.go.tmpl",
		"main_test.go":   kind + "/main_test.go.tmpl",
		n.Name + ".toml": kind + "/config.toml.tmpl",
	}
	if n.Python {
		lang = "python"
		files = map[string]string{
			"Makefile":       "python-Makefile.tmpl",
			".gitignore":     "python-gitignore.tmpl",
			"plugin.py":      "python-" + kind + "/plugin.py.tmpl",
			"test_plugin.py": "python-" + kind + "/test_plugin.py.tmpl",
			n.Name + ".toml": kind + "/config.toml.tmpl",
		}
	}
	if !n.Reward {
		files["tasks.jsonl"] = "env/tasks.jsonl.tmpl"
	}
	for name, tmpl := range files {
		b, err := render(tmpl, data)
		if err != nil {
			return err
		}
		if err := writeNew(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	var err error
	switch {
	case n.Python:
		err = copyFS(python.SDK(), filepath.Join(dir, vendoredPySDK))
	case n.SDK == "":
		err = copyFS(sdk.Source, filepath.Join(dir, vendoredSDK))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "wrote   %s (%s plugin %s, in %s)\nnext    cd %s && make test && make wasm\ncheck   proctor plugin test %s.wasm --config %s.toml\n",
		dir, map[bool]string{false: "environment", true: "reward"}[n.Reward], n.Name, lang, dir, n.Name, n.Name)
	return nil
}

func render(name string, data map[string]string) ([]byte, error) {
	src, err := scaffold.ReadFile(path.Join("scaffold", name))
	if err != nil {
		return nil, err
	}
	t, err := template.New(name).Delims("@{", "}").Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = t.Execute(&buf, data)
	return buf.Bytes(), err
}

// writeNew writes a file that must not exist yet.
func writeNew(name string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return &fault.Usage{Err: err}
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return &fault.Usage{Err: fmt.Errorf("%s exists: not overwriting it", name)}
	}
	if err != nil {
		return &fault.Usage{Err: err}
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return &fault.Infra{Err: err}
	}
	return f.Close()
}

// copyFS writes an SDK this proctor was built with (without its tests)
// into dir: the module builds with nothing but Go, a Python plugin's tests
// run with nothing but python3.
func copyFS(src fs.FS, dir string) error {
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return writeNew(filepath.Join(dir, filepath.FromSlash(p)), b)
	})
}
