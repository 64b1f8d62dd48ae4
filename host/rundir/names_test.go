package rundir

import (
	"strconv"
	"strings"
	"testing"
)

func TestTranscriptName(t *testing.T) {
	for id, want := range map[string]string{
		"hello-file#0": "hello-file.0.try0.json",
		"a/b#1":        "a%2Fb.1.try0.json",
		"a_b#1":        "a_b.1.try0.json",
		"x#1#0":        "x%231.0.try0.json",
		"../up#0":      "..%2Fup.0.try0.json",
	} {
		if got := TranscriptName(id, 0); got != want {
			t.Errorf("TranscriptName(%q) = %q, want %q", id, got, want)
		}
	}
	long := TranscriptName(strings.Repeat("é", 300)+"#0", 2)
	if len(long) > 255 || !strings.HasSuffix(long, ".0.try2.json") {
		t.Errorf("long name %q (%d bytes)", long, len(long))
	}
}

// FuzzTranscriptName: two rollout ids never share a transcript's name,
// and a name is one plain file name.
func FuzzTranscriptName(f *testing.F) {
	for _, p := range [][2]string{{"a/b", "a_b"}, {"x#1", "x.1"}, {"a b", "a_b"}, {"%2F", "/"}, {"", "#"}} {
		f.Add(p[0], p[1], 0, 0)
	}
	f.Fuzz(func(t *testing.T, a, b string, ia, ib int) {
		ia, ib = ia&0xff, ib&0xff
		na, nb := TranscriptName(a+"#"+strconv.Itoa(ia), 0), TranscriptName(b+"#"+strconv.Itoa(ib), 0)
		if (a != b || ia != ib) && na == nb {
			t.Fatalf("%q#%d and %q#%d both map to %q", a, ia, b, ib, na)
		}
		if strings.ContainsAny(na, "/\\\x00") || na == "." || na == ".." || len(na) > 255 {
			t.Fatalf("%q is not a plain file name", na)
		}
	})
}
