package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/proctor-dev/proctor/host/oci/ocitest"
	"github.com/proctor-dev/proctor/host/wasm/wasmtest"
)

// TestMain lets testscript run this test binary as the real `proctor`
// command inside scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"proctor": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the end-to-end CLI scripts in testdata/script.
func TestScripts(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("ROOT", root)
			env.Setenv("TB2_WASM", wasmtest.Build(t, "./plugins/tb2"))
			env.Setenv("EXAMPLE_WASM", wasmtest.Build(t, "./plugins/example"))
			env.Setenv("SWESMITH_WASM", wasmtest.Build(t, "./plugins/swesmith"))
			env.Setenv("TOOLSTATS_WASM", wasmtest.Build(t, "./plugins/toolstats"))
			env.Setenv("JUDGE_WASM", wasmtest.Build(t, "./plugins/judge"))
			env.Setenv("LOUD_WASM", wasmtest.Build(t, "./cmd/proctor/testdata/plugins/loud"))
			env.Setenv("MAYBEJUDGE_WASM", wasmtest.Build(t, "./cmd/proctor/testdata/plugins/maybejudge"))
			if os.Getenv("PROCTOR_REQUIRE_DOCKER") == "1" && !dockerAvailable() {
				return errors.New("PROCTOR_REQUIRE_DOCKER=1 but no Docker engine answers: run `make engine`")
			}
			if kubernetesAvailable() {
				// Images built from a task's context go to a loopback
				// registry the cluster pulls from over plain HTTP.
				env.Setenv("K8S_REGISTRY", ocitest.Start(t).Addr+"/proctor")
			} else if os.Getenv("PROCTOR_REQUIRE_KUBERNETES") == "1" {
				return errors.New("PROCTOR_REQUIRE_KUBERNETES=1 but no Kubernetes cluster answers: run `make k8s-up` and export the KUBECONFIG it prints")
			}
			env.Setenv("PROCTOR_CACHE_DIR", filepath.Join(os.TempDir(), "proctor-test-cache"))
			for _, k := range []string{"PROCTOR_REQUIRE_DOCKER", "PROCTOR_BASE_IMAGE", "DOCKER_HOST", "HOME", "KUBECONFIG"} {
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
			case "kubernetes":
				return kubernetesAvailable(), nil
			}
			return false, nil
		},
	})
}
