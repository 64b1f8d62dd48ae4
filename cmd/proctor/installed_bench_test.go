package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent/gateway"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
)

// benchAgent is the installed agent the benchmarks run: codex, the
// quickest to start, unless PROCTOR_BENCH_AGENT names another.
func benchAgent() cliAgent {
	for _, c := range clis {
		if c.name == os.Getenv("PROCTOR_BENCH_AGENT") {
			return c
		}
	}
	return clis[0]
}

// benchEval runs the real binary's eval of hello-file with extra --set
// values and returns the run directory; while it runs, watch (when set)
// gets its process id.
func benchEval(b *testing.B, srv *openaitest.Server, agentKind string, watch func(pid int), sets ...string) string {
	b.Helper()
	root, _ := filepath.Abs("../..")
	out := b.TempDir()
	args := []string{"eval", filepath.Join(root, "examples/quickstart.toml"),
		"--set", "env.plugin=" + wasmtest.Build(b, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file"]`, "--set", "agent.kind=" + agentKind, "--set", "agent.name=" + benchAgent().name,
		"--set", "model.base_url=" + srv.URL(), "--set", "model.name=scripted", "--set", "run.retries=0",
		"--set", "run.agent_timeout_scale=10", "--set", "sandbox.memory_mb=2048", "--out", out}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(buildProctor(b), args...)
	var outb strings.Builder
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if watch != nil {
		watch(cmd.Process.Pid)
	}
	if err := cmd.Wait(); err != nil && cmd.ProcessState.ExitCode() != exitRolloutsErr {
		b.Fatalf("%v\n%s", err, outb.String())
	}
	return out
}

// solveSteps scripts n rollouts that each write the answer, then end.
func solveSteps(n int, delay time.Duration) []openaitest.Step {
	c := benchAgent()
	var steps []openaitest.Step
	for range n {
		steps = append(steps, openaitest.Step{Delay: delay, Body: openaitest.Reply("", openaitest.Call{Name: c.tool, Args: c.args("echo 'Hello, world!' > /tmp/hello.txt")})},
			openaitest.Step{Body: openaitest.Reply("Done.")})
	}
	return steps
}

// BenchmarkInstalledAgentStart measures the start of an installed agent
// (benchAgent) once its layer is built, with the real binary, over
// b.N rollouts one at a time (at least 5):
//   - start-ms: from the agent's start (its gateway's) to the CLI's first
//     model call, which includes relaying the gateway into the sandbox,
//     writing its settings and the CLI's own start;
//   - layer-ms: what starting from the layer adds to the sandbox's start:
//     the median sandbox_start of its rollouts minus that of nop rollouts
//     of the same task.
func BenchmarkInstalledAgentStart(b *testing.B) {
	requireAgent(b, benchAgent().name)
	srv := openaitest.New(solveSteps(1, 0)...)
	defer srv.Close()
	srv.AnswerSideCalls("Side")
	benchEval(b, srv, "installed", nil) // the layer, built when missing
	n := 0
	for b.Loop() {
		n++
	}
	n = max(n, 5)
	srv.Script(solveSteps(n, 0)...)
	dir := benchEval(b, srv, "installed", nil, fmt.Sprintf("run.attempts=%d", n), "run.concurrency=1")
	nop := benchEval(b, srv, "nop", nil, fmt.Sprintf("run.attempts=%d", n), "run.concurrency=1")
	var starts []float64
	for _, rec := range records(b, dir) {
		if at, ok := firstCallAt(b, filepath.Join(dir, rec["agent_logs"].(string))); ok {
			starts = append(starts, at*1000)
		}
	}
	b.ReportMetric(med(starts), "start-ms")
	b.ReportMetric(med(phase(b, dir, "sandbox_start"))-med(phase(b, nop, "sandbox_start")), "layer-ms")
}

// BenchmarkInstalledAgentRSS measures proctor's resident memory per
// installed-agent rollout running: its RSS with 4 rollouts at once, each
// waiting on its first model call, against 1, with the real binary.
func BenchmarkInstalledAgentRSS(b *testing.B) {
	requireAgent(b, benchAgent().name)
	rss := map[int]float64{}
	for b.Loop() {
		for _, k := range []int{1, 4} {
			srv := openaitest.New(solveSteps(k, 20*time.Second)...)
			srv.AnswerSideCalls("Side")
			got := make(chan float64, 1)
			benchEval(b, srv, "installed", func(pid int) {
				go func() {
					for len(srv.Requests()) < k { // every rollout waits on the model
						time.Sleep(100 * time.Millisecond)
					}
					time.Sleep(2 * time.Second)
					got <- float64(vmRSS(pid)) / (1 << 20)
				}()
			}, fmt.Sprintf("run.attempts=%d", k), fmt.Sprintf("run.concurrency=%d", k))
			select {
			case v := <-got:
				rss[k] = max(rss[k], v)
			case <-time.After(10 * time.Second):
				b.Fatalf("%d rollouts never all waited on the model", k)
			}
			srv.Close()
		}
	}
	b.ReportMetric(rss[1], "rss-1-MiB")
	b.ReportMetric((rss[4]-rss[1])/3, "MiB/rollout")
}

// vmRSS is a process's resident set size in bytes (0 when gone).
func vmRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// firstCallAt reads when the first model call came, from a rollout's
// agent logs.
func firstCallAt(b testing.TB, tarPath string) (float64, bool) {
	f, err := os.Open(tarPath)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return 0, false
		}
		if h.Name != "gateway.jsonl" {
			continue
		}
		sc := bufio.NewScanner(io.LimitReader(tr, h.Size))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var ex gateway.Exchange
			if json.Unmarshal(sc.Bytes(), &ex) == nil && ex.Call >= 0 {
				return ex.At, true
			}
		}
		return 0, false
	}
}

// phase is every record's time in a phase, in ms.
func phase(b testing.TB, dir, name string) []float64 {
	var out []float64
	for _, rec := range records(b, dir) {
		if p, ok := rec["phases"].(map[string]any)[name].(float64); ok {
			out = append(out, p*1000)
		}
	}
	return out
}

func med(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
