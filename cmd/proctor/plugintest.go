package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/proctor-dev/proctor/host/plugincheck"
	hostrun "github.com/proctor-dev/proctor/host/run" // main has its own run
)

type testCmd struct {
	Plugin string `arg:"" help:"Bundled name, path of a .wasm file, or oci:// reference."`
	Config string `required:"" help:"A run config: its [env.config] and [sandbox] for an environment, its [[reward]] table for a reward plugin." type:"existingfile"`
	Tasks  int    `default:"2" help:"How many of the first tasks the oracle and nop agents run."`
	RunDir string `name:"run" help:"A run directory whose recorded rollouts a reward plugin scores (default: a sample rollout)." type:"existingdir"`
	Out    string `help:"Keep the conformance runs in this folder (default: a temporary one, removed)." type:"path"`
}

// errChecksFailed: plugin test ran, and some checks failed.
var errChecksFailed = errors.New("some checks failed")

// Run is the conformance test an author runs before sharing a plugin:
// every hook it declares is called as a run would call it.
func (tc testCmd) Run(g *globals) error {
	checks, err := plugincheck.Test(g.ctx, host(), plugincheck.Options{Ref: tc.Plugin, Config: tc.Config, Tasks: tc.Tasks,
		RunDir: tc.RunDir, Out: tc.Out, RunOptions: []hostrun.Option{hostrun.WithVersion(fullVersion())}})
	printChecks(g.stdout, checks)
	if err != nil {
		return err
	}
	n, bad := 0, 0
	for _, c := range checks {
		if c.Counted() {
			n++
		}
		if c.Outcome == plugincheck.Fail {
			bad++
		}
	}
	if bad > 0 {
		fmt.Fprintf(g.stderr, "proctor: %d of %d checks failed\n", bad, n)
		return errChecksFailed
	}
	fmt.Fprintf(g.stdout, "pass %d checks\n", n)
	return nil
}

// printChecks prints a line for each check.
func printChecks(w io.Writer, checks []plugincheck.Check) {
	for _, c := range checks {
		fmt.Fprintln(w, c)
	}
}
