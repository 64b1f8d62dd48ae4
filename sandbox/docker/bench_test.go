package docker

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// reportMedian adds the median of per-op durations in milliseconds as
// unit (a mean, ns/op, is what one slow outlier on a shared machine skews).
func reportMedian(b *testing.B, d []time.Duration, unit string) {
	if len(d) == 0 {
		return
	}
	b.ReportMetric(float64(median(d))/1e6, unit)
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

func benchSandbox(b *testing.B, be *Backend) *Sandbox {
	b.Helper()
	sb, err := be.Start(context.Background(), sandbox.Spec{
		Image:  sandboxtest.BaseImage(),
		Labels: map[string]string{sandbox.LabelRun: "bench"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Close(context.Background()) })
	return sb.(*Sandbox)
}

// BenchmarkExecTrue is one command through the persistent shell.
func BenchmarkExecTrue(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts sandbox.ExecOptions
	}{{"shell", sandbox.ExecOptions{}}, {"fresh", sandbox.ExecOptions{Fresh: true}}} {
		// shell: the agent's persistent state restored and saved; fresh:
		// a plugin's command, from the sandbox's starting state.
		b.Run(mode.name, func(b *testing.B) {
			be := newBackend(b)
			sb := benchSandbox(b, be)
			ctx := context.Background()
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				r, err := sb.Exec(ctx, "true", mode.opts)
				if err != nil || r.ExitCode != 0 {
					b.Fatalf("exec: %+v %v", r, err)
				}
				d = append(d, time.Since(t0))
			}
			sandboxtest.ReportMedian(b, d, "median-ms/op")
		})
	}
}

// BenchmarkDockerExecCLI is the same command with `docker exec`, what a
// harness that shells out per command pays, against the persistent shell
// of the same container: each iteration runs one of each, so the two
// medians and their ratio come from the same moments of the machine. A
// busy machine moves both (on one loaded here: 3 ms to 18-28, 78 ms to
// 420-580); compare the ratio, or the two figures of one run, never a
// figure with another run's.
func BenchmarkDockerExecCLI(b *testing.B) {
	be := newBackend(b)
	sb := benchSandbox(b, be)
	if _, err := exec.LookPath("docker"); err != nil {
		b.Skip("no docker CLI")
	}
	ctx := context.Background()
	var shell, cli []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if r, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil || r.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", r, err)
		}
		t1 := time.Now()
		if out, err := exec.Command("docker", "exec", sb.ID(), "true").CombinedOutput(); err != nil {
			b.Fatalf("docker exec: %v %s", err, out)
		}
		shell, cli = append(shell, t1.Sub(t0)), append(cli, time.Since(t1))
	}
	reportMedian(b, cli, "median-ms/op")
	reportMedian(b, shell, "shell-median-ms/op")
	if m := median(shell); m > 0 {
		b.ReportMetric(float64(median(cli))/float64(m), "x-shell")
	}
}

// BenchmarkStart is create, start and ready shells, with the image
// present, with and without the warden's isolation; isolated/seal adds
// the Seal that empties the verifier's folders, what isolation costs a
// rollout in all. Removal is not timed.
func BenchmarkStart(b *testing.B) {
	for _, mode := range []struct {
		name    string
		isolate bool
		seal    bool
	}{{"plain", false, false}, {"isolated", true, false}, {"isolated+seal", true, true}} {
		b.Run(mode.name, func(b *testing.B) {
			sandboxtest.RequireDocker(b)
			be, err := New(WithIsolation(mode.isolate))
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			spec := sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: "bench"}}
			if mode.isolate {
				spec.Private = sandboxtest.Private
			}
			ctx := context.Background()
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				sb, err := be.Start(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				if mode.seal {
					if _, err := sb.(sandbox.Isolated).Seal(ctx); err != nil {
						b.Fatal(err)
					}
				}
				d = append(d, time.Since(t0))
				b.StopTimer()
				sb.Close(ctx)
				b.StartTimer()
			}
			sandboxtest.ReportMedian(b, d, "median-ms/op")
		})
	}
}

// BenchmarkStart16 starts 16 sandboxes at once and reports the time until
// all are ready, in total and per sandbox.
func BenchmarkStart16(b *testing.B) {
	const n = 16
	be := newBackend(b)
	ctx := context.Background()
	var total []time.Duration
	for b.Loop() {
		t0 := time.Now()
		sbs := make([]sandbox.Sandbox, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				sbs[i], errs[i] = be.Start(ctx, sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: "bench"}})
			})
		}
		wg.Wait()
		total = append(total, time.Since(t0))
		b.StopTimer()
		var failed error
		for i, sb := range sbs {
			if sb != nil {
				wg.Go(func() { sb.Close(ctx) })
			}
			if errs[i] != nil && failed == nil {
				failed = errs[i]
			}
		}
		wg.Wait()
		if failed != nil {
			b.Fatal(failed)
		}
		b.StartTimer()
	}
	slices.Sort(total)
	med := total[len(total)/2]
	b.ReportMetric(float64(med)/1e6, "median-total-ms")
	b.ReportMetric(float64(med)/1e6/n, "median-ms/sandbox")
}

// BenchmarkRSS64 holds 64 open sandboxes and reports this process's
// resident memory, the host-side cost of a wide run.
func BenchmarkRSS64(b *testing.B) {
	const n = 64
	be := newBackend(b)
	ctx := context.Background()
	for b.Loop() {
		before := vmRSS(b)
		sbs := make([]sandbox.Sandbox, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				sbs[i], errs[i] = be.Start(ctx, sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: "bench"}})
			})
		}
		wg.Wait()
		// Every shell has answered at least once.
		for i, sb := range sbs {
			if errs[i] != nil {
				continue
			}
			if _, err := sb.Exec(ctx, "echo hi", sandbox.ExecOptions{}); err != nil {
				errs[i] = err
			}
		}
		after := vmRSS(b)
		b.ReportMetric(after/1024, "rss-MB")
		b.ReportMetric((after-before)/1024/n, "rss-MB/sandbox")
		var failed error
		for i, sb := range sbs {
			if sb != nil {
				wg.Go(func() { sb.Close(ctx) })
			}
			if errs[i] != nil && failed == nil {
				failed = errs[i]
			}
		}
		wg.Wait()
		if failed != nil {
			b.Fatal(failed)
		}
	}
}

// vmRSS reads this process's resident set in KiB.
func vmRSS(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, err := strconv.ParseFloat(f[0], 64)
				if err == nil {
					return v
				}
			}
		}
	}
	b.Fatal(fmt.Errorf("no VmRSS in /proc/self/status"))
	return 0
}

// BenchmarkIsolationOverhead is what verifier isolation adds to a rollout's
// sandbox life: each iteration starts and closes a plain sandbox and an
// isolated one (started, sealed for verification, closed) back to back, so
// both see the same load, and reports the medians of each and of the
// paired differences.
func BenchmarkIsolationOverhead(b *testing.B) {
	sandboxtest.RequireDocker(b)
	plain, err := New(WithIsolation(false))
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	isolated, err := New(WithIsolation(true))
	if err != nil {
		b.Fatal(err)
	}
	defer isolated.Close()
	ctx := context.Background()
	labels := map[string]string{sandbox.LabelRun: "bench"}
	life := func(be *Backend, spec sandbox.Spec, seal bool) (start, sealed, closed time.Duration) {
		t0 := time.Now()
		sb, err := be.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Since(t0)
		if seal {
			t1 := time.Now()
			if _, err := sb.(sandbox.Isolated).Seal(ctx); err != nil {
				b.Fatal(err)
			}
			sealed = time.Since(t1)
		}
		t2 := time.Now()
		if err := sb.Close(ctx); err != nil {
			b.Fatal(err)
		}
		return start, sealed, time.Since(t2)
	}
	var plainStart, plainClose, plainLife, isoStart, isoSeal, isoClose, isoLife, diff []time.Duration
	for b.Loop() {
		ps, _, pc := life(plain, sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: labels}, false)
		is, il, ic := life(isolated, sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: labels, Private: sandboxtest.Private}, true)
		plainStart, plainClose = append(plainStart, ps), append(plainClose, pc)
		plainLife = append(plainLife, ps+pc)
		isoStart, isoSeal, isoClose = append(isoStart, is), append(isoSeal, il), append(isoClose, ic)
		isoLife = append(isoLife, is+il+ic)
		diff = append(diff, is+il+ic-ps-pc)
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"plain-ms", plainLife}, {"plain-start-ms", plainStart}, {"plain-close-ms", plainClose}, {"isolated-ms", isoLife}, {"iso-start-ms", isoStart}, {"seal-ms", isoSeal}, {"iso-close-ms", isoClose}, {"overhead-ms", diff}} {
		sandboxtest.ReportMedian(b, m.d, m.name)
	}
}

// BenchmarkSmallFiles is a small write_file and a read of it outside the
// plugin's private folders, in an isolated sandbox and in a plain one run
// as root: "warden" is the path the views take (the warden extracts and
// reads, through the mux or the root shell), "archive" the engine's
// archive API they used before (it re-executes the engine's binary for
// every call). It reports the median wall time of a write and of a read
// and the machine's CPU per write-and-read pair, the engine's processes
// included.
func BenchmarkSmallFiles(b *testing.B) {
	sandboxtest.RequireDocker(b)
	data := []byte(strings.Repeat("hello from the agent\n", 20))
	for _, iso := range []bool{true, false} {
		be, err := New(WithIsolation(iso))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { be.Close() })
		name := map[bool]string{true: "isolated", false: "plain"}[iso]
		for _, path := range []string{"warden", "archive"} {
			b.Run(name+"/"+path, func(b *testing.B) {
				sb := benchSandbox(b, be)
				if path == "warden" && sb.mux == nil && !sb.bound {
					b.Fatal("no warden to run in this sandbox")
				}
				ctx := context.Background()
				write, read := sb.WriteFile, sb.ReadFile
				if path == "archive" {
					write, read = sb.archiveWrite, sb.archiveRead
				}
				var w, r []time.Duration
				c0 := sandboxtest.MachineCPU()
				for b.Loop() {
					t0 := time.Now()
					if err := write(ctx, "/tmp/bench/hello.txt", data, 0o644); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					got, _, err := read(ctx, "/tmp/bench/hello.txt", 0)
					if err != nil || len(got) != len(data) {
						b.Fatalf("read: %d bytes, %v", len(got), err)
					}
					w, r = append(w, t1.Sub(t0)), append(r, time.Since(t1))
				}
				b.ReportMetric(float64((sandboxtest.MachineCPU()-c0)/time.Duration(b.N))/1e6, "cpu-ms/op")
				sandboxtest.ReportMedian(b, w, "write-ms")
				sandboxtest.ReportMedian(b, r, "read-ms")
			})
		}
	}
}

// archiveWrite and archiveRead are WriteFile and ReadFile through the
// engine's archive API alone, the reference for BenchmarkSmallFiles.
func (s *Sandbox) archiveWrite(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	arc, err := fileTar(path.Base(p), data, mode)
	if err != nil {
		return err
	}
	if err := s.view.mkdir(ctx, path.Dir(p)); err != nil {
		return err
	}
	return s.copyTo(ctx, path.Dir(p), arc, true)
}

func (s *Sandbox) archiveRead(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	if limit <= 0 {
		limit = sandbox.DefaultReadLimit
	}
	return s.view.readThroughEngine(ctx, p, limit)
}

// BenchmarkDiskWatchIdle100k is what proctor spends on a sandbox whose
// agent made 100,000 empty files and then sleeps: the CPU time of the
// whole test process over 2 minutes, as a share of a core (it was 26%
// when the watchdog walked by path every 2 seconds).
// go test -run '^$' -bench DiskWatchIdle100k -benchtime 1x -count 5 ./sandbox/docker/
func BenchmarkDiskWatchIdle100k(b *testing.B) {
	be := newBackend(b)
	ctx := context.Background()
	for b.Loop() {
		sb := benchSandbox(b, be)
		if r, err := sb.Exec(ctx, "mkdir /many && cd /many && for d in $(seq 100); do mkdir $d && (cd $d && seq 1000 | xargs touch); done; find /many -type f | wc -l", sandbox.ExecOptions{Timeout: 10 * time.Minute}); err != nil || strings.TrimSpace(r.Stdout) != "100000" {
			b.Fatalf("%+v %v", r, err)
		}
		time.Sleep(5 * time.Second) // the first walk after the files came
		cpu0, t0 := processCPU(), time.Now()
		time.Sleep(2 * time.Minute)
		b.ReportMetric(100*float64(processCPU()-cpu0)/float64(time.Since(t0)), "core-%")
		sb.Close(ctx)
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
