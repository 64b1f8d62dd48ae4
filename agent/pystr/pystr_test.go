package pystr

import (
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
