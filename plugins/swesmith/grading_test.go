//go:build !wasip1

package main

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// TestLogParsers pins SWE-smith's log parsers: each want is what the
// reference gives for the log (SWE-bench/SWE-smith
// swesmith/harness/log_parsers.py at cf2e649, run with SWE-bench's
// TestStatus), quirks included: a later line wins, a parametrised id with
// a space is lost, Python's whitespace (U+00A0, U+001C, U+3000 but not
// U+200B), a docstring standing in for a unittest name, Unicode digits.
func TestLogParsers(t *testing.T) {
	for _, tc := range []struct {
		parser string
		log    string
		want   map[string]string
	}{
		{"pytest", "+ pytest --disable-warnings --color=no --tb=no --verbose tests/test_ops.py\n" +
			"tests/test_ops.py::test_add PASSED                                       [ 25%]\n" +
			"tests/test_ops.py::test_sub FAILED                                       [ 50%]\n" +
			"tests/test_ops.py::TestX::test_in[a b] PASSED                            [ 75%]\n" +
			"tests/test_ops.py::test_skip SKIPPED (why)                               [ 80%]\n" +
			"tests/test_ops.py::test_xf XFAIL\ntests/test_ops.py::test_err ERROR\n" +
			"FAILED tests/test_ops.py::test_sub - assert 1 == 2\n tests/test_ops.py::test_indented PASSED\n" +
			"tests/test_ops.py::test_nbsp\u00a0PASSED\ntests/test_ops.py::test_fs\x1cPASSED\ntests/test_ops.py::test_zwsp\u200bPASSED\n" +
			"tests/test_ops.py::test_passedx PASSEDX\ntests/test_ops.py::test_add FAILED",
			map[string]string{"tests/test_ops.py::test_add": "FAILED", "tests/test_ops.py::test_sub": "FAILED", "tests/test_ops.py::test_skip": "SKIPPED",
				"tests/test_ops.py::test_xf": "XFAIL", "tests/test_ops.py::test_err": "ERROR", "tests/test_ops.py::test_nbsp": "PASSED",
				"tests/test_ops.py::test_fs": "PASSED", "tests/test_ops.py::test_passedx": "PASSED"}},
		{"tornado", "test_a (tornado.test.x_test.XTest.test_a) ... ok\ntest_b (tornado.test.x_test.XTest.test_b) ... FAIL\n" +
			"test_c (tornado.test.x_test.XTest.test_c) ... skipped 'no network'\ntest_d (tornado.test.x_test.XTest.test_d) ... ERROR\n" +
			"Docstring of e ... ok\n" + strings.Repeat("=", 70) + "\nFAIL: test_b (tornado.test.x_test.XTest.test_b)\n" +
			"ERROR: test_d (tornado.test.x_test.XTest.test_d)\nFAIL:",
			map[string]string{"test_a (tornado.test.x_test.XTest.test_a)": "PASSED", "test_c (tornado.test.x_test.XTest.test_c)": "SKIPPED",
				"Docstring of e": "PASSED", "test_b (tornado.test.x_test.XTest.test_b)": "FAILED", "test_d (tornado.test.x_test.XTest.test_d)": "FAILED", "": "FAILED"}},
		{"python_slugify", "test_a (test.TestSlugify.test_a) ... ok\ntest_b (test.TestSlugify.test_b) ... FAIL\n" +
			"test_c (test.TestSlugify.test_c) ... ERROR\ntest_d (test.TestSlugify.test_d) ... skipped 'x'\ntest_\u00e9 (test.T) ... ok\n" +
			"test_f (test.T)\u3000...\u3000ok",
			map[string]string{"test_a (test.TestSlugify.test_a)": "PASSED", "test_b (test.TestSlugify.test_b)": "FAILED",
				"test_c (test.TestSlugify.test_c)": "ERROR", "test_f (test.T)": "PASSED"}},
		{"gotest", "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\n    --- FAIL: TestClamp/high (0.00s)\n--- SKIP: TestSkip (0.00s)\n" +
			"--- PASS: TestOdd/a_(b) (0.01s)\n--- PASS: TestNoTime\nok  \texample.com/calc\t0.002s",
			map[string]string{"TestAdd": "PASSED", "TestClamp/high": "FAILED", "TestSkip": "SKIPPED", "TestOdd/a_(b)": "PASSED"}},
		{"paramiko", "PASSED tests/test_a.py::test_x\nFAILED tests/t.py::b - AssertionError\nERROR  tests/t.py::c\nXFAIL\ttests/t.py::d\n PASSED tests/t.py::e",
			map[string]string{"tests/test_a.py::test_x": "PASSED", "tests/t.py::b": "FAILED", "tests/t.py::d": "XFAIL"}},
		{"autograd", "[gw0] PASSED tests/t.py::a\n[gw1] FAILED tests/t.py::b\n[gw12] PASSED tests/t.py::x\n[gw\u0663] PASSED tests/t.py::c\n[gw2]  PASSED tests/t.py::d",
			map[string]string{"tests/t.py::a": "PASSED", "tests/t.py::b": "FAILED", "tests/t.py::c": "PASSED"}},
		{"mypy", "mypy/test/testcheck.py::TypeCheckSuite::check-x.test::testA PASSED\nFAILED mypy/test/x.py::testB - x\nPASSED a FAILED b\nnothing here",
			map[string]string{"PASSED": "PASSED", "x": "FAILED", "b": "PASSED"}},
	} {
		if got := logParsers[tc.parser](tc.log); !maps.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.parser, got, tc.want)
		}
	}
}

// TestReadTestOutput pins SWE-smith's read_test_output (SWE-bench/SWE-smith
// swesmith/harness/grading.py at cf2e649): each want is what the reference
// returns for the log written to a file, universal newlines, SWE-bench's
// failure markers, Python's slicing when a traced marker is missing, and
// the error it raises when the end marker comes first.
func TestReadTestOutput(t *testing.T) {
	const s, e = "+ : '>>>>> Start Test Output'", "+ : '>>>>> End Test Output'"
	for _, tc := range []struct {
		log, region string
		found       bool
	}{
		{"+ cd /testbed\n" + s + "\n+ pytest x\nt.py::a PASSED\n" + e + "\n", "\n+ pytest x\nt.py::a PASSED\n", true},
		{s + "\r\nt.py::a PASSED\r" + e + "\r\n", "\nt.py::a PASSED\n", true},
		{s + "\nt.py::a PASSED\n>>>>> Patch Apply Failed\n" + e + "\n", "", false},
		{s + "\nt.py::a PASSED\n>>>>> Tests Timed Out\n" + e + "\n", "", false},
		{s + "\nt.py::a PASSED\n", s + "\nt.py::a PASSED\n", false},
		{e + "\n" + s + "\nt.py::a PASSED\n" + e + "\n", "", false},
		{s + "\na PASSED\n" + e + "\nb FAILED\n" + e + "\n", "\na PASSED\n", true},
		{">>>>> Start Test Output\n>>>>> End Test Output\nt.py::a FAILED\n", "", true},
		{">>>>> Start Test Output\n" + e + "\nt.py::a FAILED é", "", true},
	} {
		region, found, why := readTestOutput(tc.log)
		if region != tc.region || found != tc.found || found == (why != "") {
			t.Errorf("%q: %q %v (%s), want %q %v", tc.log, region, found, why, tc.region, tc.found)
		}
	}
}

// TestGradeSwesmith pins SWE-smith's rule (swesmith/harness/grading.py
// get_eval_tests_report's test_passed and test_failed, the file filter of
// get_eval_report, and swebench/harness/grading.py
// get_resolution_status): a test the log does not mention passes, only
// FAILED and ERROR fail, SKIPPED counts for neither side, tests outside the
// FAIL_TO_PASS files are not graded.
func TestGradeSwesmith(t *testing.T) {
	in := Instance{FailToPass: []string{"t/a.py::f1", "t/a.py::f2"}, PassToPass: []string{"t/a.py::p1", "t/b.py::p2"}}
	files := []string{"t/a.py"}
	for _, tc := range []struct {
		name     string
		sm       map[string]string
		files    []string
		resolved bool
		statuses string
	}{
		{"all passed", map[string]string{"t/a.py::f1": stPassed, "t/a.py::f2": stPassed, "t/a.py::p1": stPassed}, files, true, "passed passed passed not_run"},
		{"an empty log resolves", map[string]string{}, files, true, "missing missing missing not_run"},
		{"xfail passes", map[string]string{"t/a.py::f1": stXfail}, files, true, "xfail missing missing not_run"},
		{"every FAIL_TO_PASS skipped resolves", map[string]string{"t/a.py::f1": stSkipped, "t/a.py::f2": stSkipped}, files, true, "skipped skipped missing not_run"},
		{"a failure", map[string]string{"t/a.py::f1": stPassed, "t/a.py::f2": stFailed}, files, false, "passed failed missing not_run"},
		{"an error", map[string]string{"t/a.py::p1": stError}, files, false, "missing missing error not_run"},
		{"a failure outside the files counts for nothing", map[string]string{"t/b.py::p2": stFailed}, files, true, "missing missing missing not_run"},
		{"without files every test is graded", map[string]string{"t/b.py::p2": stFailed}, nil, false, "missing missing missing failed"},
		{"the filter is a string prefix", map[string]string{"t/b.py::p2": stFailed}, []string{"t/"}, false, "missing missing missing failed"},
	} {
		v := GradeSwesmith(in, tc.sm, tc.files)
		var st []string
		for _, r := range v.Tests {
			st = append(st, r.Status)
		}
		if v.Passed != tc.resolved || v.Reward != map[bool]float64{true: 1}[tc.resolved] || strings.Join(st, " ") != tc.statuses || v.Scores["tests_ran"] != 1 {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

// TestTestCommand pins what SWE-smith runs for an instance
// (swesmith/harness/utils.py get_test_command at cf2e649, with the files
// sorted as swesmith/profiles/base.py sorts them): pytest commands get the
// FAIL_TO_PASS files, mypy a -k expression, others run as they are.
func TestTestCommand(t *testing.T) {
	in := Instance{FailToPass: []string{"tests/b.py::t1", "tests/a.py::C::t2", "tests/b.py::t3[x]"}, PassToPass: []string{"tests/c.py::t4"}}
	for _, tc := range []struct {
		key, cmd string
		files    []string
	}{
		{"owner/unknown", testPytest + " 'tests/a.py' 'tests/b.py'", []string{"tests/a.py", "tests/b.py"}},
		{"tkrajina/gpxpy", "pytest test.py --verbose --color=no --tb=no --disable-warnings 'tests/a.py' 'tests/b.py'", []string{"tests/a.py", "tests/b.py"}},
		{"pydantic/pydantic", "/root/.local/bin/uv run " + testPytest + " 'tests/a.py' 'tests/b.py'", []string{"tests/a.py", "tests/b.py"}},
		{"python/mypy", "pytest --color=no -rA -k 't1 or t2 or t3[x]'", nil},
		{"tornadoweb/tornado", "python -m tornado.test --verbose", nil},
		{"un33k/python-slugify", "python test.py --verbose", nil},
		{"gin-gonic/gin", "go test -v ./...", nil},
	} {
		in.Repo = tc.key
		p, _ := profileFor(Config{}, in)
		cmd, files := testCommand(p, in)
		if cmd != tc.cmd || !reflect.DeepEqual(files, tc.files) {
			t.Errorf("%s: %q %q, want %q %q", tc.key, cmd, files, tc.cmd, tc.files)
		}
	}
}

// TestProfiles names repositories as SWE-smith does and picks their
// profile: the config's, SWE-smith's, the default.
func TestProfiles(t *testing.T) {
	for _, tc := range []struct {
		in   Instance
		want string
	}{
		{Instance{Repo: "swesmith/tornadoweb__tornado.d5ac65c1", ID: "x"}, "tornadoweb/tornado"},
		{Instance{Repo: "swesmith/pdfminer__pdfminer.six.1a8bd2f7"}, "pdfminer/pdfminer.six"},
		{Instance{Repo: "un33k/python-slugify"}, "un33k/python-slugify"},
		{Instance{ID: "tornadoweb__tornado.d5ac65c1.func_pm_remove_cond__x"}, "tornadoweb/tornado"},
		{Instance{ID: "plain-id"}, "plain-id"},
	} {
		if got := repoKey(tc.in); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.in, got, tc.want)
		}
	}
	c, err := parseConfig(json.RawMessage(`{"dataset":"d","grading":"swesmith","profiles":{"tornadoweb/tornado":{"test_cmd":"python -m unittest -v"},"me/x":{"test_cmd":"go test -v ./...","log_parser":"gotest"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, src := profileFor(c, Instance{Repo: "tornadoweb/tornado"}); p.TestCmd != "python -m unittest -v" || p.LogParser != "pytest" || !strings.Contains(src, "env.config.profiles") {
		t.Errorf("the config's profile comes first, with the default parser: %+v %s", p, src)
	}
	if p, _ := profileFor(c, Instance{Repo: "un33k/python-slugify"}); p.LogParser != "python_slugify" {
		t.Errorf("SWE-smith's profile: %+v", p)
	}
	if p, _ := profileFor(c, Instance{Repo: "owner/other"}); p != defaultProfile {
		t.Errorf("default: %+v", p)
	}
	if c.TestTimeout.seconds() != 480 {
		t.Errorf("swesmith grading's test timeout is SWE-smith's eval default, 480s: %v", c.TestTimeout)
	}
	for bad, want := range map[string]string{
		`{"dataset":"d","grading":"loose"}`:                                        "env.config.grading",
		`{"dataset":"d","profiles":{"a/b":{"test_cmd":""}}}`:                       `env.config.profiles."a/b".test_cmd`,
		`{"dataset":"d","profiles":{"a/b":{"test_cmd":"t","log_parser":"junit"}}}`: "use one of autograd, gotest, mypy",
		`{"dataset":"d","profiles":{"a/b":{"test_cmd":"t","parser":"pytest"}}}`:    "parser",
	} {
		if _, err := parseConfig(json.RawMessage(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to name %s", bad, err, want)
		}
	}
}

// TestGradable: each grading takes only the rows it can grade, and says
// what to do about the others.
func TestGradable(t *testing.T) {
	strict, _ := parseConfig(json.RawMessage(`{"dataset":"d"}`))
	sws, _ := parseConfig(json.RawMessage(`{"dataset":"d","grading":"swesmith","profiles":{"me/go":{"test_cmd":"go test -v ./...","log_parser":"gotest"}}}`))
	py := Instance{Repo: "me/py", FailToPass: []string{"t.py::a"}}
	unit := Instance{Repo: "me/unit", FailToPass: []string{"test_a (t.T.test_a)"}}
	tornado := Instance{Repo: "tornadoweb/tornado", FailToPass: []string{"test_a (t.T.test_a)"}}
	goRow := Instance{Repo: "me/go", FailToPass: []string{"TestA"}}
	goOther := Instance{Repo: "me/go2", FailToPass: []string{"TestA"}}
	for _, tc := range []struct {
		c    Config
		in   Instance
		want string
	}{
		{strict, py, ""}, {strict, goRow, ""}, {strict, unit, `grading = "swesmith"`}, {strict, tornado, `grading = "swesmith"`},
		{sws, py, ""}, {sws, tornado, ""}, {sws, goRow, ""},
		{sws, unit, `env.config.profiles."me/unit"`}, {sws, goOther, `env.config.profiles."me/go2"`},
	} {
		err := gradable(tc.c, tc.in)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: %v, want %q", tc.c.Grading, tc.in, err, tc.want)
		}
	}
}

func TestUnittestFiles(t *testing.T) {
	for id, want := range map[string][]string{
		"test_a (pkg.tests.test_m.TestM.test_a)": {"pkg/tests/test_m/TestM/test_a.py", "pkg/tests/test_m/TestM.py", "pkg/tests/test_m.py", "pkg/tests.py", "pkg.py"},
		"test_a (test.TestSlugify)":              {"test/TestSlugify.py", "test.py"},
		"tests/t.py::test_a (x)":                 nil,
		"test_a (../etc.passwd)":                 nil,
		"test_a (a..b)":                          nil,
		"TestA/sub":                              nil,
	} {
		if got := unittestFiles(id); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %q, want %q", id, got, want)
		}
	}
}

// TestEvalScript: the markers come out traced as SWE-smith's grading
// looks for them, after the setup.
func TestEvalScript(t *testing.T) {
	setup := "activate"
	s := evalScript(Config{TestSetup: &setup}, "pytest 'a.py'")
	if !strings.Contains(s, "set -uxo pipefail\ncd /testbed\nactivate\n: '>>>>> Start Test Output'\npytest 'a.py'\n: '>>>>> End Test Output'\n") {
		t.Errorf("%s", s)
	}
	region, found, _ := readTestOutput(sh(t, t.TempDir(), "mkdir -p testbed && bash -c "+quote(strings.ReplaceAll(evalScript(Config{TestSetup: new(string)}, "echo 'a.py::x PASSED'"), "/testbed", "testbed"))+" 2>&1"))
	if !found || parsePytest(region)["a.py::x"] != stPassed {
		t.Errorf("%q %v", region, found)
	}
}

func TestDecodePrefix(t *testing.T) {
	for in, want := range map[string]string{"aGVsbG8=": "hello", "aGVsbG8gd29y": "hello wor", "aGVsbG8gd29": "hello ", "aGVsbG8gd2==": "hello w", "": "", "!!!!": ""} {
		if got := string(decodePrefix(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func FuzzLogParsers(f *testing.F) {
	f.Add("t.py::a PASSED\nFAIL: test_b (m.C)\n--- PASS: TestA (0.00s)\n[gw0] PASSED t.py::c\nx (y) ... ok")
	f.Fuzz(func(t *testing.T, log string) {
		for _, p := range logParsers {
			p(log)
		}
		readTestOutput(log)
		decodePrefix(log)
	})
}
