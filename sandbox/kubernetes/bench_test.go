package kubernetes

import (
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// reportMedian adds the median of per-op durations (ns/op is a mean,
// which one slow outlier on a shared machine skews).
func reportMedian(b *testing.B, unit string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/1e6, unit)
}

func benchSpec() sandbox.Spec {
	return sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: "bench"}}
}

// kubectl finds the kubectl binary: on PATH, or the local cluster's.
func kubectl(b *testing.B) string {
	if p, err := osexec.LookPath("kubectl"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	m, _ := filepath.Glob(filepath.Join(home, ".cache/proctor/k8s/*/bin/kubectl"))
	if len(m) == 0 {
		b.Fatal("no kubectl on PATH or in ~/.cache/proctor/k8s (make k8s-build)")
	}
	return m[len(m)-1]
}

// BenchmarkExecTrue runs `true` on one pod four ways: through the
// persistent shell (an agent's command), fresh (a plugin's), as a new exec
// session of its own (what file operations cost), and with `kubectl exec`
// (what a harness that shells out per command pays).
func BenchmarkExecTrue(b *testing.B) {
	be := newBackend(b, Config{})
	ctx := context.Background()
	sbi, err := be.Start(ctx, benchSpec())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sbi.Close(ctx) })
	sb := sbi.(*Sandbox)
	for _, mode := range []struct {
		name string
		opts sandbox.ExecOptions
	}{{"shell", sandbox.ExecOptions{}}, {"fresh", sandbox.ExecOptions{Fresh: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				r, err := sb.Exec(ctx, "true", mode.opts)
				if err != nil || r.ExitCode != 0 {
					b.Fatalf("exec: %+v %v", r, err)
				}
				d = append(d, time.Since(t0))
			}
			reportMedian(b, "median-ms/op", d)
		})
	}
	b.Run("session", func(b *testing.B) {
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if code, msg, err := sb.run(ctx, "true", nil, nil, nil); err != nil || code != 0 {
				b.Fatalf("exec: %d %s %v", code, msg, err)
			}
			d = append(d, time.Since(t0))
		}
		reportMedian(b, "median-ms/op", d)
	})
	b.Run("kubectl", func(b *testing.B) {
		bin := kubectl(b)
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			out, err := osexec.Command(bin, "--namespace", be.ns, "exec", sb.Name(), "--", "true").CombinedOutput()
			if err != nil {
				b.Fatalf("kubectl exec: %v %s", err, out)
			}
			d = append(d, time.Since(t0))
		}
		reportMedian(b, "median-ms/op", d)
	})
}

// BenchmarkStartDelete starts n sandboxes at once (pod created, running,
// shells ready) and then closes them (pod deleted with grace 0), and
// reports the median per sandbox of each. c1-noisolation is the one shell
// of a backend that does not isolate: against c1, what isolation adds to a
// start.
func BenchmarkStartDelete(b *testing.B) {
	for _, c := range []struct {
		name string
		n    int
		cfg  Config
	}{{"c1", 1, Config{}}, {"c16", 16, Config{}}, {"c1-noisolation", 1, Config{NoIsolation: true}}} {
		n := c.n
		b.Run(c.name, func(b *testing.B) {
			be := newBackend(b, c.cfg)
			ctx := context.Background()
			var starts, deletes []time.Duration
			var mu sync.Mutex
			for b.Loop() {
				sbs := make([]sandbox.Sandbox, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						t0 := time.Now()
						sbs[i], errs[i] = be.Start(ctx, benchSpec())
						mu.Lock()
						starts = append(starts, time.Since(t0))
						mu.Unlock()
					})
				}
				wg.Wait()
				for i, sb := range sbs {
					if sb == nil {
						continue
					}
					wg.Go(func() {
						t0 := time.Now()
						if err := sb.Close(ctx); err != nil && errs[i] == nil {
							errs[i] = err
						}
						mu.Lock()
						deletes = append(deletes, time.Since(t0))
						mu.Unlock()
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			reportMedian(b, "start-median-ms", starts)
			reportMedian(b, "delete-median-ms", deletes)
		})
	}
}

// BenchmarkOpenSandboxes holds 50 open sandboxes, each with its shell's
// exec stream, and reports what they cost this process per sandbox:
// goroutines, live heap and resident memory, and the resident memory
// 1,000 would take at that rate.
func BenchmarkOpenSandboxes(b *testing.B) {
	const n = 50
	be := newBackend(b, Config{})
	ctx := context.Background()
	// The resident set before any sandbox of this process: later rounds
	// reuse memory the runtime kept, so their own "before" would hide it.
	baseOnce.Do(func() { _, _, baseRSS = footprint(b) })
	for b.Loop() {
		g0, h0, _ := footprint(b)
		r0 := baseRSS
		sbs := make([]sandbox.Sandbox, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				sbs[i], errs[i] = be.Start(ctx, benchSpec())
			})
		}
		wg.Wait()
		for i, sb := range sbs {
			if errs[i] == nil {
				if _, err := sb.Exec(ctx, "echo hi", sandbox.ExecOptions{}); err != nil {
					errs[i] = err
				}
			}
		}
		g1, h1, r1 := footprint(b)
		b.ReportMetric(float64(g1-g0)/n, "goroutines/sandbox")
		b.ReportMetric((h1-h0)/n/1024, "heap-KiB/sandbox")
		b.ReportMetric((r1-r0)/n/1024, "rss-KiB/sandbox")
		b.ReportMetric(r1/(1<<20), "rss-MiB-at-50")
		b.ReportMetric((r0+(r1-r0)/n*1000)/(1<<20), "rss-MiB-at-1000")
		for i, sb := range sbs {
			if sb != nil {
				wg.Go(func() { sb.Close(ctx) })
			}
			if errs[i] != nil {
				defer b.Fatal(errs[i])
			}
		}
		wg.Wait()
	}
}

var (
	baseOnce sync.Once
	baseRSS  float64
)

// footprint is this process's goroutines, live heap (bytes, after a GC)
// and resident set (bytes).
func footprint(b *testing.B) (int, float64, float64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	rss := 0.0
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				rss = v * 1024
			}
		}
	}
	return runtime.NumGoroutine(), float64(m.HeapInuse), rss
}

// BenchmarkSeal is what verification's isolation costs a rollout after the
// agent's turn: Seal of a sandbox with tb2's private folders (the process
// count, and fresh tmpfs mounts in the plugin's namespace).
func BenchmarkSeal(b *testing.B) {
	be := newBackend(b, Config{})
	ctx := context.Background()
	spec := benchSpec()
	spec.Private = sandboxtest.Private
	sbi, err := be.Start(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sbi.Close(ctx) })
	sb := sbi.(*Sandbox)
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := sb.Seal(ctx); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	reportMedian(b, "median-ms/op", d)
}
