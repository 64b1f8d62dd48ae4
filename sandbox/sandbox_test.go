package sandbox

import "testing"

func TestCutOutput(t *testing.T) {
	head, cut, tail := CutOutput("abc" + CutMark(12345) + "xyz")
	if head != "abc" || cut != 12345 || tail != "xyz" {
		t.Errorf("%q %d %q", head, cut, tail)
	}
	if head, cut, tail := CutOutput("no mark\n"); head != "no mark\n" || cut != 0 || tail != "" {
		t.Errorf("%q %d %q", head, cut, tail)
	}
}
