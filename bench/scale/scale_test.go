//go:build linux

package scale

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
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
//	PROCTOR_SCALE_WAVES    rollouts per run = waves × in flight (default 3)
//	PROCTOR_SCALE_SLEEP    seconds the agent's one command sleeps (default 4)
type knobs struct {
	bin, plugin string
	inflight    []int
	waves       int
	sleep       float64
}

func readKnobs(b *testing.B) knobs {
	k := knobs{bin: os.Getenv("PROCTOR_BIN"), plugin: os.Getenv("PROCTOR_SCALE_PLUGIN"), waves: 3, sleep: 4}
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
	inflight, rollouts int
	wall, ideal        time.Duration
	peakRSS            int64 // bytes
	p50                map[string]time.Duration
}

// phases are the phase medians reported, in this order.
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
			b.ReportMetric(last.wall.Seconds()/last.ideal.Seconds(), "x-ideal")
			b.ReportMetric(float64(last.peakRSS)/1e6, "peak-RSS-MB")
			b.ReportMetric(float64(last.peakRSS)/1e6/float64(n), "MB/inflight")
			for _, p := range phases {
				b.ReportMetric(float64(last.p50[p].Microseconds())/1e3, p+"-p50-ms")
			}
		})
	}
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
	cmd := exec.Command(k.bin, "eval", filepath.Join(dir, "scale.toml"), "--out", out)
	cmd.Env = append(os.Environ(), "PROCTOR_CACHE_DIR="+cache)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if err != nil {
		b.Fatalf("proctor eval at %d in flight: %v\n%s", inflight, err, tail(logf.Name()))
	}
	recs := records(b, filepath.Join(out, rundir.ResultsFile))
	if len(recs) != rollouts {
		b.Fatalf("%d rollouts recorded, want %d\n%s", len(recs), rollouts, tail(logf.Name()))
	}
	times := map[string][]float64{}
	for _, r := range recs {
		if r.Outcome != rundir.OutcomePassed {
			b.Fatalf("rollout %s: %s %s\n%s", r.RolloutID, r.Outcome, r.Error, tail(logf.Name()))
		}
		for p, s := range r.Phases {
			times[p] = append(times[p], s)
		}
	}
	res := result{
		inflight: inflight, rollouts: rollouts, wall: wall,
		ideal:   time.Duration(float64((rollouts+inflight-1)/inflight) * sleep * float64(time.Second)),
		peakRSS: cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024,
		p50:     map[string]time.Duration{},
	}
	for p, v := range times {
		res.p50[p] = time.Duration(median(v) * float64(time.Second))
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

// summarize writes a Markdown table of the medians over the runs of each
// level.
func summarize(w io.Writer) {
	fmt.Fprintf(w, "\nscale benchmark on %s (medians of the runs at each level)\n\n", machine)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	head := []string{"in flight", "rollouts", "runs", "wall", "× ideal", "rollouts/s", "peak RSS", "RSS per in flight", "RSS per added"}
	for _, p := range phases {
		head = append(head, p+" p50")
	}
	fmt.Fprintln(tw, "| "+strings.Join(head, "\t| ")+"\t|")
	fmt.Fprintln(tw, strings.Repeat("| ---\t", len(head))+"|")
	var levels []int
	for _, r := range results {
		if !slices.Contains(levels, r.inflight) {
			levels = append(levels, r.inflight)
		}
	}
	// The first level's peak is the base the others add to: RSS per
	// added rollout in flight is what more rollouts cost, without what
	// proctor costs anyway.
	var base float64
	for k, n := range levels {
		var runs []result
		for _, r := range results {
			if r.inflight == n {
				runs = append(runs, r)
			}
		}
		pick := func(f func(result) float64) float64 {
			v := make([]float64, len(runs))
			for i, r := range runs {
				v[i] = f(r)
			}
			return median(v)
		}
		wall := pick(func(r result) float64 { return r.wall.Seconds() })
		row := []string{
			strconv.Itoa(n), strconv.Itoa(runs[0].rollouts), strconv.Itoa(len(runs)),
			fmt.Sprintf("%.1f s", wall),
			fmt.Sprintf("%.2f", pick(func(r result) float64 { return r.wall.Seconds() / r.ideal.Seconds() })),
			fmt.Sprintf("%.1f", pick(func(r result) float64 { return float64(r.rollouts) / r.wall.Seconds() })),
			fmt.Sprintf("%.0f MB", pick(func(r result) float64 { return float64(r.peakRSS) / 1e6 })),
			fmt.Sprintf("%.2f MB", pick(func(r result) float64 { return float64(r.peakRSS) / 1e6 / float64(r.inflight) })),
		}
		peak := pick(func(r result) float64 { return float64(r.peakRSS) / 1e6 })
		if k == 0 {
			base = peak
			row = append(row, "-")
		} else {
			row = append(row, fmt.Sprintf("%.2f MB", (peak-base)/float64(n-levels[0])))
		}
		for _, p := range phases {
			row = append(row, fmt.Sprintf("%.1f ms", pick(func(r result) float64 { return float64(r.p50[p].Microseconds()) / 1e3 })))
		}
		fmt.Fprintln(tw, "| "+strings.Join(row, "\t| ")+"\t|")
	}
	tw.Flush()
}
