package report

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// bigRun is 2,000 rollouts (500 tasks x 4 attempts) of 20 turns each.
var bigRun = fixture{tasks: 500, attempts: 4, turns: 20, finished: true}

// BenchmarkWriteHTML measures writing the report of a 2,000-rollout run,
// as `proctor view` does on each request.
func BenchmarkWriteHTML(b *testing.B) {
	dir := b.TempDir()
	bigRun.write(b, dir)
	var size int64
	for b.Loop() {
		cw := &countWriter{}
		if err := WriteHTML(cw, dir, HTMLOptions{}); err != nil {
			b.Fatal(err)
		}
		size = cw.n
	}
	b.ReportMetric(float64(size)/1e6, "MB")
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var _ io.Writer = (*countWriter)(nil)

// BenchmarkBrowserOpen measures, in headless Chromium, the time from
// navigating to report.html of a 2,000-rollout run until the rollout table
// is built (open-ms, seen from Go; ready-ms, performance.now() in the page
// when its script is done), then until one trajectory is shown
// (trajectory-ms), and the size of the file. Run it with
//
//	go test -run '^$' -bench BrowserOpen -benchtime 5x -count 5 ./host/rundir/report/
func BenchmarkBrowserOpen(b *testing.B) {
	browser := newBrowser(b)
	dir := b.TempDir()
	bigRun.write(b, dir)
	path := writeReportFile(b, dir)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	tb := newTab(b, browser)
	var open, ready, traj []float64
	for b.Loop() {
		b.StopTimer()
		do(b, tb.ctx, chromedp.Navigate("about:blank"))
		b.StartTimer()
		start := time.Now()
		do(b, tb.ctx, chromedp.Navigate(fileURL(path)),
			chromedp.Poll[chromedp.Void](`document.body.dataset.ready === '1'`, chromedp.WithPollingInterval(5*time.Millisecond)))
		open = append(open, ms(time.Since(start)))
		r, _ := strconv.ParseFloat(run(b, tb.ctx, chromedp.Evaluate[string](`document.body.dataset.readyMs`)), 64)
		ready = append(ready, r)

		start = time.Now()
		do(b, tb.ctx, chromedp.Evaluate[chromedp.Void](`location.hash = '#r-1999'`),
			chromedp.Poll[chromedp.Void](`document.getElementById('detail').dataset.rollout === '1999'`, chromedp.WithPollingInterval(5*time.Millisecond)))
		traj = append(traj, ms(time.Since(start)))
	}
	if n := run(b, tb.ctx, chromedp.Text(chromedp.ID("shown"))); n != "2000 of 2000 rollouts" {
		b.Fatalf("table says %q, want 2000 of 2000 rollouts", n)
	}
	b.ReportMetric(median(open), "open-ms")
	b.ReportMetric(median(ready), "ready-ms")
	b.ReportMetric(median(traj), "trajectory-ms")
	b.ReportMetric(float64(fi.Size())/1e6, "MB")
	b.Logf("%s: %.1f MB; open %v ms, ready %v ms, trajectory %v ms", filepath.Base(path), float64(fi.Size())/1e6, open, ready, traj)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
