//go:build linux

package scale

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
)

// The benchmark's knobs, from the environment (make bench-scale passes
// them through). It runs only with PROCTOR_BENCH_SCALE=1, which make
// bench-scale sets, so `make bench` does not take minutes more.
//
//	PROCTOR_BIN            the proctor binary (default: bin/proctor of this checkout)
//	PROCTOR_SCALE_PLUGIN   the example plugin's .wasm (default: built from plugins/example)
//	PROCTOR_SCALE_INFLIGHT rollouts in flight, a comma list (default 10,100,1000)
//	PROCTOR_SCALE_WAVES    rollouts per run = waves × in flight (default 1)
//	PROCTOR_SCALE_SLEEP    seconds the agent's one command sleeps: the agent phase (default 30)
//	PROCTOR_SCALE_PROFILE  a folder: each run writes proctor's CPU, block and mutex profiles there
type knobs struct {
	bin, plugin string
	inflight    []int
	waves       int
	sleep       float64
	profile     string
}

func readKnobs(b *testing.B) knobs {
	k := knobs{bin: os.Getenv("PROCTOR_BIN"), plugin: os.Getenv("PROCTOR_SCALE_PLUGIN"), waves: 1, sleep: 30,
		profile: os.Getenv("PROCTOR_SCALE_PROFILE")}
	if k.bin == "" {
		root, err := filepath.Abs("../..")
		if err != nil {
			b.Fatal(err)
		}
		k.bin = filepath.Join(root, "bin", "proctor")
	}
	if _, err := os.Stat(k.bin); err != nil {
		b.Fatalf("proctor binary: %v: run make build, or set PROCTOR_BIN", err)
	}
	if k.plugin == "" {
		k.plugin = wasmtest.Build(b, "./plugins/example")
	}
	list := cmp.Or(os.Getenv("PROCTOR_SCALE_INFLIGHT"), "10,100,1000")
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("PROCTOR_SCALE_INFLIGHT=%q: want a comma list of counts", list)
		}
		k.inflight = append(k.inflight, n)
	}
	if v := os.Getenv("PROCTOR_SCALE_WAVES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("PROCTOR_SCALE_WAVES=%q: want a count", v)
		}
		k.waves = n
	}
	if v := os.Getenv("PROCTOR_SCALE_SLEEP"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s < 0 {
			b.Fatalf("PROCTOR_SCALE_SLEEP=%q: want seconds", v)
		}
		k.sleep = s
	}
	return k
}

// result is what one run of proctor measured.
type result struct {
	inflight, rollouts, waves int
	sleep                     float64 // the agent phase, seconds
	wall                      time.Duration
	use                       usage
	loadBefore, loadAfter     float64
	loadOK                    bool
	phases                    map[string][]float64 // seconds, every rollout's
}

// phases are the phases reported, in this order.
var phases = []string{"plugin_start", "sandbox_start", "setup", "agent", "verify", "sandbox_stop"}

var (
	mu      sync.Mutex
	results []result
	machine string
)

// BenchmarkScale runs the workload once per iteration at each level of
// rollouts in flight. Run it with -benchtime 1x and -count N; TestMain
// prints the medians of every level when the benchmarks end.
func BenchmarkScale(b *testing.B) {
	if os.Getenv("PROCTOR_BENCH_SCALE") != "1" {
		b.Skip("minutes long: make bench-scale runs it (PROCTOR_BENCH_SCALE=1)")
	}
	k := readKnobs(b)
	cache := b.TempDir()
	// A first run compiles the plugin into the cache, so no measured run
	// pays for its compilation.
	run(b, k, cache, 1, 1, 0)
	mu.Lock()
	machine = describeMachine(k.bin)
	mu.Unlock()
	for _, n := range k.inflight {
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			var last result
			for b.Loop() {
				last = run(b, k, cache, n, n*k.waves, k.sleep)
				mu.Lock()
				results = append(results, last)
				mu.Unlock()
			}
			b.ReportMetric(float64(last.rollouts)/last.wall.Seconds(), "rollouts/s")
			b.ReportMetric(float64(last.use.peakRSS)/1e6, "peak-RSS-MB")
			if last.use.selfOK {
				b.ReportMetric(perRollout(last, last.use.self), "proctor-cpu-ms/rollout")
			}
			if last.use.cgroupOK {
				b.ReportMetric(perRollout(last, last.use.cgroup), "machine-cpu-ms/rollout")
			}
			for _, p := range phases {
				if v := last.phases[p]; len(v) > 0 {
					b.ReportMetric(quantile(v, 0.5)*1e3, p+"-p50-ms")
				}
			}
		})
	}
}

// perRollout is d per rollout of r, in milliseconds.
func perRollout(r result, d time.Duration) float64 {
	return float64(d.Microseconds()) / 1e3 / float64(r.rollouts)
}

// run runs rollouts rollouts at inflight in flight, each agent sleeping
// sleep seconds, and checks that every one passed.
func run(b *testing.B, k knobs, cache string, inflight, rollouts int, sleep float64) result {
	b.Helper()
	dir := b.TempDir()
	var tasks bytes.Buffer
	for i := range rollouts {
		fmt.Fprintf(&tasks, "{\"id\":\"t%05d\",\"text\":\"hello\"}\n", i)
	}
	script := fmt.Sprintf(`{"turns":[{"tool_calls":[{"name":"terminal","arguments":{"command":"sleep %g; printf hello > answer.txt"}}]},{"content":"done"}]}`, sleep)
	config := fmt.Sprintf(`[run]
name = "scale"
concurrency = %d

[agent]
kind = "replay"
script = "script.json"

[sandbox]
backend = "local"

[env]
plugin = %q

[env.config]
image = "none"
dataset = "tasks.jsonl"
`, inflight, k.plugin)
	for name, data := range map[string][]byte{"tasks.jsonl": tasks.Bytes(), "script.json": []byte(script), "scale.toml": []byte(config)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	out := filepath.Join(dir, "run")
	logf, err := os.Create(filepath.Join(dir, "proctor.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	args := []string{"eval", filepath.Join(dir, "scale.toml"), "--out", out}
	if k.profile != "" && sleep > 0 {
		prof := filepath.Join(k.profile, fmt.Sprintf("inflight-%d-%d", inflight, time.Now().Unix()))
		args = append([]string{"--cpu-profile", filepath.Join(prof, "cpu.pprof"), "--profiles", prof}, args...)
		if err := os.MkdirAll(prof, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(k.bin, args...)
	cmd.Env = append(os.Environ(), "PROCTOR_CACHE_DIR="+cache)
	cmd.Stdout, cmd.Stderr = logf, logf
	res := result{inflight: inflight, rollouts: rollouts, waves: (rollouts + inflight - 1) / inflight, sleep: sleep, phases: map[string][]float64{}}
	before, ok1 := loadAvg()
	start := time.Now()
	res.use, err = runCounted(cmd)
	res.wall = time.Since(start)
	after, ok2 := loadAvg()
	res.loadBefore, res.loadAfter, res.loadOK = before, after, ok1 && ok2
	if err != nil {
		b.Fatalf("proctor eval at %d in flight: %v\n%s", inflight, err, tail(logf.Name()))
	}
	recs := records(b, filepath.Join(out, rundir.ResultsFile))
	if len(recs) != rollouts {
		b.Fatalf("%d rollouts recorded, want %d\n%s", len(recs), rollouts, tail(logf.Name()))
	}
	for _, r := range recs {
		if r.Outcome != rundir.OutcomePassed {
			b.Fatalf("rollout %s: %s %s\n%s", r.RolloutID, r.Outcome, r.Error, tail(logf.Name()))
		}
		for p, s := range r.Phases {
			res.phases[p] = append(res.phases[p], s)
		}
	}
	return res
}

func records(b *testing.B, path string) []rundir.Record {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var recs []rundir.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r rundir.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return recs
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quantile is the q-quantile of v (nearest rank).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// tail is the end of a log file, for a failure's message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// describeMachine names what the figures were taken on.
func describeMachine(bin string) string {
	var u syscall.Utsname
	_ = syscall.Uname(&u)
	release := func(a [65]int8) string {
		var s []byte
		for _, c := range a {
			if c == 0 {
				break
			}
			s = append(s, byte(c))
		}
		return string(s)
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
			}
		}
	}
	v, _ := exec.Command(bin, "version").Output()
	version, _, _ := strings.Cut(strings.TrimSpace(string(v)), "\n")
	return fmt.Sprintf("%d cores, %s memory, Linux %s, %s", runtime.NumCPU(), mem, release(u.Release), version)
}

// TestMain prints the medians of every level after the benchmarks.
func TestMain(m *testing.M) {
	code := wasmtest.Run(m)
	if len(results) > 0 {
		summarize(os.Stdout)
	}
	os.Exit(code)
}

// summarize writes the medians over the runs of each level as two
// Markdown tables, cost and phases, then the figures the targets are
// about. A figure the kernel did not give is "n/m", never a guess.
func summarize(w io.Writer) {
	levels := byLevel(results)
	fmt.Fprintf(w, "\nscale benchmark on %s (medians of the runs at each level)\n", machine)
	if len(levels) > 0 {
		r := levels[0].runs[0]
		fmt.Fprintf(w, "agent phase %g s, %d wave(s) per run\n\n", r.sleep, r.waves)
	}
	costTable(w, levels)
	fmt.Fprintln(w)
	phaseTable(w, levels)
	fmt.Fprintln(w)
	targets(w, levels)
}

// level is the runs at one count of rollouts in flight.
type level struct {
	n    int
	runs []result
}

func byLevel(rs []result) []level {
	var out []level
	for _, r := range rs {
		k := slices.IndexFunc(out, func(l level) bool { return l.n == r.inflight })
		if k < 0 {
			out = append(out, level{n: r.inflight})
			k = len(out) - 1
		}
		out[k].runs = append(out[k].runs, r)
	}
	return out
}

// pick is the median of f over the runs where f measured something.
func (l level) pick(f func(result) (float64, bool)) (float64, bool) {
	var v []float64
	for _, r := range l.runs {
		if x, ok := f(r); ok {
			v = append(v, x)
		}
	}
	if len(v) < len(l.runs) {
		return 0, false // a median of some runs would not be the level's
	}
	return median(v), true
}

func (l level) proctorCPU() (float64, bool) {
	return l.pick(func(r result) (float64, bool) { return perRollout(r, r.use.self), r.use.selfOK })
}

// machineCPU is everything the run's cgroup used, per rollout.
func (l level) machineCPU() (float64, bool) {
	return l.pick(func(r result) (float64, bool) { return perRollout(r, r.use.cgroup), r.use.cgroupOK })
}

// floor is the machine's CPU floor of a run: its CPU time spread over
// every core, the least wall time the work can take beside the agent.
func floor(r result) (time.Duration, bool) {
	return r.use.cgroup / time.Duration(runtime.NumCPU()), r.use.cgroupOK
}

func (l level) phase(p string, q float64) (float64, bool) {
	return l.pick(func(r result) (float64, bool) {
		v := r.phases[p]
		return quantile(v, q) * 1e3, len(v) > 0
	})
}

// cell formats a measured figure, or says it was not.
func cell(v float64, ok bool, format string) string {
	if !ok {
		return "n/m"
	}
	return fmt.Sprintf(format, v)
}

func costTable(w io.Writer, levels []level) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	head := []string{"in flight", "rollouts", "runs", "load before → after", "wall", "agent + CPU floor", "wall ÷ (agent + floor)",
		"proctor CPU / rollout", "sandboxes' CPU / rollout", "machine CPU / rollout", "peak RSS", "RSS per in flight"}
	fmt.Fprintln(tw, "| "+strings.Join(head, "\t| ")+"\t|")
	fmt.Fprintln(tw, strings.Repeat("| ---\t", len(head))+"|")
	for _, l := range levels {
		lb, okb := l.pick(func(r result) (float64, bool) { return r.loadBefore, r.loadOK })
		la, oka := l.pick(func(r result) (float64, bool) { return r.loadAfter, r.loadOK })
		ideal, okI := l.pick(func(r result) (float64, bool) {
			f, ok := floor(r)
			return float64(r.waves)*r.sleep + f.Seconds(), ok
		})
		ratio, okR := l.pick(func(r result) (float64, bool) {
			f, ok := floor(r)
			return r.wall.Seconds() / (float64(r.waves)*r.sleep + f.Seconds()), ok
		})
		pc, okP := l.proctorCPU()
		mc, okM := l.machineCPU()
		rss, _ := l.pick(func(r result) (float64, bool) { return float64(r.use.peakRSS) / 1e6, r.use.peakRSS > 0 })
		wall, _ := l.pick(func(r result) (float64, bool) { return r.wall.Seconds(), true })
		load := "n/m"
		if okb && oka {
			load = fmt.Sprintf("%.0f → %.0f", lb, la)
		}
		row := []string{strconv.Itoa(l.n), strconv.Itoa(l.runs[0].rollouts), strconv.Itoa(len(l.runs)), load,
			fmt.Sprintf("%.1f s", wall), cell(ideal, okI, "%.1f s"), cell(ratio, okR, "%.2f"),
			cell(pc, okP, "%.1f ms"), cell(mc-pc, okP && okM, "%.1f ms"), cell(mc, okM, "%.1f ms"),
			fmt.Sprintf("%.0f MB", rss), fmt.Sprintf("%.2f MB", rss/float64(l.n))}
		fmt.Fprintln(tw, "| "+strings.Join(row, "\t| ")+"\t|")
	}
	tw.Flush()
}

func phaseTable(w io.Writer, levels []level) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	head := []string{"in flight"}
	for _, p := range phases {
		head = append(head, p+" p50 / p95")
	}
	fmt.Fprintln(tw, "| "+strings.Join(head, "\t| ")+"\t|")
	fmt.Fprintln(tw, strings.Repeat("| ---\t", len(head))+"|")
	for _, l := range levels {
		row := []string{strconv.Itoa(l.n)}
		for _, p := range phases {
			p50, ok50 := l.phase(p, 0.5)
			p95, ok95 := l.phase(p, 0.95)
			row = append(row, cell(p50, ok50, "%.1f")+" / "+cell(p95, ok95, "%.1f ms"))
		}
		fmt.Fprintln(tw, "| "+strings.Join(row, "\t| ")+"\t|")
	}
	tw.Flush()
}

// targets prints the figures the targets are about, each level against
// the first.
func targets(w io.Writer, levels []level) {
	if len(levels) < 2 {
		return
	}
	first := levels[0]
	pc0, ok0 := first.proctorCPU()
	ps0, okS := first.phase("plugin_start", 0.5)
	for _, l := range levels[1:] {
		pc, ok := l.proctorCPU()
		ps, okP := l.phase("plugin_start", 0.5)
		rss, _ := l.pick(func(r result) (float64, bool) { return float64(r.use.peakRSS) / 1e6, r.use.peakRSS > 0 })
		// What one more rollout costs proctor, without what a run costs
		// it anyway (loading the plugin, the tasks, the report).
		added := (pc*float64(l.runs[0].rollouts) - pc0*float64(first.runs[0].rollouts)) / float64(l.runs[0].rollouts-first.runs[0].rollouts)
		fmt.Fprintf(w, "at %d in flight: proctor CPU per rollout %s of its value at %d (%s per added rollout); plugin_start p50 %s of its value at %d; peak RSS %.2f MB per rollout in flight\n",
			l.n, cell(pc/pc0, ok && ok0 && pc0 > 0, "%.2f×"), first.n, cell(added, ok && ok0, "%.1f ms"),
			cell(ps/ps0, okP && okS && ps0 > 0, "%.2f×"), first.n, rss/float64(l.n))
	}
}
