package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/BurntSushi/toml"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
)

// sameScoring refuses to resume a run whose records were scored under
// another value of a key that decides how a rollout is scored: the
// plugin's scoring keys of [env.config] (every key when the plugin names
// none) and [run] verifier_failure. The run's config.toml says what the
// recorded rollouts ran under; resuming with another grading would mix
// verdicts of two rules in one run and rewrite config.toml to claim the
// new one for all of them. A run without records, or without config.toml,
// has nothing to keep.
func sameScoring(dir string, c *config.Config, keys []string, recorded int) error {
	if recorded == 0 {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, rundir.ConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &fault.Infra{Err: fmt.Errorf("resume %s: %w", dir, err)}
	}
	var old struct {
		Run map[string]any `toml:"run"`
		Env struct {
			Config map[string]any `toml:"config"`
		} `toml:"env"`
	}
	if _, err := toml.Decode(string(b), &old); err != nil {
		return &fault.Usage{Err: fmt.Errorf("resume %s: %s: %w", dir, rundir.ConfigFile, err),
			Hint: "restore " + rundir.ConfigFile + " as the run wrote it, or write this run to a new directory with --out"}
	}
	if keys == nil {
		keys = slices.Sorted(maps.Keys(old.Env.Config))
		for k := range c.Env.Config {
			if _, ok := old.Env.Config[k]; !ok {
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		was, had := old.Env.Config[k]
		now, has := c.Env.Config[k]
		if had != has || !sameValue(was, now) {
			return changedScoring(dir, "env.config."+k, was, had, now, has, recorded)
		}
	}
	// Runs recorded before the key existed scored a verifier's failure as
	// an infra_error; they are not held to it.
	if was, had := old.Run["verifier_failure"]; had && !sameValue(was, c.Run.VerifierFailure) {
		return changedScoring(dir, "run.verifier_failure", was, had, c.Run.VerifierFailure, true, recorded)
	}
	return nil
}

// sameValue compares two config values as JSON: what a TOML decoder gives
// for the same text, whatever its Go types.
func sameValue(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func changedScoring(dir, key string, was any, had bool, now any, has bool, recorded int) error {
	show := func(v any, ok bool) string {
		if !ok {
			return "unset"
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	hint := fmt.Sprintf("resume it with --set %s=%s, as it was, or give this config a new run directory with --out", key, show(was, had))
	if !had {
		hint = fmt.Sprintf("resume it without %s, as it was, or give this config a new run directory with --out", key)
	}
	with := "with " + show(was, had)
	if !had {
		with = "without it"
	}
	return &fault.Usage{
		Err: fmt.Errorf("resume %s: %s is %s, but the run's %d recorded %s were scored %s (%s): a resumed run keeps how its rollouts are scored",
			dir, key, show(now, has), recorded, plural(recorded, "rollout"), with, rundir.ConfigFile),
		Hint: hint,
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
