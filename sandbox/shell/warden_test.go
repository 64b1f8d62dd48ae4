package shell

import (
	"bufio"
	"strings"
	"testing"
)

// A path is private when it is a private folder or lies below one; a
// sibling that shares the folder's prefix is not.
func TestInPrivate(t *testing.T) {
	dirs, err := PrivateDirs([]string{"/tests/", "/logs/verifier"})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"/tests": true, "/tests/test.sh": true, "/logs/verifier/reward.txt": true,
		"/tests2": false, "/logs": false, "/logs/verifier2/x": false, "/": false,
	} {
		if got := InPrivate(dirs, p); got != want {
			t.Errorf("InPrivate(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestPrivateDirsRefused(t *testing.T) {
	for _, d := range []string{"tests", "/", "/..", WardenDir, WardenDir + "/plugin", WardenDir + "/../" + WardenDir[1:]} {
		if _, err := PrivateDirs([]string{d}); err == nil {
			t.Errorf("PrivateDirs(%q) accepted", d)
		}
	}
	if got, err := PrivateDirs([]string{WardenDir + "x"}); err != nil || got[0] != WardenDir+"x" {
		t.Errorf("a sibling of the warden's folder: %v, %v", got, err)
	}
}

func TestReadNSHeader(t *testing.T) {
	for in, want := range map[string]int{
		"@@PROCTOR NS 42\nrest": 42,
		"@@PROCTOR NS 1\n":      0, // never the sandbox's own init
		"@@PROCTOR NS x\n":      0,
		"@@PROCTOR NS 42":       0, // no newline: the warden ended
		"hello\n":               0,
		"":                      0,
	} {
		n, err := ReadNSHeader(bufio.NewReader(strings.NewReader(in)))
		if n != want || (want == 0) != (err != nil) {
			t.Errorf("%q: %d %v, want %d", in, n, err, want)
		}
	}
	// A flood without a newline is not read past the buffer.
	if _, err := ReadNSHeader(bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 1<<20)), 4096)); err == nil {
		t.Error("a flood read as a header")
	}
}
