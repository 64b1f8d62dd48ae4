package scheduler

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
)

// screen is a terminal that knows the two escapes the live display uses:
// cursor up one line and erase the line.
type screen struct {
	mu    sync.Mutex
	lines []string
	buf   bytes.Buffer
}

func (s *screen) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(b)
	return len(b), nil
}

// render replays everything written so far.
func (s *screen) render() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	cur := ""
	out := s.buf.String()
	for len(out) > 0 {
		switch {
		case strings.HasPrefix(out, "\x1b[1A\x1b[2K"):
			// The cursor is at the start of an empty line: go up to the
			// previous line and erase it.
			if len(lines) > 0 {
				lines = lines[:len(lines)-1]
			}
			cur = ""
			out = out[len("\x1b[1A\x1b[2K"):]
		case out[0] == '\n':
			lines = append(lines, cur)
			cur = ""
			out = out[1:]
		default:
			cur += out[:1]
			out = out[1:]
		}
	}
	return lines
}

// TestProgressTTY drives the live display and checks what a terminal
// shows: finished rollouts scroll above, the summary and the running
// rollouts are redrawn in place, and Finish leaves no running line behind.
func TestProgressTTY(t *testing.T) {
	var s screen
	p := NewProgress(&s, true, time.Hour)
	p.Start(3, 0)
	p.Started("a#0")
	p.Started("b#0")
	p.Phase("b#0", "agent")
	now := time.Now()
	p.Done(rundir.Record{RolloutID: "a#0", Outcome: rundir.OutcomePassed, Reward: 1, StartedAt: now, FinishedAt: now.Add(2 * time.Second)})
	got := s.render()
	if len(got) != 3 || !strings.HasPrefix(got[0], "[1/3] passed        a#0  reward=1.00  2s") ||
		!strings.HasPrefix(got[1], "progress: 1/3 done, 1 running, pass rate 100.0%") || !strings.Contains(got[2], "b#0") || !strings.Contains(got[2], "agent") {
		t.Fatalf("screen after one rollout:\n%s", strings.Join(got, "\n"))
	}
	p.Done(rundir.Record{RolloutID: "b#0", Outcome: rundir.OutcomeInfraError, ErrorClass: "sandbox", Error: "engine gone\nmore", StartedAt: now, FinishedAt: now})
	p.Finish()
	got = s.render()
	if len(got) != 3 || !strings.HasPrefix(got[1], "[2/3] infra_error   b#0  reward=0.00  0s  engine gone") ||
		!strings.HasPrefix(got[2], "progress: 2/3 done, 0 running, pass rate 50.0%") || !strings.HasSuffix(got[2], "infra errors: sandbox=1") {
		t.Fatalf("screen after Finish:\n%s", strings.Join(got, "\n"))
	}
}
