package run

import (
	"fmt"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
)

// samePlugins refuses to resume a run with other plugin bytes than it
// recorded: its manifest and results would claim a plugin that did not
// run. A plugin is compared by sha256: the environment's, and each stacked
// reward's by its name.
func samePlugins(dir string, old rundir.Manifest, env rundir.PluginInfo, rewards []rundir.PluginInfo) error {
	if old.Plugin.SHA256 != "" && old.Plugin.SHA256 != env.SHA256 {
		return changedPlugin(dir, "the [env] plugin "+env.Name, "[env]", old.Plugin, env)
	}
	for _, r := range rewards {
		for _, o := range old.Rewards {
			if o.Name == r.Name && o.SHA256 != "" && o.SHA256 != r.SHA256 {
				return changedPlugin(dir, fmt.Sprintf("the [[reward]] plugin %q", r.Name), fmt.Sprintf("the [[reward]] table named %q", r.Name), o, r)
			}
		}
	}
	return nil
}

func changedPlugin(dir, what, table string, old, now rundir.PluginInfo) error {
	hint := fmt.Sprintf("run the plugin that ran, pinned (sha256 = %q in %s), or write to a new --out", old.SHA256, table)
	if repo, ok := strings.CutPrefix(old.Source, "oci:"); ok && old.Digest != "" {
		repo, _, _ = strings.Cut(repo, "@")
		hint = fmt.Sprintf("pin the plugin to the digest that ran (plugin = \"oci://%s@%s\" in %s), or write to a new --out", repo, old.Digest, table)
	}
	return &fault.Usage{
		Err:  fmt.Errorf("resume %s: %s has sha256 %s, but the run recorded sha256 %s (%s): a resumed run must run the same bytes", dir, what, now.SHA256, old.SHA256, old.Source),
		Hint: hint,
	}
}

// keepRecorded adds to the rewards that run now the recorded ones that no
// longer do: their scores are still in results.jsonl.
func keepRecorded(old, now []rundir.PluginInfo) []rundir.PluginInfo {
	for _, o := range old {
		if !slices.ContainsFunc(now, func(n rundir.PluginInfo) bool { return n.Name == o.Name }) {
			now = append(now, o)
		}
	}
	return now
}

// checkGroupSize refuses, before anything is written, to resume a process
// run with another group size: it would write groups of the wrong size or
// drop the new rollouts.
func checkGroupSize(dir string, prior rundir.Manifest, size int) error {
	n, where := recordedGroupSize(dir, prior, size)
	if n == 0 {
		return nil
	}
	return &fault.Usage{
		Err:  fmt.Errorf("process.group_size is %d, but the run in %s was made with group_size %d (%s)", size, dir, n, where),
		Hint: fmt.Sprintf("resume it with --set process.group_size=%d, or give this group size a new run directory with --out", n),
	}
}

// recordedGroupSize returns the group size the process run in dir was
// made with when it differs from size, and where that is recorded; 0 when
// it is the same or unknown (a new directory). It reads the group_size of
// the first whole entry of process.jsonl, else the process section of
// man, the run's manifest, else whether results.jsonl holds an attempt
// beyond size (a larger group size whose first group was never written).
func recordedGroupSize(dir string, man rundir.Manifest, size int) (int, string) {
	if e, ok := firstIndexEntry(dir); ok {
		if e.GroupSize != size {
			return e.GroupSize, rundir.IndexFile
		}
		return 0, ""
	}
	if p := man.Process; p != nil && p.GroupSize > 0 {
		if p.GroupSize != size {
			return p.GroupSize, rundir.ManifestFile
		}
		return 0, ""
	}
	recs, err := rundir.Read(dir)
	if err != nil {
		return 0, "" // none yet; or Open reports it with its own message
	}
	top := -1
	for _, r := range recs {
		top = max(top, r.Attempt)
	}
	if top >= size {
		return top + 1, fmt.Sprintf("%s holds attempt %d", rundir.ResultsFile, top)
	}
	return 0, ""
}
