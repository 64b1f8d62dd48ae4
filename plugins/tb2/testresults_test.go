//go:build !wasip1

package main

import (
	"reflect"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
)

func TestParseJUnit(t *testing.T) {
	// pytest --junitxml's layout, and a nested suite as other runners write.
	doc := `<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="tests.test_outputs" name="test_ok" time="0.001"/>
<testcase classname="tests.test_outputs" name="test_bad" time="0.002"><failure message="assert 1 == 2">def test_bad():
&gt;       assert 1 == 2</failure></testcase>
<testcase classname="tests.test_outputs" name="test_err"><error message="fixture 'db' not found"/></testcase>
<testcase classname="tests.test_outputs" name="test_skip"><skipped type="pytest.skip" message="no gpu"/></testcase>
<testsuite name="inner"><testcase name="nested"><failure>trace only</failure></testcase></testsuite>
</testsuite></testsuites>`
	want := []abi.TestResult{
		{Name: "tests.test_outputs::test_ok", Status: "passed"},
		{Name: "tests.test_outputs::test_bad", Status: "failed", Message: "assert 1 == 2"},
		{Name: "tests.test_outputs::test_err", Status: "error", Message: "fixture 'db' not found"},
		{Name: "tests.test_outputs::test_skip", Status: "skipped", Message: "no gpu"},
		{Name: "nested", Status: "failed", Message: "trace only"},
	}
	if got := parseJUnit([]byte(doc)); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v", got)
	}
	if parseJUnit([]byte("not xml")) != nil {
		t.Error("garbage parsed")
	}
}

func TestParsePytestSummary(t *testing.T) {
	log := "============================= test session starts ==============================\n" +
		"collected 6 items\n\n" +
		"tests/test_outputs.py .F.sxX                                              [100%]\n\n" +
		"=================================== FAILURES ===================================\n" +
		"FAILED earlier noise that is not in the summary\n" +
		"\x1b[36m=========================== short test summary info ============================\x1b[0m\n" +
		"\x1b[32mPASSED\x1b[0m tests/test_outputs.py::test_a\n" +
		"FAILED tests/test_outputs.py::test_b - AssertionError: assert 'x' == 'y'\r\n" +
		"ERROR tests/test_outputs.py::test_c - RuntimeError: boom - again\n" +
		"SKIPPED [1] tests/test_outputs.py:40: needs network\n" +
		"XFAIL tests/test_outputs.py::test_d - known bug\n" +
		"XPASS tests/test_outputs.py::test_e\n" +
		"=================== 1 failed, 2 passed, 1 skipped in 0.12s ====================\n" +
		"PASSED after the summary does not count\n"
	want := []abi.TestResult{
		{Name: "tests/test_outputs.py::test_a", Status: "passed"},
		{Name: "tests/test_outputs.py::test_b", Status: "failed", Message: "AssertionError: assert 'x' == 'y'"},
		{Name: "tests/test_outputs.py::test_c", Status: "error", Message: "RuntimeError: boom - again"},
		{Name: "tests/test_outputs.py:40", Status: "skipped", Message: "needs network"},
		{Name: "tests/test_outputs.py::test_d", Status: "skipped", Message: "xfail known bug"},
		{Name: "tests/test_outputs.py::test_e", Status: "passed", Message: "xpass"},
	}
	if got := parsePytestSummary(log); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if parsePytestSummary("2 passed in 0.1s\n") != nil {
		t.Error("a log without a summary gave tests")
	}
}

func FuzzTestReports(f *testing.F) {
	f.Add([]byte("<testsuite><testcase name=\"a\"><failure message=\"m\"/></testcase></testsuite>"))
	f.Add([]byte("=== short test summary info ===\nFAILED a - b\nSKIPPED [1] x\n"))
	f.Add([]byte(`{"results":{"tests":[{"name":"a","status":"passed"}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseJUnit(b)
		parsePytestSummary(string(b))
		parseCTRF(b)
	})
}
