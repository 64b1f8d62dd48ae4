package miniswe

import (
	"context"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// BenchmarkStep is what one mini-swe-agent command costs beyond its own
// time, with a command that takes none ("true"): a fresh bash -c in the
// working directory with swebench.yaml's variables, its output decoded
// and rendered into the observation. proctor's way (the sandbox's shell)
// against mini-swe-agent's (docker exec -w -e ... bash -c per command).
// Run it with -benchtime 100x for the median over 100 steps.
func BenchmarkStep(b *testing.B) {
	sandboxtest.RequireDocker(b)
	be, err := docker.New()
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	sb, err := be.Start(ctx, sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: "bench-miniswe-step"}})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(context.WithoutCancel(ctx))
	for _, way := range []struct {
		name string
		sh   agent.Shell
	}{{"proctor", sandbox.AgentView(sb)}, {"docker-exec", sandboxtest.DockerExec{ID: sb.(interface{ ID() string }).ID()}}} {
		b.Run(way.name, func(b *testing.B) {
			r := &run{a: &Agent{}, sh: way.sh, cwd: "/"}
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				res, err := r.execute(ctx, action{command: "true", id: "c"})
				if err != nil || res.ReturnCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
				d = append(d, time.Since(t0))
			}
			sandboxtest.ReportMedian(b, d, "median-ms/step")
		})
	}
}
