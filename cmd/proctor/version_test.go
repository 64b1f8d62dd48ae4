package main

import (
	"runtime/debug"
	"testing"
)

func TestStamp(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "5b2bba1d97d4ac836bed236d31c482996349aacb"
	for _, c := range []struct {
		name, link    string
		linkRev       string
		bi            *debug.BuildInfo
		version, revs string
	}{
		{"no build info", "", "", nil, "dev", ""},
		{"go test", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", ""},
		{"make build", "5b2bba1-dirty", rev + "+dirty", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "5b2bba1-dirty", rev + "+dirty"},
		{"go build in a checkout", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125011100-5b2bba1d97d4"}, Settings: vcs(rev, "false")},
			"v0.0.0-20261125011100-5b2bba1d97d4", rev},
		{"uncommitted changes", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125011100-5b2bba1d97d4+dirty"}, Settings: vcs(rev, "true")},
			"v0.0.0-20261125011100-5b2bba1d97d4+dirty", rev + "+dirty"},
		{"a release", "v1.2.0", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125011100-5b2bba1d97d4"}, Settings: vcs(rev, "false")}, "v1.2.0", rev},
	} {
		v, r := stamp(c.link, c.linkRev, c.bi)
		if v != c.version || r != c.revs {
			t.Errorf("%s: %q %q, want %q %q", c.name, v, r, c.version, c.revs)
		}
	}
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "v1.2.0", rev
	if got := fullVersion(); got != "v1.2.0 ("+rev+")" {
		t.Errorf("a release names its revision: %q", got)
	}
	version = "v0.0.0-20261125011100-5b2bba1d97d4"
	if got := fullVersion(); got != version {
		t.Errorf("a pseudo-version names it already: %q", got)
	}
}
