package difflib

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// TestAgainstPython compares with outputs of CPython 3.11.7's difflib
// (testdata/python311.jsonl: unified_diff of line lists, some long enough
// for the autojunk heuristic, and SequenceMatcher.ratio of strings).
func TestAgainstPython(t *testing.T) {
	f, err := os.Open("testdata/python311.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var c struct {
			A, B  []string
			Diff  *string
			S, T  string
			Ratio float64
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		n++
		if c.Diff != nil {
			if got := UnifiedDiff(c.A, c.B, "a/f", "b/f"); got != *c.Diff {
				t.Errorf("case %d: diff\n%s\nwant\n%s", n, got, *c.Diff)
			}
			continue
		}
		if got := Ratio(c.S, c.T); got != c.Ratio {
			t.Errorf("case %d: ratio(%q, %q) = %v, want %v", n, c.S, c.T, got, c.Ratio)
		}
	}
	if n < 300 {
		t.Fatalf("only %d cases", n)
	}
}
