package shell

import "testing"

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
