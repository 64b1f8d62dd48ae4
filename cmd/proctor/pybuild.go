package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sdk/python"
)

type buildCmd struct {
	Source  string `arg:"" help:"A plugin written in Python: a .py file, or a folder (its plugin.py, or --entry)." type:"path"`
	Output  string `short:"o" help:"The .wasm to write (default: the source's name with .wasm, next to it)." type:"path"`
	Entry   string `help:"The entry file, inside a folder."`
	Runtime string `help:"The Python runtime's folder (default: the one make python-runtime builds)." type:"path"`
}

// Run builds the plugin, loads it under the real host (describe must
// answer), and only then writes it.
func (b buildCmd) Run(g *globals) error {
	if log, ok := python.Building(b.Runtime); ok {
		fmt.Fprintf(g.stderr, "proctor: waiting for the python runtime, which is being built on this machine (log: %s)\n", log)
	}
	rt, err := python.LoadRuntime(b.Runtime)
	if errors.Is(err, python.ErrNoRuntime) {
		return &fault.Usage{Err: err, Hint: "build it once on this machine with make python-runtime (from proctor's source tree), or name one with --runtime"}
	}
	if err != nil {
		return &fault.Usage{Err: err}
	}
	wasm, err := python.Build(rt, b.Source, python.Options{Entry: b.Entry})
	if err != nil {
		return &fault.Usage{Err: err}
	}
	out := b.Output
	if out == "" {
		out = strings.TrimSuffix(strings.TrimRight(b.Source, string(filepath.Separator)), ".py") + ".wasm"
	}
	wr, err := assemble.InspectRuntime(g.ctx)
	if err != nil {
		return err
	}
	defer wr.Close(g.ctx)
	hint := "fix the plugin; its native tests (proctor.testing) run the same code under your CPython"
	p, err := wr.Load(g.ctx, out, wasm)
	if err != nil {
		return &fault.Usage{Err: err, Hint: hint}
	}
	// Start it once here and keep that memory: every instance starts there.
	image, err := p.Snapshot(g.ctx, python.InitHook)
	if err != nil {
		return &fault.Usage{Err: err, Hint: hint}
	}
	wasm = python.WithImage(wasm, image)
	if p, err = wr.Load(g.ctx, out, wasm); err != nil {
		return &fault.Usage{Err: err, Hint: hint}
	}
	if err := rundir.WriteFileAtomic(out, wasm); err != nil {
		return err
	}
	m := p.Manifest()
	fmt.Fprintf(g.stdout, "built   %s %s (python %s)\nfile    %s (%.1f MB)\nsha256  %s\npin     sha256 = %q\n",
		m.Name, m.Version, python.Version(), out, float64(len(wasm))/1e6, p.SHA256(), p.SHA256())
	return nil
}
