package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/proctor-dev/proctor/host/plugin/oci/ocitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
	"github.com/proctor-dev/proctor/sdk/python"
)

// TestMain lets testscript run this test binary as the real `proctor`
// command inside scripts.
func TestMain(m *testing.M) {
	if file := os.Getenv(rssOfEnv); file != "" {
		os.Exit(rssOf(file, os.Args[1:]))
	}
	if err := sandboxtest.EnsureWarden(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testscript.Main(cleanM{m}, map[string]func(){
		"proctor": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// cleanM removes, after the tests, the plugins and the binary they built.
type cleanM struct{ m *testing.M }

func (c cleanM) Run() int { return wasmtest.Run(c.m) }

// TestScripts runs the end-to-end CLI scripts in testdata/script.
func TestScripts(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Found before the scripts point PROCTOR_CACHE_DIR elsewhere, and
	// loaded by the first script that asks for it: a runtime still
	// building in the background (make test-setup) holds up only the
	// scripts that need it.
	pyRuntime := python.RuntimeDir()
	pyErr := sync.OnceValue(func() error {
		_, err := python.LoadRuntime(pyRuntime)
		return err
	})
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("ROOT", root)
			env.Setenv("TB2_WASM", wasmtest.Build(t, "./plugins/tb2"))
			env.Setenv("EXAMPLE_WASM", wasmtest.Build(t, "./plugins/example"))
			env.Setenv("SWESMITH_WASM", wasmtest.Build(t, "./plugins/swesmith"))
			env.Setenv("SWESHAPED_WASM", wasmtest.Build(t, "./plugins/sweshaped"))
			env.Setenv("TOOLSTATS_WASM", wasmtest.Build(t, "./plugins/toolstats"))
			env.Setenv("JUDGE_WASM", wasmtest.Build(t, "./plugins/judge"))
			env.Setenv("LOUD_WASM", wasmtest.Build(t, "./cmd/proctor/testdata/plugins/loud"))
			env.Setenv("MAYBEJUDGE_WASM", wasmtest.Build(t, "./cmd/proctor/testdata/plugins/maybejudge"))
			env.Setenv("HOSTILE_WASM", wasmtest.Build(t, "./cmd/proctor/testdata/plugins/hostile"))
			if os.Getenv("PROCTOR_REQUIRE_DOCKER") == "1" && !dockerAvailable() {
				return errors.New("PROCTOR_REQUIRE_DOCKER=1 but no Docker engine answers: run `make engine`")
			}
			env.Setenv("PROCTOR_PYTHON_RUNTIME", pyRuntime)
			if kubernetesAvailable() {
				// Images built from a task's context go to a loopback
				// registry the cluster pulls from over plain HTTP.
				env.Setenv("K8S_REGISTRY", ocitest.Start(t).Addr+"/proctor")
			} else if os.Getenv("PROCTOR_REQUIRE_KUBERNETES") == "1" {
				return errors.New("PROCTOR_REQUIRE_KUBERNETES=1 but no Kubernetes cluster answers: run `make k8s-up` and export the KUBECONFIG it prints")
			}
			env.Setenv("PROCTOR_CACHE_DIR", filepath.Join(os.TempDir(), "proctor-test-cache"))
			// plugin new's scripts build Go modules: the go command needs
			// its caches (and no network: GOPROXY=off in those scripts).
			for k, v := range goEnv() {
				env.Setenv(k, v)
			}
			for _, k := range []string{"PROCTOR_REQUIRE_DOCKER", "PROCTOR_BASE_IMAGE", "PROCTOR_WARDEN", "DOCKER_HOST", "HOME", "KUBECONFIG"} {
				if v, ok := os.LookupEnv(k); ok {
					env.Setenv(k, v)
				}
			}
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "docker":
				return dockerAvailable(), nil
			case "python":
				err := pyErr()
				if err != nil && os.Getenv("PROCTOR_REQUIRE_PYTHON") == "1" {
					return false, fmt.Errorf("PROCTOR_REQUIRE_PYTHON=1 but %v: run `make python-runtime`", err)
				}
				return err == nil, nil
			case "bridge":
				// The engine has a default bridge network (this
				// machine's runs with --bridge=none).
				return exec.Command("docker", "network", "inspect", "bridge").Run() == nil, nil
			case "kubernetes":
				return kubernetesAvailable(), nil
			}
			return false, nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"httpserve": httpServe},
	})
}

// httpServe starts an HTTP server on 127.0.0.1 for the rest of the script,
// answering "reachable" to every request, and sets $SERVER_URL to its URL.
func httpServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: httpserve")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "reachable") })}
	go srv.Serve(l)
	ts.Defer(func() { srv.Close() })
	ts.Setenv("SERVER_URL", "http://"+l.Addr().String()+"/")
}

// goEnv is where the go command keeps its caches and finds its toolchain.
var goEnv = sync.OnceValue(func() map[string]string {
	out, err := exec.Command("go", "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH", "GOROOT").Output()
	m := map[string]string{}
	if err == nil {
		json.Unmarshal(out, &m)
	}
	return m
})
