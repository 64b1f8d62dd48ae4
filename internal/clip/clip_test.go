package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, c := range []struct {
		s    string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exact", 5, "exact"},
		{"abcdef", 3, "abc... [proctor: 3 bytes cut]"},
		{"aé", 2, "a... [proctor: 2 bytes cut]"},  // é is 2 bytes: cut before it
		{"a€b", 3, "a... [proctor: 4 bytes cut]"}, // € is 3 bytes
		{"abc", 0, "... [proctor: 3 bytes cut]"},
		{"ab\xffcd", 4, "abc... [proctor: 1 bytes cut]"}, // invalid UTF-8 dropped from the head
	} {
		if got := Text(c.s, c.max); got != c.want {
			t.Errorf("Text(%q, %d) = %q, want %q", c.s, c.max, got, c.want)
		}
	}
}

func FuzzText(f *testing.F) {
	f.Add("aé€b", 3)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1<<20 {
			return
		}
		got := Text(s, max)
		if len(s) <= max {
			if got != s {
				t.Fatalf("Text(%q, %d) = %q: cut a text within its bound", s, max, got)
			}
			return
		}
		if !utf8.ValidString(got) {
			t.Fatalf("Text(%q, %d) = %q: a cut text is not UTF-8", s, max, got)
		}
		head, _, ok := strings.Cut(got, "... [proctor: ")
		if !ok || len(head) > max {
			t.Fatalf("Text(%q, %d) = %q: head over the bound or unmarked", s, max, got)
		}
	})
}
