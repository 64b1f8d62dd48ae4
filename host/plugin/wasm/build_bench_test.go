package wasm

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
)

// goBuilds are the ways a Go plugin can be built, smallest last.
var goBuilds = []struct {
	name  string
	flags []string
}{
	{"plain", nil},
	{"stripped", wasmtest.Flags},
}

// BenchmarkGoBuild compares builds of the example plugin: its file size,
// the time of a fresh instance (what every rollout pays), the linear
// memory an instance starts with and the resident memory each live
// instance adds to the host process.
func BenchmarkGoBuild(b *testing.B) {
	ctx := context.Background()
	for _, gb := range goBuilds {
		b.Run(gb.name, func(b *testing.B) {
			path := wasmtest.BuildWith(b, "./plugins/example", gb.flags...)
			bin, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			r, _ := NewRuntime(ctx, Config{CacheDir: b.TempDir()})
			defer r.Close(ctx)
			p, err := r.Load(ctx, "example", bin)
			if err != nil {
				b.Fatal(err)
			}
			p.Grant(p.Manifest().Capabilities)
			cpu0, n := cpuTime(), 0
			for b.Loop() {
				inst, err := p.Instantiate(ctx, InstanceConfig{})
				if err != nil {
					b.Fatal(err)
				}
				inst.Close(ctx)
				n++
			}
			b.StopTimer()
			// The process's CPU time per instance: what the machine pays,
			// less swayed by other processes than the wall time.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1e3/float64(n), "cpu-ms/instance")
			b.ReportMetric(float64(len(bin))/1e6, "MB")
			const live = 32
			insts := make([]*Instance, 0, live)
			before := rss(b)
			for range live {
				inst, err := p.Instantiate(ctx, InstanceConfig{})
				if err != nil {
					b.Fatal(err)
				}
				insts = append(insts, inst)
			}
			after := rss(b)
			b.ReportMetric(float64(insts[0].mod.Memory().Size())/(1<<20), "MiB-mem/instance")
			b.ReportMetric(float64(after-before)/live/(1<<20), "MiB-RSS/instance")
			for _, inst := range insts {
				inst.Close(ctx)
			}
		})
	}
}

// rss is the process's resident memory in bytes, after a collection.
func rss(b *testing.B) int64 {
	runtime.GC()
	s, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(s))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// cpuTime is the CPU time the process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
