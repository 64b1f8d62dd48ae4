package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	hostrun "github.com/proctor-dev/proctor/host/run" // main has its own run
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/serve"
)

type serveCmd struct {
	Config string   `arg:"" help:"Run configuration (TOML); [process] shapes the groups, [serve] meets the trainer." type:"path"`
	API    string   `help:"Atropos' rollout API (run-api) to serve, e.g. http://localhost:8000 (overrides [serve] api)." placeholder:"URL"`
	Set    []string `help:"Override a config key: --set section.key=value (repeatable)." placeholder:"KEY=VALUE" sep:"none"`
	Out    string   `help:"Run directory (default: <run.out_dir>/<run.name>)."`
}

// Run serves the config's tasks to an RL trainer through Atropos' rollout
// API until the trainer has its steps, every [serve] epoch is sent, or
// Ctrl-C. The evaluations of [serve] steps_per_eval run the same plugin
// with [serve.eval] config.
func (s serveCmd) Run(g *globals) error {
	sets := s.Set
	if s.API != "" {
		if !config.HTTPURL(s.API) {
			return &fault.Usage{Err: fmt.Errorf("--api %s: not an http(s) URL", s.API), Hint: "give the rollout API's address, e.g. --api http://localhost:8000 (what run-api serves)"}
		}
		sets = append(sets, "serve.api="+s.API)
	}
	c, err := assemble.LoadConfig(s.Config, sets)
	if err != nil {
		return err
	}
	opts := serve.Options{Notify: notices(g.stderr), RunOptions: []hostrun.Option{hostrun.WithVersion(fullVersion()), hostrun.WithNotices(notices(g.stderr))}}
	var evalParts hostrun.Parts
	if c.Serve.StepsPerEval > 0 {
		opts.EvalParts = &evalParts
	}
	wired := func(p hostrun.Parts) {
		evalParts = assemble.EvalParts(p, c)
	}
	// No rollout-by-rollout display: serving has no total to count
	// down, and says where it stands itself every run.progress_interval.
	return executeConfig(g, c, s.Out, wired, hostrun.WithDriver(serve.New(c, opts)), hostrun.WithProgress(nil))
}

// printServed prints a serve run's account, when dir holds one.
func printServed(w io.Writer, dir string) {
	man, _, err := rundir.ReadManifest(dir)
	if err != nil || man.Serve == nil {
		return
	}
	sv := man.Serve
	as := "as " + sv.Name
	if sv.Name == "" {
		as = "(never registered)" // stopped while the API was away or the trainer had not started
	}
	fmt.Fprintf(w, "served %s %s: %d groups sent, %d refused, %d waiting to be sent, trainer at step %d, %d evaluations\n",
		sv.API, as, sv.Sent, sv.Rejected, sv.Pending, sv.TrainerStep, sv.Evals)
	if len(sv.Dropped) > 0 {
		var parts []string
		for _, why := range slices.Sorted(maps.Keys(sv.Dropped)) {
			parts = append(parts, fmt.Sprintf("%d %s", sv.Dropped[why], why))
		}
		fmt.Fprintf(w, "groups dropped: %s\n", strings.Join(parts, ", "))
	}
}
