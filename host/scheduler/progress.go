package scheduler

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/term"
)

// Progress receives the runner's events. Implementations must be safe for
// concurrent use.
type Progress interface {
	Start(total, skipped int)
	Started(rolloutID string)
	Phase(rolloutID, phase string)
	Done(rec rundir.Record)
	Finish()
}

// Resumer is a Progress that hears, before Start, how the rollouts a
// resumed run already recorded ended, so that its pass rate is the run's
// and not only this invocation's.
type Resumer interface {
	Recorded(recs []rundir.Record)
}

type nopProgress struct{}

func (nopProgress) Start(int, int)       {}
func (nopProgress) Started(string)       {}
func (nopProgress) Phase(string, string) {}
func (nopProgress) Done(rundir.Record)   {}
func (nopProgress) Finish()              {}

// NewProgress returns a live display for a terminal, or plain lines (one
// per finished rollout and a summary line every interval) for logs.
func NewProgress(w io.Writer, tty bool, interval time.Duration) Progress {
	p := &progress{w: w, tty: tty, interval: interval, running: map[string]*running{}, errs: map[string]int{}}
	return p
}

type running struct {
	phase string
	since time.Time
	start time.Time
}

type progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration

	mu        sync.Mutex
	total     int
	done      int
	passed    int
	started   time.Time
	running   map[string]*running
	errs      map[string]int
	lines     int // lines drawn by the last TTY frame
	stop      chan struct{}
	stopped   chan struct{}
	finishedN int
	// earlier are the rollouts recorded before this invocation, and how
	// many of them passed.
	earlier, earlierPassed int
}

// Recorded counts the rollouts recorded before this invocation into the
// pass rate.
func (p *progress) Recorded(recs []rundir.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.earlier, p.earlierPassed = len(recs), 0
	for _, r := range recs {
		if r.Outcome == rundir.OutcomePassed {
			p.earlierPassed++
		}
	}
}

func (p *progress) Start(total, skipped int) {
	p.mu.Lock()
	p.total, p.done, p.started = total, skipped, time.Now()
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	p.mu.Unlock()
	if skipped > 0 && !p.tty {
		fmt.Fprintf(p.w, "resuming: %d of %d rollouts already recorded\n", skipped, total)
	}
	go p.tick()
}

func (p *progress) tick() {
	defer close(p.stopped)
	every := p.interval
	if p.tty {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.tty {
				p.drawLocked()
			} else {
				fmt.Fprintln(p.w, p.summaryLocked())
			}
			p.mu.Unlock()
		}
	}
}

func (p *progress) Started(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.running[id] = &running{phase: "start", since: now, start: now}
}

func (p *progress) Phase(id, phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.running[id]; r != nil {
		r.phase, r.since = phase, time.Now()
	}
}

func (p *progress) Done(rec rundir.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.running, rec.RolloutID)
	p.done++
	p.finishedN++
	if rec.Outcome == rundir.OutcomePassed {
		p.passed++
	}
	if rec.Outcome == rundir.OutcomeInfraError {
		p.errs[rec.ErrorClass]++
	}
	line := fmt.Sprintf("[%d/%d] %-13s %s  reward=%.2f  %s", p.done, p.total, rec.Outcome, term.Line(rec.RolloutID), rec.Reward,
		rec.FinishedAt.Sub(rec.StartedAt).Round(100*time.Millisecond))
	if rec.Error != "" {
		line += "  " + term.Line(firstLine(rec.Error))
	}
	if p.tty {
		p.clearLocked()
		fmt.Fprintln(p.w, line)
		p.drawLocked()
		return
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) Finish() {
	if p.stop == nil {
		return
	}
	close(p.stop)
	<-p.stopped
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.clearLocked()
	}
	fmt.Fprintln(p.w, p.summaryLocked())
}

func (p *progress) summaryLocked() string {
	elapsed := time.Since(p.started)
	s := fmt.Sprintf("progress: %d/%d done, %d running, pass rate %s, elapsed %s", p.done, p.total, len(p.running),
		rate(p.passed+p.earlierPassed, p.finishedN+p.earlier), elapsed.Round(time.Second))
	if p.finishedN > 0 && p.done < p.total {
		eta := time.Duration(float64(elapsed) / float64(p.finishedN) * float64(p.total-p.done))
		s += ", eta " + eta.Round(time.Second).String()
	}
	if len(p.errs) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(p.errs)) {
			parts = append(parts, fmt.Sprintf("%s=%d", term.Line(k), p.errs[k]))
		}
		s += ", infra errors: " + strings.Join(parts, " ")
	}
	return s
}

func (p *progress) clearLocked() {
	for i := 0; i < p.lines; i++ {
		fmt.Fprint(p.w, "\x1b[1A\x1b[2K")
	}
	p.lines = 0
}

func (p *progress) drawLocked() {
	p.clearLocked()
	fmt.Fprintln(p.w, p.summaryLocked())
	p.lines = 1
	ids := slices.Sorted(maps.Keys(p.running))
	const maxShown = 16
	for i, id := range ids {
		if i == maxShown {
			fmt.Fprintf(p.w, "  ... and %d more\n", len(ids)-maxShown)
			p.lines++
			break
		}
		r := p.running[id]
		fmt.Fprintf(p.w, "  %-40s %-13s %s\n", term.Line(id), r.phase, time.Since(r.start).Round(time.Second))
		p.lines++
	}
}

func rate(n, d int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
