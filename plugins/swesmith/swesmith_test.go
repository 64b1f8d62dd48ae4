//go:build !wasip1

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestParseJUnitAndGrade(t *testing.T) {
	xml := `<?xml version="1.0"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_ops" name="test_add"/>
<testcase classname="tests.test_ops" name="test_sub"><failure message="boom"/></testcase>
<testcase classname="tests.test_ops.TestX" name="test_in_class"/>
<testcase classname="tests.test_ops" name="test_known_bug"><skipped type="pytest.xfail" message="xfail"/></testcase>
<testcase classname="tests.test_ops" name="test_err"><error message="fixture"/></testcase>
</testsuite></testsuites>`
	got, err := ParseJUnit([]byte(xml))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"tests/test_ops.py::test_add": "passed", "tests/test_ops.py::test_sub": "failed",
		"tests/test_ops.py::TestX::test_in_class": "passed", "tests/test_ops.py::test_known_bug": "xfail",
		"tests/test_ops.py::test_err": "error",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	in := Instance{FailToPass: []string{"tests/test_ops.py::test_add", "tests/test_ops.py::test_known_bug"}, PassToPass: []string{"tests/test_ops.py::TestX::test_in_class"}}
	if v := Grade(in, got); !v.Passed || v.Reward != 1 {
		t.Errorf("xfail must count as a pass: %+v", v)
	}
	in.PassToPass = append(in.PassToPass, "tests/test_ops.py::test_gone")
	if v := Grade(in, got); v.Passed || v.Tests[len(v.Tests)-1].Status != "missing" {
		t.Errorf("a missing test must count as failed: %+v", v)
	}
}

func TestFromRowListForms(t *testing.T) {
	for _, row := range []string{
		`{"instance_id":"a","problem_statement":"p","FAIL_TO_PASS":["t.py::x"],"PASS_TO_PASS":[]}`,
		`{"instance_id":"a","problem_statement":"p","FAIL_TO_PASS":"[\"t.py::x\"]","PASS_TO_PASS":"[]"}`,
	} {
		in, err := FromRow(json.RawMessage(row))
		if err != nil || len(in.FailToPass) != 1 || in.FailToPass[0] != "t.py::x" {
			t.Errorf("%s: %v %+v", row, err, in)
		}
	}
	if _, err := FromRow(json.RawMessage(`{"instance_id":"a","FAIL_TO_PASS":[]}`)); err == nil {
		t.Error("an instance without FAIL_TO_PASS loaded")
	}
}

// TestOracleVariantRows reads rows in the SWE-smith-oracle layout (repo,
// base_commit, text; no id, patch or image) and picks each row's mode.
func TestOracleVariantRows(t *testing.T) {
	in, err := FromRow(json.RawMessage(`{"repo":"owner/proj","base_commit":"0123456789abcdef0123","text":"fix it","FAIL_TO_PASS":["t.py::x"],"PASS_TO_PASS":[]}`))
	if err != nil || in.ID != "owner__proj.0123456789ab" || in.Text != "fix it" {
		t.Fatalf("%v %+v", err, in)
	}
	if _, err := FromRow(json.RawMessage(`{"instance_id":"a","FAIL_TO_PASS":["t.py::x"]}`)); err == nil {
		t.Error("a row with neither problem_statement nor text loaded")
	}
	c, _ := parseConfig(json.RawMessage(`{"dataset":"d"}`))
	for _, tc := range []struct {
		mode, image, repo, commit, want string
	}{
		{"auto", "img", "r", "c", modeImage},
		{"auto", "", "r", "c", modeClone},
		{"clone", "img", "r", "c", modeClone},
		{"image", "", "r", "c", ""},
		{"auto", "", "r", "", ""},
	} {
		c.Mode = tc.mode
		got, err := mode(c, Instance{Image: tc.image, Repo: tc.repo, BaseCommit: tc.commit})
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("%+v: %q %v", tc, got, err)
		}
	}
	if _, err := parseConfig(json.RawMessage(`{"dataset":"d","mode":"worktree"}`)); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestGoRows grades Go rows from real `go test -json` output: a module
// with a passing, a failing, a skipped test and subtests.
func TestGoRows(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "m_test.go"), []byte(`package m

import "testing"

func TestPass(t *testing.T) {}
func TestFail(t *testing.T) { t.Fatal("boom") }
func TestSkip(t *testing.T) { t.Skip("later") }
func TestSub(t *testing.T) {
	t.Run("ok", func(t *testing.T) {})
	t.Run("bad", func(t *testing.T) { t.Error("no") })
}
`), 0o644)
	in := Instance{FailToPass: []string{"TestPass", "TestSub/ok"}, PassToPass: []string{"TestSkip", "TestGone"}}
	if !isGo(in) || isGo(Instance{FailToPass: []string{"tests/t.py::test_x"}}) {
		t.Fatal("isGo")
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "-run", goRunPattern(append(in.FailToPass, "TestFail", "TestSub/bad", "TestSkip")), "./...")
	cmd.Dir = dir
	out, _ := cmd.Output() // exits 1: TestFail fails
	got := ParseGoTestJSON(out)
	want := map[string]string{"TestPass": "passed", "TestFail": "failed", "TestSkip": "skipped", "TestSub": "failed", "TestSub/ok": "passed", "TestSub/bad": "failed"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	v := Grade(in, got)
	if v.Passed || v.Tests[2].Status != "skipped" || v.Tests[3].Status != "missing" {
		t.Errorf("grade: %+v", v)
	}
	if files := testFiles([]string{"TestPass", "tests/t.py::x", "tests/t.py"}); len(files) != 1 || files[0] != "tests/t.py" {
		t.Errorf("testFiles: %v", files)
	}
}

func FuzzParseGoTestJSON(f *testing.F) {
	f.Add([]byte(`{"Action":"pass","Test":"TestA"}` + "\n" + `{"Action":"fail","Test":"TestA"}`))
	f.Fuzz(func(t *testing.T, b []byte) { ParseGoTestJSON(b) })
}

func FuzzParseJUnit(f *testing.F) {
	f.Add([]byte(`<testsuite><testcase classname="a.b" name="c"/></testsuite>`))
	f.Fuzz(func(t *testing.T, b []byte) { ParseJUnit(b) })
}

func FuzzFromRow(f *testing.F) {
	f.Add([]byte(`{"instance_id":"a","FAIL_TO_PASS":"[\"x\"]"}`))
	f.Fuzz(func(t *testing.T, b []byte) { FromRow(b) })
}
