//go:build !wasip1

package main

import (
	"encoding/json"
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
		`{"instance_id":"a","FAIL_TO_PASS":["t.py::x"],"PASS_TO_PASS":[]}`,
		`{"instance_id":"a","FAIL_TO_PASS":"[\"t.py::x\"]","PASS_TO_PASS":"[]"}`,
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

func FuzzParseJUnit(f *testing.F) {
	f.Add([]byte(`<testsuite><testcase classname="a.b" name="c"/></testsuite>`))
	f.Fuzz(func(t *testing.T, b []byte) { ParseJUnit(b) })
}

func FuzzFromRow(f *testing.F) {
	f.Add([]byte(`{"instance_id":"a","FAIL_TO_PASS":"[\"x\"]"}`))
	f.Fuzz(func(t *testing.T, b []byte) { FromRow(b) })
}
