//go:build !wasip1

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

// goRepo makes the clean repository of a Go instance: what its image would
// hold at /testbed.
func goRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.21\n",
		"calc.go":      "package calc\n\n// Add returns a + b.\nfunc Add(a, b int) int {\n\treturn a + b\n}\n\n// Sub returns a - b.\nfunc Sub(a, b int) int {\n\treturn a - b\n}\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(Add(2, 3))\n\t}\n}\n\nfunc TestSub(t *testing.T) {\n\tif Sub(5, 3) != 2 {\n\t\tt.Fatal(Sub(5, 3))\n\t}\n}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, dir, "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm clean")
	return dir
}

func sh(t *testing.T, dir, script string) string {
	t.Helper()
	c := exec.Command("bash", "-c", script)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

const goBug = "diff --git a/calc.go b/calc.go\n--- a/calc.go\n+++ b/calc.go\n@@ -2,7 +2,7 @@ package calc\n \n // Add returns a + b.\n func Add(a, b int) int {\n-\treturn a + b\n+\treturn a - b\n }\n \n // Sub returns a - b.\n"

// emulated starts an emulated host whose sandbox, at start and at every
// reset, is a copy of repo at /testbed.
func emulated(t *testing.T, repo string) (*sdktest.Host, abi.RolloutRequest) {
	h := sdktest.New(t)
	h.Workdir = "/testbed"
	h.Reset = func(h *sdktest.Host) error {
		return exec.Command("cp", "-a", repo, h.Path("/testbed")).Run()
	}
	if err := h.Reset(h); err != nil {
		t.Fatal(err)
	}
	in := Instance{ID: "calc.add_sign", Repo: "example/calc", Patch: goBug, FailToPass: []string{"TestAdd"}, PassToPass: []string{"TestSub"},
		Image: "calc:1", ProblemStatement: "Add is wrong", Mode: modeImage}
	data, _ := json.Marshal(in)
	cfg, _ := json.Marshal(map[string]any{"dataset": "d", "test_setup": ""})
	return h, abi.RolloutRequest{Task: abi.Task{ID: in.ID, Data: data}, Config: cfg}
}

func verify(t *testing.T, req abi.RolloutRequest) abi.VerifyResponse {
	t.Helper()
	var v abi.VerifyResponse
	if err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: req}, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRolloutNative runs setup, an agent's edits, verify and the oracle
// natively: the agent sees the bug without the failing test, and grading
// takes only its source changes to a fresh sandbox.
func TestRolloutNative(t *testing.T) {
	repo := goRepo(t)
	t.Run("Setup", func(t *testing.T) {
		h, req := emulated(t, repo)
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(h.Path("/testbed/calc.go")); !strings.Contains(string(b), "return a - b") {
			t.Errorf("the bug is not applied:\n%s", b)
		}
		if _, err := os.Stat(h.Path("/testbed/calc_test.go")); !os.IsNotExist(err) {
			t.Errorf("the file of the failing test is not hidden: %v", err)
		}
		if log := sh(t, h.Path("/testbed"), "git log --oneline | wc -l; git status --porcelain"); strings.TrimSpace(log) != "1" {
			t.Errorf("want one commit and a clean tree, got %q", log)
		}
	})
	t.Run("Nop", func(t *testing.T) {
		_, req := emulated(t, repo)
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		if v := verify(t, req); v.Passed || v.Tests[0].Status != "failed" || v.Tests[1].Status != "passed" {
			t.Errorf("nop: %+v", v)
		}
	})
	t.Run("FixWithCheats", func(t *testing.T) {
		h, req := emulated(t, repo)
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		// A real fix, plus a test file of its own that would pass
		// anything: the fix counts, the test file is left out.
		sh(t, h.Path("/testbed"), `sed -i '0,/return a - b/s//return a + b/' calc.go && printf 'package calc\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {}\n' > calc_test.go && ln -s /etc evil`)
		v := verify(t, req)
		if !v.Passed || v.Reward != 1 {
			t.Fatalf("fix: %+v", v)
		}
		if !strings.Contains(v.Output, "calc_test.go (test file)") || !strings.Contains(v.Output, "evil (symlink)") {
			t.Errorf("the output must say what was left out: %s", v.Output)
		}
		if _, err := os.Lstat(h.Path("/testbed/evil")); !os.IsNotExist(err) {
			t.Errorf("grading ran in the agent's sandbox: %v", err)
		}
	})
	t.Run("TestEditOnly", func(t *testing.T) {
		h, req := emulated(t, repo)
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		sh(t, h.Path("/testbed"), `printf 'package calc\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {}\nfunc TestSub(t *testing.T) {}\n' > calc_test.go`)
		if v := verify(t, req); v.Passed {
			t.Errorf("a rewritten test passed: %+v", v)
		}
	})
	t.Run("GitRemoved", func(t *testing.T) {
		h, req := emulated(t, repo)
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		sh(t, h.Path("/testbed"), `rm -rf .git`)
		if v := verify(t, req); v.Passed || !strings.Contains(v.Output, "cannot be read") {
			t.Errorf("no .git: %+v", v)
		}
	})
	t.Run("Oracle", func(t *testing.T) {
		_, req := emulated(t, repo)
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		if err := sdktest.Call(abi.HookOracle, req, nil); err != nil {
			t.Fatal(err)
		}
		if v := verify(t, req); !v.Passed {
			t.Errorf("oracle: %+v", v)
		}
	})
}

// TestRolloutSwesmithNative grades Go rollouts natively with the swesmith
// grading and a gotest profile: SWE-smith's eval script, log and rule. An
// empty change resolves nothing (SWE-smith cannot apply an empty patch);
// a change that breaks the build leaves no test in the log, which
// SWE-smith's harness before SWE-bench/SWE-smith#95 counts as every test
// passing, while the strict grading fails it.
func TestRolloutSwesmithNative(t *testing.T) {
	repo := goRepo(t)
	swesmith := func(t *testing.T) (*sdktest.Host, abi.RolloutRequest) {
		h, req := emulated(t, repo)
		req.Config, _ = json.Marshal(map[string]any{"dataset": "d", "test_setup": "", "grading": "swesmith",
			"profiles": map[string]any{"example/calc": map[string]string{"test_cmd": "go test -v -count=1 ./...", "log_parser": "gotest"}}})
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		return h, req
	}
	const fix = `sed -i '0,/return a - b/s//return a + b/' calc.go`
	for _, tc := range []struct {
		name, edit string
		passed     bool
		ran        float64
		status     string // of TestSub, the PASS_TO_PASS test
		output     string
	}{
		{"Nop", "", false, 0, "missing", "fails to apply an empty patch"},
		{"Fix", fix, true, 1, "passed", "--- PASS: TestAdd"},
		{"FixBreakingSub", fix + ` && sed -i 's/return a - b/return b - a/' calc.go`, false, 1, "failed", "--- FAIL: TestSub"},
		{"BuildBroken", `echo 'func broken(' >> calc.go`, true, 1, "missing", "0 test results in the log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, req := swesmith(t)
			if tc.edit != "" {
				sh(t, h.Path("/testbed"), tc.edit)
			}
			v := verify(t, req)
			if v.Passed != tc.passed || v.Scores["tests_ran"] != tc.ran || v.Scores["grading_swesmith"] != 1 ||
				!strings.HasPrefix(v.Output, "grading: swesmith\n") || v.Tests[1].Status != tc.status || !strings.Contains(v.Output, tc.output) {
				t.Errorf("%+v", v)
			}
		})
	}
	t.Run("StrictFailsBrokenBuild", func(t *testing.T) {
		h, req := emulated(t, repo)
		if err := sdktest.Call(abi.HookSetup, req, nil); err != nil {
			t.Fatal(err)
		}
		sh(t, h.Path("/testbed"), `echo 'func broken(' >> calc.go`)
		if v := verify(t, req); v.Passed || v.Scores["tests_ran"] != 0 || v.Scores["grading_strict"] != 1 || !strings.HasPrefix(v.Output, "grading: strict\n") {
			t.Errorf("%+v", v)
		}
	})
}

// TestUnreadableRowFailsAlone: a dataset line that is not JSON is a broken
// task of its own, whose rollouts fail with the host's reason naming the
// file and the line; the other rows load (it took the whole run down).
func TestUnreadableRowFailsAlone(t *testing.T) {
	h := sdktest.New(t)
	row := func(id string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"instance_id": id, "repo": "o/r", "image_name": "img", "patch": "diff", "problem_statement": "fix it",
			"FAIL_TO_PASS": []string{"tests/test_a.py::test_a"}, "PASS_TO_PASS": []string{}})
		return b
	}
	h.Datasets["d"] = []json.RawMessage{row("a"), row("b"), row("c"), row("d"), nil, row("e")}
	h.BadRows = map[string]map[int]string{"d": {4: "dataset rows.jsonl: line 5 is not a JSON object (is the file truncated, or not JSONL?)"}}
	var resp abi.TasksResponse
	cfg := json.RawMessage(`{"dataset":"d"}`)
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{Config: cfg}, &resp); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range resp.Tasks {
		ids = append(ids, tk.ID)
	}
	if strings.Join(ids, ",") != "a,b,c,d,row 4,e" || resp.Tasks[4].Broken == "" {
		t.Fatalf("tasks %v, skipped %+v", ids, resp.Skipped)
	}
	err := sdktest.Call(abi.HookSandbox, abi.RolloutRequest{Task: resp.Tasks[4], Config: cfg}, &abi.SandboxSpec{})
	if err == nil || !strings.Contains(err.Error(), "instance row 4 cannot run: dataset rows.jsonl: line 5 is not a JSON object") {
		t.Errorf("rollout of the broken row: %v", err)
	}
}
