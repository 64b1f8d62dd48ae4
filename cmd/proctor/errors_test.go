package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/fault"
)

// TestPrintErrorEscapes: an error line carries what plugins and datasets
// wrote (a task id, a plugin's message) with its control characters
// escaped, on its own lines.
func TestPrintErrorEscapes(t *testing.T) {
	var b bytes.Buffer
	printError(&b, &fault.Usage{Err: errors.New("task \x1b]0;pwned\x07 broke\nsecond line"), Hint: "fix \x1b[2J it"})
	got := b.String()
	want := "proctor: error: task \\x1b]0;pwned\\x07 broke\nsecond line\nproctor: hint: fix \\x1b[2J it\n"
	if got != want || strings.ContainsAny(got, "\x1b\x07") {
		t.Fatalf("got %q, want %q", got, want)
	}
}
