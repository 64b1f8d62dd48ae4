package tmuxbin

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyMatchesBuildScript: Go and build.sh name the same folder.
func TestKeyMatchesBuildScript(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PROCTOR_CACHE_DIR", dir)
	t.Setenv("PROCTOR_TMUX_DIR", "")
	out, err := exec.Command("bash", "build.sh", "--print-dir").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), Dir(); got != want || !strings.HasPrefix(want, filepath.Join(dir, "tmux", Version()+"-")) {
		t.Fatalf("build.sh: %s, Go: %s", got, want)
	}
	if Version() != "3.3a" {
		t.Errorf("version %q", Version())
	}
	if _, err := Find(); err != ErrNotBuilt {
		t.Errorf("Find in an empty cache: %v", err)
	}
}
