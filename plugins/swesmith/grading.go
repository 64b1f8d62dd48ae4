package main

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Grading modes. Strict is SWE-bench's rule (and hermes-agent's): every
// listed test runs and must pass, a missing one fails. Swesmith is
// SWE-smith's own harness as it graded before SWE-bench/SWE-smith#95: the
// repository's test command, its log parser, and a test that is not in
// the log counts as passed.
const (
	gradingStrict   = "strict"
	gradingSwesmith = "swesmith"
)

// The markers of SWE-smith's eval script and SWE-bench's log markers that
// make a log unreadable to its grading (swebench/harness/constants).
const (
	outputStart    = ">>>>> Start Test Output"
	outputEnd      = ">>>>> End Test Output"
	applyPatchFail = ">>>>> Patch Apply Failed"
	testsTimedOut  = ">>>>> Tests Timed Out"
)

// maxTestLog caps the test log grading reads.
const maxTestLog = 16 << 20

// evalScript is SWE-smith's eval.sh around a test command: traced (set
// -x), so the two marker commands print the lines its grading looks for,
// after the test setup (by default the conda env "testbed", as SWE-smith
// activates it). It follows SWE-bench/SWE-smith swesmith/harness/utils.py
// run_patch_in_container at cf2e649.
func evalScript(c Config, cmd string) string {
	setup := strings.TrimSpace(*c.TestSetup)
	if setup != "" {
		setup += "\n"
	}
	return "PS4='+ '\nset -uxo pipefail\ncd /testbed\n" + setup +
		": '" + outputStart + "'\n" + cmd + "\n: '" + outputEnd + "'\n"
}

// readTestOutput is SWE-smith's read_test_output on the log of the eval
// script: the text between the traced start and end markers, or found
// false when its grading cannot read the log (then nothing is resolved),
// with why. Python reads the log file with universal newlines, so \r\n
// and \r end lines too. It pins the behaviour of SWE-bench/SWE-smith
// swesmith/harness/grading.py read_test_output at cf2e649, Python's
// slicing of a str included.
func readTestOutput(log string) (region string, found bool, why string) {
	log = strings.ReplaceAll(strings.ReplaceAll(log, "\r\n", "\n"), "\r", "\n")
	switch {
	case strings.Contains(log, applyPatchFail):
		return "", false, fmt.Sprintf("the log holds %q, which SWE-smith's grading takes for a patch that did not apply", applyPatchFail)
	case strings.Contains(log, testsTimedOut):
		return "", false, fmt.Sprintf("the log holds %q, which SWE-smith's grading takes for tests that timed out", testsTimedOut)
	case !strings.Contains(log, outputStart) || !strings.Contains(log, outputEnd):
		return log, false, "the log lacks the start or the end marker of SWE-smith's eval script"
	}
	startSep, endSep := "+ : '"+outputStart+"'", "+ : '"+outputEnd+"'"
	si, ei := strings.Index(log, startSep), strings.Index(log, endSep)
	if si > ei {
		return "", false, "the end marker comes before the start marker (SWE-smith's grading raises an error)"
	}
	// Python's s[si:ei] where -1 stands for the last character.
	last := len(log)
	if _, n := utf8.DecodeLastRuneInString(log); n > 0 {
		last -= n
	}
	if si < 0 {
		si = last
	}
	if ei < 0 {
		ei = last
	}
	if si >= ei {
		return "", true, ""
	}
	region = log[si:ei]
	for range len(startSep) {
		_, n := utf8.DecodeRuneInString(region)
		region = region[n:]
	}
	return region, true, ""
}

// GradeSwesmith applies SWE-smith's rule to a status map from its log
// parser. Only the tests in files are graded, when files names any (the
// FAIL_TO_PASS files its pytest command ran; a test outside them counts
// for nothing and shows as not_run). A graded test passes when the log
// does not mention it or says PASSED or XFAIL, and fails when it says
// FAILED or ERROR; a SKIPPED one is left out of both. Resolved when no
// graded test failed. It pins the behaviour of SWE-bench/SWE-smith
// swesmith/harness/grading.py (get_eval_report, get_eval_tests_report's
// test_passed and test_failed) and swebench/harness/grading.py
// get_resolution_status.
func GradeSwesmith(in Instance, sm map[string]string, files []string) abi.VerifyResponse {
	v := abi.VerifyResponse{Passed: true, Scores: map[string]float64{"tests_ran": 1}}
	for _, t := range in.grouped() {
		st, ok := sm[t.id]
		status := strings.ToLower(st)
		switch {
		case len(files) > 0 && !slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(t.id, f) }):
			status = "not_run"
		case !ok:
			status = "missing"
		case st == stFailed, st == stError:
			v.Passed = false
		}
		v.Tests = append(v.Tests, abi.TestResult{Name: t.id, Status: status, Message: t.group})
	}
	if v.Passed {
		v.Reward = 1
	}
	return v
}

// runSwesmith runs the instance's tests as SWE-smith's harness does, in
// the prepared grading sandbox, and grades its log. The log comes back
// through a pipe, base64-encoded so its bytes arrive as they are, and
// capped; no file the tests could swap for something else.
func runSwesmith(c Config, in Instance) (abi.VerifyResponse, error) {
	p, source := profileFor(c, in)
	cmd, files := testCommand(p, in)
	head := fmt.Sprintf("profile: %s, log parser %s\ntest command: %s\n", source, p.LogParser, cmd)
	res, err := sdk.Exec(abi.ExecRequest{TimeoutMs: c.TestTimeout.ms(), MaxOutput: base64.StdEncoding.EncodedLen(maxTestLog+1) + 64,
		Cmd: fmt.Sprintf("bash -c %s 2>&1 | head -c %d | base64 -w0", quote(evalScript(c, cmd)), maxTestLog+1)})
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	log := decodePrefix(res.Stdout)
	switch {
	case res.TimedOut:
		return notGraded(in, fmt.Sprintf("%sthe tests ran past %s, which SWE-smith's harness does not resolve:\n%s", head, c.TestTimeout,
			strings.ToValidUTF8(tail(string(log), 4000), "\uFFFD"))), nil
	case res.ExitCode != 0 || res.Truncated:
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "instance %s: the test log could not be read back (%s): %s", in.ID, outcome(res), tail(res.Stderr, 1000))
	case len(log) > maxTestLog:
		return notGraded(in, fmt.Sprintf("%sthe test log is over the %d MiB grading reads", head, maxTestLog>>20)), nil
	case !utf8.Valid(log):
		return notGraded(in, head+"the test log is not valid UTF-8, which SWE-smith's harness fails to decode (not resolved):\n"+
			strings.ToValidUTF8(tail(string(log), 4000), "\uFFFD")), nil
	}
	region, found, why := readTestOutput(string(log))
	if !found {
		return notGraded(in, head+why+":\n"+tail(string(log), 4000)), nil
	}
	sm := logParsers[p.LogParser](region)
	v := GradeSwesmith(in, sm, files)
	v.Output = head + fmt.Sprintf("%d test results in the log; a listed test the log does not mention counts as passed, a skipped one is left out", len(sm))
	if len(files) > 0 {
		v.Output += ", one outside the FAIL_TO_PASS files is not run"
	}
	v.Output += ":\n" + tail(region, 4000)
	return v, nil
}

// decodePrefix decodes base64 text as far as it forms whole groups: a
// command cut short can leave a partial last group, or a whole one that
// is not the end. Anything else decodes to nothing.
func decodePrefix(s string) []byte {
	n := len(strings.TrimSpace(s)) / 4 * 4
	for _, end := range []int{n, n - 4} {
		if end < 0 {
			break
		}
		if b, err := base64.StdEncoding.DecodeString(s[:end]); err == nil {
			return b
		}
	}
	return nil
}

// pytestID reports whether a test id is a pytest node id
// ("path/test_x.py::Class::test_y[param]") or a test file.
func pytestID(id string) bool { return strings.Contains(id, "::") || strings.HasSuffix(id, ".py") }

// gradable says why the config's grading cannot grade an instance, or nil.
// Strict runs pytest or `go test` and finds tests by their ids; swesmith
// runs the repository's profile, and its default one is pytest's.
func gradable(c Config, in Instance) error {
	if isGo(in) {
		if c.Grading == gradingSwesmith && !hasProfile(c, repoKey(in)) {
			return fmt.Errorf("grading %q: SWE-smith has no profile for %s, whose tests are Go test names: give it one in env.config.profiles.%q (test_cmd \"go test -v ./...\", log_parser \"gotest\")",
				c.Grading, repoKey(in), repoKey(in))
		}
		return nil
	}
	i := slices.IndexFunc(in.tests(), func(id string) bool { return !pytestID(id) })
	switch {
	case i < 0:
		return nil
	case c.Grading == gradingStrict:
		return fmt.Errorf("test %q is neither a pytest node id (path/test_x.py::test_y) nor a Go test name, which grading \"strict\" runs: "+
			"grading = \"swesmith\" runs the repository's own test command and reads its log (its profile: SWE-smith's, or one in env.config.profiles)", in.tests()[i])
	case !hasProfile(c, repoKey(in)):
		return fmt.Errorf("grading %q: SWE-smith has no profile for %s, and its default (pytest) cannot select a test named %q: give it one in env.config.profiles.%q (test_cmd and log_parser)",
			c.Grading, repoKey(in), in.tests()[i], repoKey(in))
	}
	return nil
}

// warnUnparsable warns, under the swesmith grading with SWE-smith's pytest
// parser, of a listed test whose id holds a space (a parameter such as
// test_x[a b]): parse_log_pytest takes a test's name up to its first
// space (the pattern ^(\S+)(\s+)STATUS of swesmith/harness/log_parsers.py
// at cf2e649), so the log never names it, and SWE-smith counts a test the
// log does not name as passed. The strict grading reads such ids from
// pytest's JUnit report.
func warnUnparsable(c Config, in Instance) {
	if c.Grading != gradingSwesmith {
		return
	}
	if p, _ := profileFor(c, in); p.LogParser != "pytest" {
		return
	}
	for _, id := range in.tests() {
		if strings.IndexFunc(id, pyIsSpace) >= 0 {
			sdk.Log(sdk.LevelWarn, fmt.Sprintf("instance %s: test %q holds a space, which SWE-smith's pytest log parser never reads: the swesmith grading counts it as missing, which passes it, as SWE-smith's harness does; grading = \"strict\" reads it", in.ID, id))
		}
	}
}
