package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/proctor-dev/proctor"

// hostRank orders the packages of host/ from the bottom up: a package
// imports only packages of a lower rank, so nothing imports upward. A
// package's test helpers (NAME/NAMEtest) sit just above it.
var hostRank = map[string]int{
	"host/fault": 0, "host/config": 0, "host/dataset": 0, "host/repocache": 0,
	"host/plugin/wasm": 0, "host/plugin/oci": 0, "host/plugin/bundled": 0, "host/serve/atropos": 0, "host/term": 0,
	"host/plugin": 1, "host/rundir": 1,
	"host/rundir/report": 2, "host/rundir/export": 2,
	"host/scheduler": 3, "host/view": 3,
	"host/env":      4,
	"host/run":      5,
	"host/serve":    6,
	"host/assemble": 7,
	"host/doctor":   8, "host/plugincheck": 8,
}

// never lists, per package (and its subpackages), module packages it must
// not import, with why.
var never = []struct {
	pkg  string
	deps []string
	why  string
}{
	{"host/plugin/wasm", []string{"sandbox", "agent", "host"}, "the wasm runtime receives capabilities as function values"},
	{"host/scheduler", []string{"host/env", "host/plugin", "host/config", "host/run", "agent/openai", "sandbox/docker", "sandbox/local", "sandbox/kubernetes"},
		"the scheduler sees environments, agents and sandboxes only through its interfaces"},
	{"host/run", []string{"host/env", "host/plugin", "agent/openai", "sandbox/docker", "sandbox/local", "sandbox/kubernetes"},
		"the run library is handed its parts; only cmd/proctor wires concrete ones"},
	{"host/rundir", []string{"host/scheduler", "host/env", "host/run", "host/plugin", "host/config", "agent", "agent/hermes", "sandbox"},
		"the run directory is read by tools that run nothing (the trajectory types are in package trajectory)"},
	{"host/rundir/export", []string{"host/assemble"}, "proctor export reads a run directory and runs nothing"},
	{"host/view", []string{"host/scheduler", "host/env", "host/run", "host/plugin", "host/config", "host/assemble", "agent", "sandbox"},
		"the viewer reads a run directory and runs nothing"},
	{"host", []string{"cmd"}, "the libraries know nothing of the command line"},
	{"sandbox", []string{"host", "agent"}, "sandboxes know nothing of runs or agents"},
	{"agent", []string{"host", "sandbox/docker", "sandbox/local", "sandbox/kubernetes"}, "the agent sees sandboxes only through its Shell interface"},
}

// stdlibOnly are packages that import only the standard library: the
// records a run directory keeps, which every layer reads, and the text
// bounds the plugin runtime shares with the rest of the host.
var stdlibOnly = []string{"trajectory", "internal/clip"}

// TestLayering keeps the dependency direction of the design: plugins and the
// SDK see only the standard library and the SDK (plugins also
// pluginLibraries), stdlibOnly packages only the standard library; inside host/ nothing
// imports upward (hostRank) and the lines in never hold; each third-party
// client has one importer.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Deps \" \"}}", module+"/...", module+"/sdk/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, ds, _ := strings.Cut(line, "|")
		deps[pkg] = strings.Fields(ds)
	}
	for pkg, ds := range deps {
		me := own(pkg)
		if _, ok := rank(me); under(me, "host") && !ok {
			t.Errorf("%s has no rank: give it one in hostRank, above what it imports", me)
		}
		for _, d := range ds {
			if std(d) {
				continue
			}
			if slices.ContainsFunc(stdlibOnly, func(p string) bool { return under(me, p) }) {
				t.Errorf("%s imports %s: it may import only the standard library", me, d)
				continue
			}
			if !strings.HasPrefix(d, module) {
				checkClient(t, pkg, d)
				if (under(me, "sdk") || under(me, "plugins")) && !(under(me, "plugins") && pluginLibrary(d)) {
					t.Errorf("%s imports %s: plugins and the SDK may import only the standard library, sdk/... and (plugins) %v", me, d, pluginLibraries)
				}
				continue
			}
			checkModuleDep(t, me, own(d))
		}
	}
}

// TestSDKModuleIsStdlibOnly: the SDK is a module of its own that plugins
// outside this repository require, so it requires nothing: an outside
// plugin gets the standard library and the SDK, nothing of the host.
func TestSDKModuleIsStdlibOnly(t *testing.T) {
	b, err := os.ReadFile("../../sdk/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "require" || f[0] == "replace") {
			t.Errorf("sdk/go.mod: %s: the SDK must depend on the standard library only", line)
		}
	}
	if _, err := os.Stat("../../sdk/go.sum"); err == nil {
		t.Error("sdk/go.sum exists: the SDK must depend on the standard library only")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Replace}}", module+"/sdk").CombinedOutput()
	if err != nil || !strings.Contains(string(out), module+"/sdk ") || !strings.Contains(string(out), "./sdk") {
		t.Errorf("the host must build against this checkout's SDK (replace => ./sdk in go.mod): %s %v", out, err)
	}
}

// checkModuleDep checks one dependency inside the module.
func checkModuleDep(t *testing.T, me, dep string) {
	if (under(me, "sdk") || under(me, "plugins")) && !under(dep, "sdk") {
		t.Errorf("%s imports %s: plugins and the SDK may import only the standard library and sdk/...", me, dep)
	}
	for _, n := range never {
		if !under(me, n.pkg) {
			continue
		}
		for _, d := range n.deps {
			if under(dep, d) && !under(dep, n.pkg) {
				t.Errorf("%s imports %s: %s", me, dep, n.why)
			}
		}
	}
	if mine, ok := rank(me); ok {
		if theirs, ok := rank(dep); ok && theirs >= mine {
			t.Errorf("%s imports %s: inside host/ nothing imports upward (see hostRank)", me, dep)
		}
	}
}

// rank is a host package's rank; a test helper (NAME/NAMEtest) ranks just
// above its package.
func rank(pkg string) (float64, bool) {
	if r, ok := hostRank[pkg]; ok {
		return float64(r), true
	}
	parent, last := pkg[:max(strings.LastIndex(pkg, "/"), 0)], pkg[strings.LastIndex(pkg, "/")+1:]
	if r, ok := hostRank[parent]; ok && strings.HasSuffix(last, "test") {
		return float64(r) + 0.5, true
	}
	return 0, false
}

// checkClient: each third-party client has one importer (and
// cmd/proctor, where it says so).
func checkClient(t *testing.T, pkg, d string) {
	me := own(pkg)
	for _, c := range []struct {
		prefix, owner string
		wiring        bool // cmd/proctor may import it too
	}{
		{"github.com/docker/docker", "sandbox/docker", true},
		{"github.com/openai/openai-go", "agent/openai", false},
		{"oras.land/oras-go", "host/plugin/oci", false},
		{"k8s.io/", "sandbox/kubernetes", false},
	} {
		if !strings.HasPrefix(d, c.prefix) || under(me, c.owner) || c.wiring && under(me, "cmd/proctor") {
			continue
		}
		if directImport(t, pkg, c.prefix) {
			t.Errorf("%s imports %s directly: only %s may", me, c.prefix, c.owner)
		}
	}
}

func std(p string) bool        { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") }
func own(p string) string      { return strings.TrimPrefix(p, module+"/") }
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// pluginLibraries are the third-party packages a plugin may use: each
// builds for wasip1 with the standard library alone. BurntSushi/toml reads
// Harbor's task.toml (tb2), which needs a real TOML decoder.
var pluginLibraries = []string{"github.com/BurntSushi/toml"}

func pluginLibrary(pkg string) bool {
	for _, l := range pluginLibraries {
		if pkg == l || strings.HasPrefix(pkg, l+"/") {
			return true
		}
	}
	return false
}

// imports caches each package's direct imports: a package that pulls in
// client-go has hundreds of k8s.io dependencies to check.
var imports = map[string][]string{}

func directImport(t *testing.T, pkg, prefix string) bool {
	if _, ok := imports[pkg]; !ok {
		out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		imports[pkg] = strings.Fields(string(out))
	}
	for _, imp := range imports[pkg] {
		if strings.HasPrefix(imp, prefix) {
			return true
		}
	}
	return false
}
