package poll

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeT is a test whose deadline is d from its start.
type fakeT struct {
	deadline time.Time
	has      bool
	failed   string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Deadline() (time.Time, bool)       { return f.deadline, f.has }
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...); panic(f) }

func TestUntilReturnsOnceTrue(t *testing.T) {
	n := 0
	Until(t, "three checks", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("checked %d times", n)
	}
}

// At the deadline Until fails the test and says what it waited for.
func TestUntilNamesWhatItWaitedFor(t *testing.T) {
	f := &fakeT{deadline: time.Now(), has: true}
	defer func() {
		if recover() != f || !strings.Contains(f.failed, "the answer") {
			t.Fatalf("failed with %q", f.failed)
		}
	}()
	Until(f, "the answer", func() bool { return false })
}

func TestDeadlineLeavesRoomToReport(t *testing.T) {
	d := time.Now().Add(100 * time.Second)
	if got := Deadline(&fakeT{deadline: d, has: true}); got.After(d.Add(-9*time.Second)) || got.Before(d.Add(-11*time.Second)) {
		t.Errorf("deadline %v before the test's, want about 10 s", d.Sub(got))
	}
	d = time.Now().Add(time.Hour)
	if got := Deadline(&fakeT{deadline: d, has: true}); d.Sub(got) != time.Minute {
		t.Errorf("deadline %v before the test's, want a minute", d.Sub(got))
	}
	if got := Deadline(&fakeT{}); time.Until(got) < 59*time.Minute {
		t.Errorf("no test deadline: %v from now, want an hour", time.Until(got))
	}
}
