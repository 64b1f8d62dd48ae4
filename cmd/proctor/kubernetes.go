package main

import (
	"context"
	"encoding/json"
	"runtime"
	"time"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/sandbox/seccomp"
)

// kubernetesAvailable reports whether the cluster the environment names
// answers (testscript condition).
func kubernetesAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := assemble.Kubernetes(ctx, &config.Config{})
	return err == nil
}

type seccompCmd struct {
	Arch string `help:"The nodes' architecture, as Go names it (amd64, arm64); default: this machine's."`
}

// Run prints the profile in the container runtime's format: the file a
// node's kubelet loads for [sandbox.kubernetes] seccomp_profile.
func (c seccompCmd) Run(g *globals) error {
	arch := c.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	p, err := seccomp.OCI(arch)
	if err != nil {
		return &fault.Usage{Err: err}
	}
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}
