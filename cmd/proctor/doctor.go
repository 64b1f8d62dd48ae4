package main

import (
	"context"
	"fmt"
	"time"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/doctor"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/sandbox/docker"
)

type doctorCmd struct {
	Image  string `help:"Base image to look for." default:"proctor-base:bookworm" env:"PROCTOR_BASE_IMAGE"`
	Dir    string `help:"Folder whose free disk space is checked (run directories go here)." default:"."`
	Config string `help:"A run config whose sandbox backend is checked too (kubernetes: the cluster, permissions, network isolation)." type:"existingfile"`
}

func (c doctorCmd) Run(g *globals) error {
	var rc *config.Config
	if c.Config != "" {
		var err error
		if rc, err = assemble.LoadConfig(c.Config, nil); err != nil {
			return err
		}
	}
	checks := doctor.Run(g.ctx, doctor.Options{Image: c.Image, Dir: c.Dir, Config: rc})
	failed := 0
	for _, ch := range checks {
		mark := "ok  "
		switch {
		case !ch.OK:
			mark = "FAIL"
			failed++
		case ch.Warn:
			mark = "WARN"
		}
		fmt.Fprintf(g.stdout, "%s %-28s %s\n", mark, ch.Name, ch.Info)
		if (!ch.OK || ch.Warn) && ch.Hint != "" {
			fmt.Fprintf(g.stdout, "     %-28s hint: %s\n", "", ch.Hint)
		}
	}
	if failed > 0 {
		return &fault.Infra{Err: fmt.Errorf("%d of %d checks failed", failed, len(checks))}
	}
	return nil
}

// dockerAvailable reports whether an engine answers (testscript condition).
func dockerAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := docker.Ping(ctx)
	return err == nil
}
