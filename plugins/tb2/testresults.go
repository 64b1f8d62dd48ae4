package main

import (
	"encoding/json"
	"encoding/xml"
	"regexp"
	"strings"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// Per-test results, for people reading a report: Terminal-Bench's tests
// write a CTRF report (pytest --ctrf /logs/verifier/ctrf.json); tasks that
// do not may leave a JUnit XML report in /logs/verifier, and pytest run
// with -rA prints a summary line per test. They never change the reward.

// maxTestMessage bounds one test's message.
const maxTestMessage = 2000

// parseCTRF reads a CTRF report's tests.
func parseCTRF(b []byte) []abi.TestResult {
	var doc struct {
		Results struct {
			Tests []struct {
				Name    string `json:"name"`
				Status  string `json:"status"`
				Message string `json:"message"`
				Trace   string `json:"trace"`
			} `json:"tests"`
		} `json:"results"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return nil
	}
	var out []abi.TestResult
	for _, t := range doc.Results.Tests {
		msg := t.Message
		if msg == "" {
			msg = tailString(t.Trace, 500)
		}
		out = append(out, abi.TestResult{Name: t.Name, Status: t.Status, Message: clip(msg, maxTestMessage)})
	}
	return out
}

// junitSuite is a <testsuites> or <testsuite> element; suites nest.
type junitSuite struct {
	Suites []junitSuite `xml:"testsuite"`
	Cases  []junitCase  `xml:"testcase"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Failure   *junitOutcome `xml:"failure"`
	Error     *junitOutcome `xml:"error"`
	Skipped   *junitOutcome `xml:"skipped"`
}

type junitOutcome struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func (o *junitOutcome) String() string {
	if o.Message != "" {
		return o.Message
	}
	return tailString(strings.TrimSpace(o.Text), 500)
}

// parseJUnit reads a JUnit XML report (pytest --junitxml, and most other
// test runners).
func parseJUnit(b []byte) []abi.TestResult {
	var root junitSuite
	if xml.Unmarshal(b, &root) != nil {
		return nil
	}
	var out []abi.TestResult
	var walk func(s junitSuite)
	walk = func(s junitSuite) {
		for _, c := range s.Cases {
			name := c.Name
			if c.Classname != "" {
				name = c.Classname + "::" + c.Name
			}
			t := abi.TestResult{Name: name, Status: "passed"}
			switch {
			case c.Error != nil:
				t.Status, t.Message = "error", c.Error.String()
			case c.Failure != nil:
				t.Status, t.Message = "failed", c.Failure.String()
			case c.Skipped != nil:
				t.Status, t.Message = "skipped", c.Skipped.String()
			}
			t.Message = clip(t.Message, maxTestMessage)
			out = append(out, t)
		}
		for _, sub := range s.Suites {
			walk(sub)
		}
	}
	walk(root)
	return out
}

var (
	ansiEscape   = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)
	pytestHeader = regexp.MustCompile(`^=+ short test summary info =+$`)
	pytestLine   = regexp.MustCompile(`^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$`)
)

// parsePytestSummary reads the "short test summary info" section pytest
// prints with -rA (the last one in the log): one line per test, "PASSED
// id", "FAILED id - message", "SKIPPED [n] path:line: reason".
func parsePytestSummary(log string) []abi.TestResult {
	lines := strings.Split(ansiEscape.ReplaceAllString(log, ""), "\n")
	start := -1
	for i, l := range lines {
		if pytestHeader.MatchString(strings.TrimRight(l, "\r")) {
			start = i + 1
		}
	}
	if start < 0 {
		return nil
	}
	var out []abi.TestResult
	for _, l := range lines[start:] {
		l = strings.TrimRight(l, "\r")
		if strings.HasPrefix(l, "=") {
			break
		}
		m := pytestLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		t := abi.TestResult{Name: m[2]}
		switch m[1] {
		case "PASSED":
			t.Status = "passed"
		case "XPASS":
			t.Status, t.Message = "passed", "xpass"
		case "FAILED", "ERROR", "XFAIL":
			t.Status = map[string]string{"FAILED": "failed", "ERROR": "error", "XFAIL": "skipped"}[m[1]]
			if id, msg, ok := strings.Cut(m[2], " - "); ok {
				t.Name, t.Message = id, msg
			}
			if m[1] == "XFAIL" {
				t.Message = strings.TrimSpace("xfail " + t.Message)
			}
		case "SKIPPED":
			t.Status = "skipped"
			rest := strings.TrimSpace(m[2])
			if strings.HasPrefix(rest, "[") {
				if _, after, ok := strings.Cut(rest, "] "); ok {
					rest = after
				}
			}
			// "path:line: reason"
			if i := strings.Index(rest, ": "); i > 0 {
				t.Name, t.Message = rest[:i], rest[i+2:]
			} else {
				t.Name = rest
			}
		}
		t.Message = clip(t.Message, maxTestMessage)
		out = append(out, t)
	}
	return out
}

// tailString keeps the last n bytes of s.
func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
