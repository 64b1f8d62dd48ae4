// Package installed runs installed agents: coding-agent CLIs (Claude
// Code, Codex, Gemini CLI, OpenCode, a user's own) that run inside the
// sandbox, described as data (a TOML definition: how to install the CLI,
// how to start it headless on the task's instruction, which wire format
// it speaks, its environment and its log files). The CLI is installed
// once per (task image, definition, version) into an image layer of its
// own (sandbox.Layer); every rollout then starts with it ready. Its model
// traffic goes to a model gateway (agent/gateway) in proctor, reached at
// 127.0.0.1 inside the sandbox through the warden's relay: the sandbox
// keeps no network and never sees the run's key.
package installed

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/proctor-dev/proctor/agent/openai"
)

// Definition is an installed agent, as its TOML file says (docs/agents.md).
type Definition struct {
	// Name names the agent in records and reports.
	Name        string `toml:"name"`
	Description string `toml:"description"`
	// API is the wire format the CLI speaks: "anthropic", "responses",
	// "gemini" or "chat".
	API     string  `toml:"api"`
	Install Install `toml:"install"`
	Run     Run     `toml:"run"`
	// Logs are the CLI's own log files and folders ("~/" is its home),
	// kept in the run directory.
	Logs []string `toml:"logs"`

	// Source is where the definition was read from.
	Source string `toml:"-"`
}

// Install says how the CLI is installed: an npm package at a pinned
// version, with Node beside it when the CLI runs on Node.
type Install struct {
	Package string `toml:"package"`
	Version string `toml:"version"`
	// Packages are more npm packages ("name@version") installed with it.
	Packages []string `toml:"packages"`
	// Node keeps Node in the image, at {node}, for a CLI that runs on it.
	Node bool `toml:"node"`
	// Script runs after npm, as root, in the install stage, with PREFIX
	// set to the install folder; only that folder is kept.
	Script string `toml:"script"`
}

// Run says how the CLI is started, headless, on the task's instruction.
// Every string may hold placeholders: {prompt} (the instruction),
// {model} (the run's model name), {base_url} (the gateway, as
// http://127.0.0.1:PORT), {port}, {token} (the rollout's gateway token),
// {prefix} (the install folder), {node} (Node's binary), {home} (the
// agent user's home), {arch} (the sandbox's machine, as uname -m says).
type Run struct {
	// Command is the argv; it runs in the task's working directory with
	// stdin from /dev/null.
	Command []string `toml:"command"`
	// Env is added to the command's environment.
	Env map[string]string `toml:"env"`
	// Files are written before the command starts.
	Files []File `toml:"files"`
}

// File is a file written for the CLI (its settings).
type File struct {
	Path    string `toml:"path"`
	Content string `toml:"content"`
}

//go:embed agents/*.toml
var bundled embed.FS

// Bundled lists the bundled definitions' names.
func Bundled() []string {
	entries, _ := bundled.ReadDir("agents")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	return names
}

// Load reads a definition: a bundled one by name, or a TOML file by path
// (relative to baseDir). version, when set, replaces the pinned version.
func Load(ref, baseDir, version string) (*Definition, error) {
	var data []byte
	var err error
	src := ref
	if isName(ref) {
		data, err = bundled.ReadFile("agents/" + ref + ".toml")
		if err != nil {
			return nil, fmt.Errorf("no bundled installed agent %q: the bundled ones are %s; or give a path to a definition (.toml)", ref, strings.Join(Bundled(), ", "))
		}
		src = "bundled " + ref
	} else {
		if !filepath.IsAbs(ref) {
			ref = filepath.Join(baseDir, ref)
		}
		src = ref
		if data, err = os.ReadFile(ref); err != nil {
			return nil, fmt.Errorf("installed agent definition: %w", err)
		}
	}
	return Parse(data, src, version)
}

// isName reports whether ref names a bundled definition rather than a
// file.
func isName(ref string) bool {
	return !strings.ContainsAny(ref, `/\`) && !strings.HasSuffix(ref, ".toml")
}

// Parse reads a definition from data (read from src, for messages).
func Parse(data []byte, src, version string) (*Definition, error) {
	var d Definition
	md, err := toml.Decode(string(data), &d)
	if err != nil {
		return nil, fmt.Errorf("installed agent %s: %w", src, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		return nil, fmt.Errorf("installed agent %s: unknown key %q", src, un[0].String())
	}
	d.Source = src
	if version != "" {
		d.Install.Version = version
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("installed agent %s: %w", src, err)
	}
	return &d, nil
}

var (
	npmName    = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	npmVersion = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+-]*$`)
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// check refuses a definition proctor could not run as it says.
func (d *Definition) check() error {
	switch {
	case d.Name == "" || strings.ContainsAny(d.Name, "/\\ \t\n"):
		return fmt.Errorf("name %q: give a short name without spaces or slashes", d.Name)
	case !slices.Contains([]string{openai.APIAnthropic, openai.APIResponses, openai.APIGemini, openai.APIChat}, d.API):
		return fmt.Errorf("api %q: want anthropic, responses, gemini or chat (the wire format the CLI speaks)", d.API)
	case d.Install.Package == "" && d.Install.Script == "":
		return fmt.Errorf("[install] has neither a package nor a script")
	case d.Install.Package != "" && !npmName.MatchString(d.Install.Package):
		return fmt.Errorf("[install] package %q is not an npm package name", d.Install.Package)
	case d.Install.Package != "" && !npmVersion.MatchString(d.Install.Version):
		return fmt.Errorf("[install] version %q: pin an exact version (e.g. 1.2.3), or set [agent] version", d.Install.Version)
	case len(d.Run.Command) == 0:
		return fmt.Errorf("[run] command is empty")
	}
	for _, p := range d.Install.Packages {
		name, version, ok := strings.Cut(strings.TrimPrefix(p, "@"), "@")
		if strings.HasPrefix(p, "@") {
			name = "@" + name
		}
		if !ok || !npmName.MatchString(name) || !npmVersion.MatchString(version) {
			return fmt.Errorf("[install] packages: %q is not name@version", p)
		}
	}
	for k := range d.Run.Env {
		if !envName.MatchString(k) {
			return fmt.Errorf("[run] env: %q is not a variable name", k)
		}
	}
	for _, f := range d.Run.Files {
		if !strings.HasPrefix(f.Path, "/") && !strings.HasPrefix(f.Path, "~/") {
			return fmt.Errorf("[run] files: path %q: give an absolute path or one under ~/", f.Path)
		}
	}
	return nil
}

// Key is a hash of what the agent's install holds: its install section,
// the Node and npm it is installed with, and the install's recipe. The
// image layer is built once per (task image, key).
func (d *Definition) Key() string {
	var b bytes.Buffer
	toml.NewEncoder(&b).Encode(d.Install)
	fmt.Fprintf(&b, "\x00%s\x00%s\x00%s", nodeRelease.Version, npmRelease.Version, recipeVersion)
	h := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(h[:16])
}

// Label is the agent and its version, for messages.
func (d *Definition) Label() string {
	if d.Install.Version == "" {
		return d.Name
	}
	return d.Name + " " + d.Install.Version
}
