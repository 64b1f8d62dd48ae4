package pystr

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// Expectations from CPython 3.11.7.

func TestShlexQuote(t *testing.T) {
	for in, want := range map[string]string{
		"": "''", "abc": "abc", "a b": "'a b'", "it's": `'it'"'"'s'`, "/tmp/x-y_z.py": "/tmp/x-y_z.py",
		"~/x": "'~/x'", "a@b%c+d=e:f,g.h/i-j": "a@b%c+d=e:f,g.h/i-j", "$HOME": "'$HOME'", "é": "'é'",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSplitLinesAndStrip(t *testing.T) {
	s := "a\nb\r\nc\rd\ve\ff\x1cg\x1dh\x1ei\u0085j\u2028k\u2029l\n\nm"
	if got := SplitLines(s, false); !slices.Equal(got, []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "", "m"}) {
		t.Errorf("splitlines: %q", got)
	}
	if got := SplitLines(s, true); strings.Join(got, "") != s || len(got) != 14 || got[1] != "b\r\n" || got[12] != "\n" {
		t.Errorf("splitlines(keepends): %q", got)
	}
	if got := Strip(" \t\x1c\x1f\u00a0\u3000x y\u2003\n"); got != "x y" {
		t.Errorf("strip: %q", got)
	}
}

func TestCodePoints(t *testing.T) {
	s := "é→x\né→y"
	if Len(s) != 7 || Index(s, "x") != 2 || LastIndex(s, "é") != 4 || Index(s, "z") != -1 || LastIndex(s, "z") != -1 {
		t.Errorf("len %d find %d rfind %d", Len(s), Index(s, "x"), LastIndex(s, "é"))
	}
	if Head(s, 2) != "é→" || Tail(s, 2) != "→y" || From(s, 3) != "\né→y" || From(s, 99) != "" || Tail(s, 0) != "" {
		t.Errorf("slices: %q %q %q", Head(s, 2), Tail(s, 2), From(s, 3))
	}
	if RStrip(" a \n") != " a" || LStrip(" a ") != "a " {
		t.Errorf("rstrip/lstrip")
	}
}

// TestParseFloat: float() of a str, as CPython 3.11 reads it.
func TestParseFloat(t *testing.T) {
	for in, want := range map[string]float64{
		"1": 1, " 2.5\n": 2.5, "+1e3": 1000, "-.5": -0.5, "1_000.5": 1000.5, "1e1_0": 1e10, "5.": 5,
		"٣": 3, "𝟘𝟙": 1, "１０": 10, "1e400": math.Inf(1), "-INFINITY": math.Inf(-1), "inF": math.Inf(1),
	} {
		if got, ok := ParseFloat(in); !ok || got != want {
			t.Errorf("float(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
	if f, ok := ParseFloat("NaN"); !ok || !math.IsNaN(f) {
		t.Errorf("float('NaN') = %v %v", f, ok)
	}
	for _, in := range []string{"", "abc", "1__0", "_1", "1_", "1_.5", "0x10", "1e", "--1", "1.2.3", "infinit", "1 0", "."} {
		if got, ok := ParseFloat(in); ok {
			t.Errorf("float(%q) = %v, want ValueError", in, got)
		}
	}
}
