package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// e2eWorkload is one workload of BenchmarkE2E: rollouts of the tb2
// fixture task hello-file, each made by a replay agent whose tool calls are
// calls, at the given concurrency.
type e2eWorkload struct {
	name        string
	rollouts    int
	concurrency int
	calls       []e2eCall
}

// e2eCall is one tool call: write_file (path, content) or terminal
// (command).
type e2eCall struct {
	tool, path, content, command string
}

// helloCalls are the agent: one write_file and ten terminal calls.
var helloCalls = []e2eCall{
	{tool: "write_file", path: "/tmp/hello.txt", content: "Hello, world!\n"},
	{tool: "terminal", command: "cat /tmp/hello.txt"},
	{tool: "terminal", command: "ls -la /tmp"},
	{tool: "terminal", command: "wc -c /tmp/hello.txt"},
	{tool: "terminal", command: "grep -c Hello /tmp/hello.txt"},
	{tool: "terminal", command: "pwd"},
	{tool: "terminal", command: "echo $HOME"},
	{tool: "terminal", command: "uname -a"},
	{tool: "terminal", command: "head -n 1 /tmp/hello.txt"},
	{tool: "terminal", command: "stat -c %s /tmp/hello.txt"},
	{tool: "terminal", command: "test -s /tmp/hello.txt && echo ok"},
}

// slowCalls are the same calls with a quarter of a second in each
// command, standing in for a model's turns: an agent phase of about 2.5 s.
func slowCalls() []e2eCall {
	out := slices.Clone(helloCalls)
	for i := range out {
		if out[i].tool == "terminal" {
			out[i].command = "sleep 0.25; " + out[i].command
		}
	}
	return out
}

// BenchmarkE2E runs each workload with proctor and with the docker-CLI
// baseline (scripts/bench/docker-cli.sh), alternately, one round per
// iteration (make bench-e2e runs five), and measures two floors in the
// same round: the engine's (create, start and remove of the same image
// through the Engine API, as many at once as the workload's concurrency,
// with nothing else) and the engine's with the commands (each container
// runs the rollout's commands and test.sh itself, with no harness). It
// reports the medians of the rounds, the ratio of the baseline's to
// proctor's, and proctor's time beyond the second floor as a share of the
// first; the log has every round with the machine's load. BENCH_E2E_SET adds --set flags to proctor's runs, to compare
// settings. It runs only with PROCTOR_BENCH_E2E=1, which make bench-e2e
// sets, so `make bench` does not take many minutes more.
func BenchmarkE2E(b *testing.B) {
	if os.Getenv("PROCTOR_BENCH_E2E") != "1" {
		b.Skip("set PROCTOR_BENCH_E2E=1 (make bench-e2e)")
	}
	sandboxtest.RequireDocker(b)
	for _, w := range []e2eWorkload{
		{name: "hello-file-32x4", rollouts: 32, concurrency: 4, calls: helloCalls},
		{name: "slow-agent-32x4", rollouts: 32, concurrency: 4, calls: slowCalls()},
		// One at a time, the issue's own view of a rollout's time: with
		// a core to spare, what the harness adds to each rollout's
		// latency rather than to the machine's load.
		{name: "hello-file-16x1", rollouts: 16, concurrency: 1, calls: helloCalls},
	} {
		b.Run(w.name, func(b *testing.B) { benchWorkload(b, w) })
	}
}

func benchWorkload(b *testing.B, w e2eWorkload) {
	bin := buildProctor(b)
	dir := b.TempDir()
	writeE2EInputs(b, dir, w)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	test, err := os.ReadFile("../../testdata/tb2/tasks/hello-file/tests/test.sh")
	if err != nil {
		b.Fatal(err)
	}
	script := floorScript(w, string(test))
	// Each part's wall time and the machine's CPU time while it ran: on a
	// machine whose cores the run keeps busy, CPU is what throughput buys.
	var proctor, baseline, floor, withCommands, bare, proctorCPU, floorCPU, withCommandsCPU, bareCPU []time.Duration
	timed := func(wall, cpu *[]time.Duration, f func() time.Duration) {
		c0 := sandboxtest.MachineCPU()
		*wall = append(*wall, f())
		if cpu != nil {
			*cpu = append(*cpu, sandboxtest.MachineCPU()-c0)
		}
	}
	round := 0
	for b.Loop() {
		load := loadAverage()
		steps := []func(){
			func() {
				timed(&proctor, &proctorCPU, func() time.Duration { return runProctorE2E(b, bin, dir, w, round) })
			},
			func() { timed(&baseline, nil, func() time.Duration { return runBaselineE2E(b, dir, w, round) }) },
		}
		if round%2 == 1 {
			slices.Reverse(steps)
		}
		for _, s := range steps {
			s()
		}
		timed(&floor, &floorCPU, func() time.Duration {
			return engineFloor(b, w, func(ctx context.Context) error { return floorOne(ctx, cli, "") })
		})
		timed(&withCommands, &withCommandsCPU, func() time.Duration {
			return engineFloor(b, w, func(ctx context.Context) error { return floorOne(ctx, cli, script) })
		})
		timed(&bare, &bareCPU, func() time.Duration {
			return engineFloor(b, w, func(ctx context.Context) error { return bareOne(ctx, cli, w, string(test)) })
		})
		b.Logf("round %d (load %s): proctor %.2fs (CPU %.2fs)  baseline %.2fs  floor %.2fs (CPU %.2fs)  floor with the commands %.2fs (CPU %.2fs)  bare harness %.2fs (CPU %.2fs)", round, load,
			proctor[round].Seconds(), proctorCPU[round].Seconds(), baseline[round].Seconds(), floor[round].Seconds(), floorCPU[round].Seconds(),
			withCommands[round].Seconds(), withCommandsCPU[round].Seconds(), bare[round].Seconds(), bareCPU[round].Seconds())
		round++
	}
	p, bl, f, fc, bh := median(proctor), median(baseline), median(floor), median(withCommands), median(bare)
	pc, fcpu, fccpu, bhcpu := median(proctorCPU), median(floorCPU), median(withCommandsCPU), median(bareCPU)
	b.ReportMetric(p.Seconds(), "proctor-s")
	b.ReportMetric(bl.Seconds(), "baseline-s")
	b.ReportMetric(f.Seconds(), "floor-s")
	b.ReportMetric(fc.Seconds(), "floor-cmds-s")
	b.ReportMetric(bl.Seconds()/p.Seconds(), "x-baseline")
	// The harness figure: proctor's time beyond the engine's own
	// create+start+remove and the commands themselves, against the
	// engine's cost; in wall time and in the machine's CPU.
	b.ReportMetric(100*(p-fc).Seconds()/f.Seconds(), "overhead-%")
	b.ReportMetric(100*(pc-fccpu).Seconds()/fcpu.Seconds(), "overhead-cpu-%")
	// The same figures for the bare harness: what a round trip per call
	// through the engine's attach stream costs with nothing else.
	b.ReportMetric(100*(bh-fc).Seconds()/f.Seconds(), "bare-overhead-%")
	b.ReportMetric(100*(bhcpu-fccpu).Seconds()/fcpu.Seconds(), "bare-overhead-cpu-%")
	n := float64(w.rollouts)
	b.Logf("medians of %d rounds: proctor %.2fs, baseline %.2fs (%.2fx), engine floor %.2fs, with the commands %.2fs; proctor beyond that: %.0f ms per rollout (%.0f%% of the engine floor's)",
		len(proctor), p.Seconds(), bl.Seconds(), bl.Seconds()/p.Seconds(), f.Seconds(), fc.Seconds(),
		float64((p-fc).Milliseconds())/n, 100*(p-fc).Seconds()/f.Seconds())
	b.Logf("machine CPU per rollout: proctor %.0f ms, engine floor %.0f ms, with the commands %.0f ms; proctor beyond that: %.0f ms (%.0f%% of the engine floor's)",
		float64(pc.Milliseconds())/n, float64(fcpu.Milliseconds())/n, float64(fccpu.Milliseconds())/n,
		float64((pc-fccpu).Milliseconds())/n, 100*(pc-fccpu).Seconds()/fcpu.Seconds())
	b.Logf("bare harness: %.2fs, %.0f ms per rollout beyond the floor with the commands (%.0f%% of the engine floor's); CPU %.0f ms per rollout, %.0f ms beyond (%.0f%%)",
		bh.Seconds(), float64((bh-fc).Milliseconds())/n, 100*(bh-fc).Seconds()/f.Seconds(),
		float64(bhcpu.Milliseconds())/n, float64((bhcpu-fccpu).Milliseconds())/n, 100*(bhcpu-fccpu).Seconds()/fcpu.Seconds())
	b.StopTimer()
}

// floorScript is the workload's rollout with no harness at all, for the
// second floor: the container's first process writes the file, runs each
// terminal command with `bash -c` (as the agent's tool does), writes the
// task's test.sh and runs it, and exits 0 only when the reward is 1.
func floorScript(w e2eWorkload, test string) string {
	var sb strings.Builder
	sb.WriteString("mkdir -p /logs/agent /logs/verifier /tests\n")
	for _, c := range w.calls {
		fmt.Fprintf(&sb, "{ %s; } >/dev/null 2>&1\n", c.script())
	}
	sb.WriteString(verifyScript(test) + "\n")
	sb.WriteString("[ \"$(cat /logs/verifier/reward.txt)\" = 1 ]\n")
	return sb.String()
}

// script is the call as a harness with no agent tools of its own runs it:
// write_file as mkdir and printf, terminal with `bash -c`.
func (c e2eCall) script() string {
	if c.tool == "write_file" {
		return fmt.Sprintf("mkdir -p %s && printf %%s %s > %s", shell.Quote(filepath.Dir(c.path)), shell.Quote(c.content), shell.Quote(c.path))
	}
	return "bash -c " + shell.Quote(c.command)
}

// verifyScript writes test and runs it as the task's verifier, its output
// in test-stdout.txt; the folders must be there.
func verifyScript(test string) string {
	return fmt.Sprintf("printf %%s %s > /tests/test.sh && bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1", shell.Quote(test))
}

// writeE2EInputs writes the workload's replay script and run config for
// proctor, and its calls file for the baseline, from the same calls.
func writeE2EInputs(b *testing.B, dir string, w e2eWorkload) {
	var turns []any
	var lines []string
	for _, c := range w.calls {
		args := map[string]any{"command": c.command}
		line := "terminal " + c.command
		if c.tool == "write_file" {
			args = map[string]any{"path": c.path, "content": c.content}
			line = "write_file " + c.path + " " + strings.ReplaceAll(c.content, "\n", `\n`)
		}
		turns = append(turns, map[string]any{"tool_calls": []any{map[string]any{"name": c.tool, "arguments": args}}})
		lines = append(lines, line)
	}
	turns = append(turns, map[string]any{"content": "Done."})
	script, _ := json.Marshal(map[string]any{"turns": turns})
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	config := fmt.Sprintf(`[run]
name = "bench-e2e"
concurrency = %d
attempts = %d
retries = 0
[agent]
kind = "replay"
script = "script.json"
[sandbox]
backend = "docker"
[env]
plugin = "tb2"
[env.config]
dataset = %q
tasks = ["hello-file"]
`, w.concurrency, w.rollouts, filepath.Join(root, "testdata/tb2/tasks"))
	for name, data := range map[string]string{
		"script.json": string(script),
		"calls.txt":   strings.Join(lines, "\n") + "\n",
		"run.toml":    config,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// runProctorE2E runs the workload with proctor into a fresh run directory
// and checks that every rollout passed and no container is left.
func runProctorE2E(b *testing.B, bin, dir string, w e2eWorkload, round int) time.Duration {
	out := filepath.Join(dir, fmt.Sprintf("run-%d", round))
	args := []string{"eval", filepath.Join(dir, "run.toml"), "--out", out}
	for _, s := range strings.Fields(os.Getenv("BENCH_E2E_SET")) {
		args = append(args, "--set", s)
	}
	t0 := time.Now()
	cmdOut, err := exec.Command(bin, args...).CombinedOutput()
	d := time.Since(t0)
	if err != nil {
		b.Fatalf("proctor: %v\n%s", err, cmdOut)
	}
	if n := passedRecords(b, filepath.Join(out, "results.jsonl")); n != w.rollouts {
		b.Fatalf("proctor: %d of %d rollouts passed\n%s", n, w.rollouts, cmdOut)
	}
	runID := runIDOf(out)
	if n := containers(b, runID); runID == "" || n > 0 {
		b.Fatalf("proctor left %d containers of run %q", n, runID)
	}
	os.RemoveAll(out)
	return d
}

// runBaselineE2E runs the workload with the docker-CLI baseline.
func runBaselineE2E(b *testing.B, dir string, w e2eWorkload, round int) time.Duration {
	root, _ := filepath.Abs("../..")
	label := fmt.Sprintf("e2e-%d-%d", os.Getpid(), round)
	cmd := exec.Command("bash", filepath.Join(root, "scripts/bench/docker-cli.sh"), sandboxtest.BaseImage(),
		fmt.Sprint(w.rollouts), fmt.Sprint(w.concurrency), filepath.Join(dir, "calls.txt"),
		filepath.Join(root, "testdata/tb2/tasks/hello-file/tests"), label)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(t0)
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("passed %d of %d", w.rollouts, w.rollouts)) {
		exec.Command("bash", "-c", "docker rm -f $(docker ps -aq --filter label=proctor.bench="+label+") >/dev/null 2>&1").Run()
		b.Fatalf("baseline: %v\n%s", err, out)
	}
	return d
}

// engineFloor runs one as many times as the workload has rollouts,
// concurrency at once.
func engineFloor(b *testing.B, w e2eWorkload, one func(context.Context) error) time.Duration {
	ctx := context.Background()
	sem := make(chan struct{}, w.concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	t0 := time.Now()
	for range w.rollouts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := one(ctx)
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	d := time.Since(t0)
	if firstErr != nil {
		b.Fatalf("engine floor: %v", firstErr)
	}
	return d
}

// floorOne creates, starts and removes one container through the Engine
// API: the engine's own cost of a rollout's sandbox, with nothing else.
// With a script, the container runs it as its first process and is
// removed once it exits 0: the engine's cost and the commands' own.
func floorOne(ctx context.Context, cli *client.Client, script string) error {
	cfg := floorConfig([]string{"sleep", "infinity"})
	if script != "" {
		cfg.Entrypoint = []string{"bash", "-c", script}
	}
	c, err := cli.ContainerCreate(ctx, cfg, floorHostConfig(), nil, nil, "")
	if err != nil {
		return err
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
	var done <-chan container.WaitResponse
	var failed <-chan error
	if script != "" {
		done, failed = cli.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
	}
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return err
	}
	if script != "" {
		if err := exited(done, failed, "the floor's script"); err != nil {
			return err
		}
	}
	return cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
}

func floorConfig(entrypoint []string) *container.Config {
	// The network as proctor's isolated sandboxes have it (no network
	// sandbox at the engine), the cheapest start the engine has.
	return &container.Config{Image: sandboxtest.BaseImage(), Entrypoint: entrypoint,
		NetworkDisabled: true, Labels: map[string]string{"proctor.bench": "floor"}}
}

func floorHostConfig() *container.HostConfig {
	pids := int64(1024)
	return &container.HostConfig{NetworkMode: "none", Resources: container.Resources{NanoCPUs: 1e9, Memory: 512 << 20, PidsLimit: &pids},
		LogConfig: container.LogConfig{Type: "none"}}
}

// bareLoop is the bare harness's shell: it reads a byte count and that
// many bytes of script, runs the script, and ends its answer with a mark.
const bareLoop = `while read -r n; do IFS= read -r -N "$n" c; eval "$c"; printf '\n@@done %d\n' "$?"; done`

// bareOne is one rollout by the least a harness with a persistent shell
// can do: a container whose first process is bareLoop, attached through
// the Engine API; one round trip on the attach stream per tool call
// (terminal calls run with `bash -c`), one for the verification (write
// test.sh, run it, print the reward), then stdin closes and the exited
// container is removed. No output caps, time limits, isolation, plugin or
// records: the transport's own cost, a floor under any such harness.
func bareOne(ctx context.Context, cli *client.Client, w e2eWorkload, test string) error {
	cfg := floorConfig([]string{"bash", "-c", bareLoop})
	cfg.OpenStdin, cfg.StdinOnce, cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true, true, true
	c, err := cli.ContainerCreate(ctx, cfg, floorHostConfig(), nil, nil, "")
	if err != nil {
		return err
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
	hj, err := cli.ContainerAttach(ctx, c.ID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return err
	}
	defer hj.Close()
	done, failed := cli.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { _, err := stdcopy.StdCopy(pw, pw, hj.Reader); pw.CloseWithError(err) }()
	out := bufio.NewReader(pr)
	call := func(script string) (string, error) {
		if _, err := fmt.Fprintf(hj.Conn, "%d\n%s", len(script), script); err != nil {
			return "", err
		}
		var sb strings.Builder
		for {
			line, err := out.ReadString('\n')
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(line, "@@done ") {
				return sb.String(), nil
			}
			sb.WriteString(line)
		}
	}
	for _, tc := range w.calls {
		if _, err := call(tc.script() + " 2>&1"); err != nil {
			return err
		}
	}
	reward, err := call("mkdir -p /logs/verifier /tests && " + verifyScript(test) + "; cat /logs/verifier/reward.txt")
	if err != nil {
		return err
	}
	if strings.TrimSpace(reward) != "1" {
		return fmt.Errorf("the bare harness's reward is %q", reward)
	}
	if err := hj.CloseWrite(); err != nil {
		return err
	}
	if err := exited(done, failed, "the bare harness's shell"); err != nil {
		return err
	}
	return cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
}

// exited waits for a container's exit as ContainerWait reports it, and
// fails unless its first process (what) exited 0.
func exited(done <-chan container.WaitResponse, failed <-chan error, what string) error {
	select {
	case r := <-done:
		if r.StatusCode != 0 {
			return fmt.Errorf("%s exited %d", what, r.StatusCode)
		}
		return nil
	case err := <-failed:
		return err
	}
}

// passedRecords counts the passed rollouts in a results.jsonl.
func passedRecords(b *testing.B, path string) int {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct {
			Outcome string `json:"outcome"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Outcome == "passed" {
			n++
		}
	}
	return n
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// loadAverage is the machine's 1-minute load average, for the log.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
