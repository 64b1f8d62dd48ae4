package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/proctor-dev/proctor"

// TestLayering keeps the dependency direction of the design: plugins and the
// SDK see only the standard library and the SDK; the wasm runtime never sees
// sandboxes or agents; each third-party client has one importer.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Deps \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, ds, _ := strings.Cut(line, "|")
		deps[pkg] = strings.Fields(ds)
	}
	std := func(p string) bool { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") }
	own := func(p string) string { return strings.TrimPrefix(p, module+"/") }
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

	k8sChecked := map[string]bool{}
	for pkg, ds := range deps {
		me := own(pkg)
		for _, d := range ds {
			if std(d) {
				continue
			}
			dep := own(d)
			inModule := strings.HasPrefix(d, module)
			switch {
			case under(me, "sdk") || under(me, "plugins"):
				if !inModule || !under(dep, "sdk") {
					t.Errorf("%s imports %s: plugins and the SDK may import only the standard library and sdk/...", me, d)
				}
			case under(me, "host/wasm"):
				if inModule && (under(dep, "sandbox") || under(dep, "agent") || dep == "host") {
					t.Errorf("%s imports %s: the wasm runtime receives capabilities as function values", me, d)
				}
			case under(me, "sandbox"):
				if inModule && (under(dep, "host") || under(dep, "agent")) {
					t.Errorf("%s imports %s: sandboxes know nothing of runs or agents", me, d)
				}
			case under(me, "agent"):
				if inModule && (under(dep, "host") || under(dep, "sandbox/docker") || under(dep, "sandbox/local") || under(dep, "sandbox/kubernetes")) {
					t.Errorf("%s imports %s: the agent sees sandboxes only through its Shell interface", me, d)
				}
			}
			if strings.HasPrefix(d, "github.com/docker/docker") && !under(me, "sandbox/docker") && !under(me, "cmd/proctor") {
				if !directImport(t, pkg, "github.com/docker/docker") {
					continue
				}
				t.Errorf("%s imports the Docker client directly: only sandbox/docker may", me)
			}
			if strings.HasPrefix(d, "github.com/openai/openai-go") && !under(me, "agent/openai") {
				if !directImport(t, pkg, "github.com/openai/openai-go") {
					continue
				}
				t.Errorf("%s imports openai-go directly: only agent/openai may", me)
			}
			if strings.HasPrefix(d, "k8s.io/") && !under(me, "sandbox/kubernetes") && !k8sChecked[pkg] {
				k8sChecked[pkg] = true
				if directImport(t, pkg, "k8s.io/") {
					t.Errorf("%s imports a Kubernetes client package directly: only sandbox/kubernetes may", me)
				}
			}
			if strings.HasPrefix(d, "oras.land/oras-go") && !under(me, "host/oci") {
				if !directImport(t, pkg, "oras.land/oras-go") {
					continue
				}
				t.Errorf("%s imports oras-go directly: only host/oci may", me)
			}
		}
	}
}

func directImport(t *testing.T, pkg, prefix string) bool {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, prefix) {
			return true
		}
	}
	return false
}
