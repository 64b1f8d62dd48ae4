package run

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
)

// TestResumeKeepsHowRecordsWereScored: a resume that would score under
// another value of a scoring key (the plugin's, or run.verifier_failure)
// is refused with the value that scored the records, as the group-size
// guard refuses another group size (issue 32: --set
// env.config.grading=swesmith rewrote config.toml over records graded
// strict). Other changes resume; a run without records has nothing to
// keep; a plugin that names no scoring keys has every key kept.
func TestResumeKeepsHowRecordsWereScored(t *testing.T) {
	load := func(sets ...string) *config.Config {
		c, err := config.Parse([]byte("[agent]\nkind='oracle'\n[env]\nplugin='swesmith'\n[env.config]\ndataset='d.jsonl'\ngrading='strict'\ninstances=['a']\n"), "/tmp/r.toml", sets)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dir := t.TempDir()
	resolved, err := load().Resolved()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, rundir.ConfigFile), resolved, 0o644)
	keys := []string{"grading", "test_timeout"}

	err = sameScoring(dir, load("env.config.grading=swesmith"), keys, 8)
	var u *fault.Usage
	if !errors.As(err, &u) || !strings.Contains(err.Error(), `env.config.grading is "swesmith", but the run's 8 recorded rollouts were scored with "strict"`) ||
		!strings.Contains(u.Hint, `--set env.config.grading="strict"`) {
		t.Errorf("another grading: %v (hint %q)", err, hintOf(err))
	}
	if err := sameScoring(dir, load("env.config.test_timeout=900s"), keys, 8); err == nil || !strings.Contains(err.Error(), "env.config.test_timeout is \"900s\", but the run's 8 recorded rollouts were scored without it") {
		t.Errorf("a test timeout added: %v", err)
	}
	if err := sameScoring(dir, load("run.verifier_failure=infra_error"), keys, 8); err == nil || !strings.Contains(err.Error(), "run.verifier_failure") {
		t.Errorf("another verifier_failure: %v", err)
	}
	if err := sameScoring(dir, load("env.config.instances=['a','b']"), keys, 8); err != nil {
		t.Errorf("more instances: %v", err)
	}
	if err := sameScoring(dir, load("env.config.grading=swesmith"), keys, 0); err != nil {
		t.Errorf("nothing recorded yet: %v", err)
	}
	if err := sameScoring(dir, load("env.config.instances=['a','b']"), nil, 1); err == nil || !strings.Contains(err.Error(), "env.config.instances") {
		t.Errorf("a plugin without scoring keys: every key counts: %v", err)
	}
}

func hintOf(err error) string {
	var u *fault.Usage
	if errors.As(err, &u) {
		return u.Hint
	}
	return ""
}
