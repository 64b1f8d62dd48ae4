// Package poll waits in tests for what a test cannot be told of directly:
// a file to appear, a count to reach a number, a process to end. It waits
// as long as the test itself may run (go test -timeout), never for a span
// guessed from a quiet machine, so a busy machine makes a test slower,
// never failed.
package poll

import (
	"context"
	"time"
)

// T is what Until needs of a test: *testing.T, or *testing.B where
// Deadline is added.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Deadline() (time.Time, bool)
}

// Until returns once cond holds, checking it at short and then growing
// intervals (up to 100 ms). It fails the test, naming what, when cond
// still does not hold as the test's deadline nears.
func Until(t T, what string, cond func() bool) {
	t.Helper()
	end := Deadline(t)
	for delay := time.Millisecond; !cond(); delay = min(2*delay, 100*time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("still waiting for %s as the test's time runs out", what)
		}
		time.Sleep(delay)
	}
}

// Deadline is when a test that waits must give up to report why: a tenth
// of its time (at most a minute) before go test would stop it, or an hour
// from now when it has no deadline.
func Deadline(t T) time.Time {
	d, ok := t.Deadline()
	if !ok {
		return time.Now().Add(time.Hour)
	}
	margin := min(time.Until(d)/10, time.Minute)
	return d.Add(-margin)
}

// Context ends at Deadline(t): a bound for a call that a test limits only
// so that a hang fails the test with its own message.
func Context(t T) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), Deadline(t))
}

// After fires at Deadline(t): for a select that must not wait on a hung
// channel past what the test may take.
func After(t T) <-chan time.Time { return time.After(time.Until(Deadline(t))) }
