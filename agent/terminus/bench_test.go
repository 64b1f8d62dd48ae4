package terminus

import (
	"context"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/terminus/tmuxbin"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// BenchmarkStep is what one Terminus-2 episode costs on the terminal
// beyond the command's own time, with a command that takes none ("true",
// duration 0): the session check, the keystrokes and the new output
// (has-session, send-keys, capture-pane), run as the agent runs them. Each
// sub-benchmark sends the same tmux commands to the same session:
// proctor's way (the sandbox's shell), and Harbor's way (a docker exec
// per command; Harbor's docker compose exec costs more still). Run it
// with -benchtime 100x for the median over 100 steps.
func BenchmarkStep(b *testing.B) {
	sandboxtest.RequireDocker(b)
	dir, err := tmuxbin.Find()
	if err != nil {
		b.Skip(err)
	}
	be, err := docker.New(docker.WithReadOnlyDir(dir, "/.proctor-tmux"))
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	sb, err := be.Start(ctx, sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: "bench-terminus-step"}})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(context.WithoutCancel(ctx))
	s := &session{sh: sandbox.AgentView(sb), tmux: "tmux", width: 160, height: 40, logDir: agentLogDir, clock: realClock()}
	if s.tmux, err = (Tmux{Dir: "/.proctor-tmux"}).ensure(ctx, s); err != nil {
		b.Fatal(err)
	}
	if err := s.start(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := s.incremental(ctx); err != nil {
		b.Fatal(err)
	}
	for _, way := range []struct {
		name string
		sh   agent.Shell
	}{{"proctor", s.sh}, {"docker-exec", sandboxtest.DockerExec{ID: sb.(interface{ ID() string }).ID()}}} {
		b.Run(way.name, func(b *testing.B) {
			w := *s
			w.sh = way.sh
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if ok, err := w.alive(ctx); !ok || err != nil {
					b.Fatalf("session: %v", err)
				}
				if err := w.sendKeys(ctx, []string{"true\n"}, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := w.incremental(ctx); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			sandboxtest.ReportMedian(b, d, "median-ms/step")
		})
	}
}
