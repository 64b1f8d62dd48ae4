package main

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Verify grades the agent's changes in a fresh sandbox: read them from the
// agent's checkout, reset, prepare the same bugged checkout with every test
// in place, apply them, run the tests and grade them as the config's
// grading says. The verdict says which grading it used: the first line of
// its output and a score named grading_<mode>.
func (e *env) Verify(r abi.VerifyRequest) (abi.VerifyResponse, error) {
	in, c, err := instance(r.RolloutRequest)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	v, err := e.verify(c, in)
	if err != nil {
		return v, err
	}
	v.Output = "grading: " + c.Grading + "\n" + v.Output
	v.Scores["grading_"+c.Grading] = 1
	return v, nil
}

func (e *env) verify(c Config, in Instance) (abi.VerifyResponse, error) {
	if e.base == "" {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "instance %s: setup did not run, so there is nothing to compare the agent's checkout with", in.ID)
	}
	g := Grading{Listed: listed(in), Bug: patchPaths(in.Patch), Top: e.top}
	for _, f := range e.hidden {
		g.Listed[path.Clean(f)] = true
	}
	ac, err := collectChanges(e.base, g)
	if errors.Is(err, errUnreadable) {
		return notGraded(in, err.Error()), nil
	}
	if err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "read the agent's changes: %v", err)
	}
	note := droppedNote(ac.Dropped)
	if c.Grading == gradingSwesmith && len(ac.Patch) == 0 {
		return notGraded(in, note+"no change to grade: SWE-smith's harness fails to apply an empty patch, so it resolves nothing"), nil
	}
	if err := sdk.ResetSandbox(); err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "start a fresh sandbox to grade in: %v", err)
	}
	if err := prepare(c, in, e.gradeRef, true); err != nil {
		return abi.VerifyResponse{}, err
	}
	if out, err := applyChanges(ac.Patch); err != nil {
		if errors.Is(err, errUnreadable) {
			return notGraded(in, note+err.Error()+":\n"+out), nil
		}
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "apply the agent's changes: %v", err)
	}
	if c.Grading == gradingSwesmith {
		v, err := runSwesmith(c, in)
		v.Output = note + v.Output
		return v, err
	}
	var t testRun
	if isGo(in) {
		t, err = runGoTests(c, in)
	} else {
		t, err = runPytest(c, in)
	}
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	switch {
	case t.timedOut:
		return notGraded(in, fmt.Sprintf("%sthe tests ran past %s (env.config.test_timeout):\n%s", note, c.TestTimeout.String(), t.output)), nil
	case t.broken != "":
		// The tests did not run. The agent's doing only if they run
		// without its changes.
		if len(ac.Patch) > 0 {
			ok, out, err := baseline(c, in)
			if err != nil {
				return abi.VerifyResponse{}, err
			}
			if ok {
				return notGraded(in, fmt.Sprintf("%sthe tests do not run with the agent's changes (%s):\n%s", note, t.broken, t.output)), nil
			}
			t.output = out
		}
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "instance %s: the tests do not run even without the agent's changes (%s): install or collection failed:\n%s", in.ID, t.broken, t.output)
	case t.mismatch != "":
		return notGraded(in, note+t.mismatch+":\n"+t.output), nil
	}
	if missing := unreported(in, t.status); len(missing) > 0 {
		// A listed test the run did not report: the agent's doing, unless
		// the repository never had it.
		absent, err := absentTests(c, in, missing, len(ac.Patch) > 0)
		if err != nil {
			return abi.VerifyResponse{}, err
		}
		if len(absent) > 0 {
			return abi.VerifyResponse{}, absentError(in, absent)
		}
	}
	v := Grade(in, t.status)
	v.Output = note + t.output
	return v, nil
}

func (d duration) String() string { return strconv.FormatFloat(d.seconds(), 'f', -1, 64) + "s" }

// notGraded is a failed verdict whose tests did not run, with why.
func notGraded(in Instance, why string) abi.VerifyResponse {
	v := Grade(in, nil)
	v.Output = why
	v.Scores["tests_ran"] = 0
	return v
}

// Grade applies the strict rule (SWE-bench's, and hermes-agent's, whose
// pytest run must pass): resolved only when every FAIL_TO_PASS and
// PASS_TO_PASS test passed; XFAIL counts as passed, a missing test as
// failed. A skipped test counts as failed too (SWE-smith leaves skips out,
// which lets a FAIL_TO_PASS test that was made to skip resolve an
// instance). Its scores say the tests ran (tests_ran 1).
func Grade(in Instance, got map[string]string) abi.VerifyResponse {
	v := abi.VerifyResponse{Scores: map[string]float64{"tests_ran": 1}}
	ok := true
	for _, t := range in.grouped() {
		st, found := got[t.id]
		switch {
		case !found:
			st = "missing"
		case st == "xfail":
			st = "passed"
		}
		if st != "passed" {
			ok = false
		}
		v.Tests = append(v.Tests, abi.TestResult{Name: t.id, Status: st, Message: t.group})
	}
	v.Passed = ok
	if ok {
		v.Reward = 1
	}
	return v
}

// testRun is what one run of the tests gave.
type testRun struct {
	status   map[string]string
	output   string
	timedOut bool
	broken   string // set when the tests did not run: why
	mismatch string // set when the report contradicts the exit code
}

// setupCmd is the config's test setup, to run before a test command.
func setupCmd(c Config) string {
	if s := strings.TrimSpace(*c.TestSetup); s != "" {
		return "{ " + s + "\n} && "
	}
	return ""
}

// pytestCmd runs pytest as the `pytest` command does: without the current
// folder first on sys.path, so a pytest.py in /testbed cannot stand in for
// pytest. The JUnit report (xunit1, which names each test's file) is the
// machine-readable result.
func pytestCmd(c Config, in Instance, extra string) string {
	return "cd /testbed && " + setupCmd(c) + `export PYTHONDONTWRITEBYTECODE=1 && rm -f /tmp/.proctor-junit.xml && ` +
		`py=$(command -v python3 || command -v python) && "$py" -c 'import sys; sys.path[0] == "" and sys.path.pop(0); import pytest; sys.exit(pytest.main(sys.argv[1:]))' ` +
		`-rA -p no:cacheprovider --rootdir=/testbed ` + extra + quoteAll(testFiles(in.tests()))
}

// runPytest runs the listed tests' files with a JUnit report, and checks
// the report against pytest's exit code: 0 means nothing failed, 1 that
// something did; anything else means the tests did not run.
func runPytest(c Config, in Instance) (testRun, error) {
	res, err := sdk.Exec(abi.ExecRequest{TimeoutMs: c.TestTimeout.ms(), MaxOutput: 256 << 10,
		Cmd: pytestCmd(c, in, "-o junit_family=xunit1 --junitxml=/tmp/.proctor-junit.xml ")})
	if err != nil {
		return testRun{}, err
	}
	t := testRun{output: tail(res.Stdout+res.Stderr, 4000), timedOut: res.TimedOut}
	if t.timedOut {
		return t, nil
	}
	xml, err := sdk.ReadFile("/tmp/.proctor-junit.xml")
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		t.broken = fmt.Sprintf("pytest exit %d, no report", res.ExitCode)
		return t, nil
	case err != nil:
		return t, err
	case res.ExitCode != 0 && res.ExitCode != 1:
		t.broken = fmt.Sprintf("pytest exit %d", res.ExitCode)
		return t, nil
	}
	r, err := ParseJUnit(xml)
	if err != nil {
		t.mismatch = "pytest's report cannot be read: " + err.Error()
		return t, nil
	}
	t.status = r.Status
	switch {
	case res.ExitCode == 0 && r.Failures > 0:
		t.mismatch = fmt.Sprintf("pytest exited 0 but its report has %d failures", r.Failures)
	case res.ExitCode == 1 && r.Failures == 0:
		t.mismatch = "pytest exited 1 but its report has no failure"
	}
	return t, nil
}

// runGoTests runs the listed Go tests in every package with -json events.
func runGoTests(c Config, in Instance) (testRun, error) {
	cmd := "cd /testbed && " + setupCmd(c) + "go test -json -count=1 " + c.GoTestFlags + " -run " + quote(goRunPattern(in.tests())) +
		" ./... > /tmp/.proctor-gotest.json 2>/tmp/.proctor-gotest.err; echo $?"
	res, err := sdk.Exec(abi.ExecRequest{TimeoutMs: c.TestTimeout.ms(), MaxOutput: 64 << 10, Cmd: cmd})
	if err != nil {
		return testRun{}, err
	}
	events, err := sdk.ReadFile("/tmp/.proctor-gotest.json")
	if err != nil && !errors.Is(err, sdk.ErrNotFound) {
		return testRun{}, err
	}
	stderr, _ := sdk.ReadFile("/tmp/.proctor-gotest.err")
	t := testRun{output: tail(string(stderr)+goOutput(events), 4000), timedOut: res.TimedOut}
	if t.timedOut {
		return t, nil
	}
	code := strings.TrimSpace(res.Stdout)
	r := ParseGoTestJSON(events)
	t.status = r.Status
	switch {
	case len(r.Status) == 0 && code != "0":
		t.broken = "go test exit " + code + ", no test ran"
	case code == "0" && r.Failures > 0:
		t.mismatch = fmt.Sprintf("go test exited 0 but reported %d failures", r.Failures)
	case code != "0" && r.Failures == 0:
		t.mismatch = "go test exited " + code + " but reported no failure"
	}
	return t, nil
}

// baseline reports whether the tests at least load on the checkout without
// the agent's changes: the agent's patch reversed, then collection only.
func baseline(c Config, in Instance) (bool, string, error) {
	cmd := "cd /testbed && git apply -R --binary /tmp/.proctor-agent.patch && "
	if isGo(in) {
		cmd += setupCmd(c) + "go test -count=1 " + c.GoTestFlags + " -run '^$' ./..."
	} else {
		cmd += strings.TrimPrefix(pytestCmd(c, in, "--collect-only -q "), "cd /testbed && ")
	}
	res, err := sdk.Exec(abi.ExecRequest{TimeoutMs: c.TestTimeout.ms(), MaxOutput: 64 << 10, Cmd: cmd})
	if err != nil {
		return false, "", err
	}
	return res.ExitCode == 0 && !res.TimedOut, tail(res.Stdout+res.Stderr, 4000), nil
}
