package main

import hostrun "github.com/proctor-dev/proctor/host/run" // main has its own run

type processCmd struct {
	Config string   `arg:"" help:"Run configuration (TOML); [process] sets group_size and the filters." type:"path"`
	Set    []string `help:"Override a config key: --set section.key=value (repeatable)." placeholder:"KEY=VALUE" sep:"none"`
	Out    string   `help:"Run directory (default: <run.out_dir>/<run.name>)."`
}

func (p processCmd) Run(g *globals) error {
	return execute(g, p.Config, p.Set, p.Out, hostrun.WithProcess())
}
