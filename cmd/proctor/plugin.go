package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin/oci"
	"github.com/proctor-dev/proctor/host/plugincheck"
	"github.com/proctor-dev/proctor/host/term"
)

type pluginCmd struct {
	Inspect inspectCmd `cmd:"" help:"Show a plugin's name, version, sha256, ABI, hooks, capabilities and config schema."`
	Check   checkCmd   `cmd:"" help:"Load a plugin, run describe and tasks.load, and validate what comes back."`
	Test    testCmd    `cmd:"" help:"Test a plugin before sharing it: every hook it declares, the oracle solving the first tasks and nop not."`
	New     newCmd     `cmd:"" help:"Write a new plugin module, ready to build, test and run."`
	Push    pushCmd    `cmd:"" help:"Push a plugin to an OCI registry, its manifest as annotations."`
	Pull    pullCmd    `cmd:"" help:"Pull a plugin from an OCI registry into the cache, verified."`
	Build   buildCmd   `cmd:"" help:"Build a plugin written in Python into one .wasm file."`
}

type pushCmd struct {
	File string `arg:"" help:"A bundled plugin's name (tb2, swesmith) or the path of a .wasm file."`
	Ref  string `arg:"" help:"Where to: [oci://]registry/repository:tag."`
}

func (pc pushCmd) Run(g *globals) error {
	rt, err := assemble.InspectRuntime(g.ctx)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	f, err := assemble.Plugins("").Read(g.ctx, pc.File) // a bundled name first, a path otherwise
	if err != nil {
		return err
	}
	b := f.Wasm
	p, err := rt.Load(g.ctx, pc.File, b) // checks it is a plugin before it is shared
	if err != nil {
		return &fault.Usage{Err: err}
	}
	m := p.Manifest()
	digest, err := oci.New(filepath.Join(assemble.CacheDir(), "oci")).Push(g.ctx, pc.Ref, b, oci.Meta{
		Name: m.Name, Version: m.Version, Description: m.Description, ABI: m.ABI,
		Capabilities: append(slices.Clone(m.Capabilities), m.OptionalCapabilities...),
	})
	if errors.Is(err, oci.ErrUnreachable) {
		return &fault.Infra{Err: err, Hint: "check that the registry is up and reachable, and try again"}
	}
	if err != nil {
		return &fault.Usage{Err: err, Hint: "check the reference and your credentials (docker login)"}
	}
	fmt.Fprintf(g.stdout, "pushed  %s %s\ndigest  %s\nsha256  %s\npin     plugin = \"oci://%s@%s\"\n", m.Name, m.Version, digest, p.SHA256(), repository(pc.Ref), digest)
	return nil
}

// repository is a reference without its scheme, tag and digest.
func repository(ref string) string {
	repo := oci.Strip(ref)
	repo, _, _ = strings.Cut(repo, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i] // drop the tag
	}
	return repo
}

type pullCmd struct {
	Ref string `arg:"" help:"[oci://]registry/repository:tag or @sha256:..."`
}

// Run pulls and verifies the plugin and says what it is from its
// annotations: nothing of the plugin runs.
func (pc pullCmd) Run(g *globals) error {
	ref := pc.Ref
	if !strings.HasPrefix(ref, oci.Scheme) {
		ref = oci.Scheme + ref
	}
	f, err := assemble.Plugins("").Read(g.ctx, ref)
	if err != nil {
		return err
	}
	m := f.Pulled.Meta
	caps := strings.Join(m.Capabilities, ", ")
	if caps == "" {
		caps = "(none)"
	}
	fmt.Fprintf(g.stdout, "pulled  %s %s\nsource  %s\ndigest  %s\nsha256  %s\nabi     v%d\ncaps    %s\ncached  %s\npin     plugin = \"oci://%s@%s\"\n",
		m.Name, m.Version, f.Source, f.Digest, f.SHA256, m.ABI, caps, f.Pulled.Path, repository(ref), f.Digest)
	return nil
}

type inspectCmd struct {
	Plugin string `arg:"" help:"Bundled name (tb2, swesmith), path of a .wasm file, or oci://registry/repository:tag (or @sha256:...)."`
}

func (i inspectCmd) Run(g *globals) error {
	rt, err := assemble.InspectRuntime(g.ctx)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	p, err := assemble.Plugins("").Load(g.ctx, rt, i.Plugin, "")
	if err != nil {
		return err
	}
	m := p.Manifest()
	fmt.Fprintf(g.stdout, "name          %s\nversion       %s\nsource        %s\nsha256        %s\nabi           v%d.%d\n",
		term.Line(m.Name), term.Line(m.Version), p.Source, p.SHA256(), m.ABI, m.ABIMinor)
	if m.SDK != "" {
		fmt.Fprintf(g.stdout, "sdk           %s\n", term.Line(m.SDK))
	}
	fmt.Fprintf(g.stdout, "hooks         %s\ncapabilities  %s\n", term.Line(strings.Join(m.Hooks, ", ")), term.Line(strings.Join(m.Capabilities, ", ")))
	if len(m.OptionalCapabilities) > 0 {
		fmt.Fprintf(g.stdout, "optional      %s (used only when granted)\n", term.Line(strings.Join(m.OptionalCapabilities, ", ")))
	}
	if m.Description != "" {
		fmt.Fprintf(g.stdout, "description   %s\n", term.Line(m.Description))
	}
	if len(m.ConfigSchema) > 0 {
		var v any
		json.Unmarshal(m.ConfigSchema, &v)
		b, _ := json.MarshalIndent(v, "              ", "  ")
		fmt.Fprintf(g.stdout, "config schema %s\n", b)
	}
	return nil
}

type checkCmd struct {
	Plugin string `arg:"" help:"Bundled name or path of a .wasm file."`
	Config string `help:"A run config whose [env.config] is handed to the plugin." type:"path"`
}

func (ch checkCmd) Run(g *globals) error {
	checks, err := plugincheck.Quick(g.ctx, host(), ch.Plugin, ch.Config)
	printChecks(g.stdout, checks)
	return err
}
