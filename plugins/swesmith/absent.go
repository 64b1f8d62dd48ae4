package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// unreported are the listed tests the run did not report, in order.
func unreported(in Instance, status map[string]string) []string {
	var out []string
	for _, id := range in.tests() {
		if _, ok := status[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// absentTests are the ids among missing that the repository does not have
// even without the agent's changes: the row names tests that do not exist,
// a dataset error and not the agent's failure. The checkout is put back
// without the agent's changes (changed: there were some) and its tests
// collected: pytest --collect-only on the listed files, go test -list.
func absentTests(c Config, in Instance, missing []string, changed bool) ([]string, error) {
	cmd := "cd /testbed && "
	if changed {
		cmd += "git apply -R --binary /tmp/.proctor-agent.patch && "
	}
	goRows := isGo(in)
	if goRows {
		cmd += setupCmd(c) + "go test -count=1 " + c.GoTestFlags + " -list '.*' ./..."
	} else {
		cmd += strings.TrimPrefix(pytestCmd(c, in, "--collect-only -q "), "cd /testbed && ")
	}
	res, err := sdk.Exec(abi.ExecRequest{TimeoutMs: c.TestTimeout.ms(), MaxOutput: 4 << 20, Cmd: cmd})
	if err != nil {
		return nil, err
	}
	if res.TimedOut || res.Truncated {
		return nil, nil // no answer to trust: the tests stay missing
	}
	have := map[string]bool{}
	for _, l := range lines(res.Stdout) {
		have[strings.TrimRight(l, "\r")] = true
	}
	var absent []string
	for _, id := range missing {
		if !exists(id, have, goRows) {
			absent = append(absent, id)
		}
	}
	return absent, nil
}

// exists reports whether the collected names have the test id: a pytest
// node id as collected, or a module with a test in it; a Go test by its
// top-level name (go test -list names no subtests).
func exists(id string, have map[string]bool, goRows bool) bool {
	if goRows {
		top, _, _ := strings.Cut(id, "/")
		return have[top]
	}
	if have[id] {
		return true
	}
	if !strings.Contains(id, "::") {
		for name := range have {
			if strings.HasPrefix(name, id+"::") {
				return true
			}
		}
	}
	return false
}

// absentError is the dataset error of a row that names tests the
// repository does not have.
func absentError(in Instance, absent []string) error {
	groups := map[string]string{}
	for _, t := range in.grouped() {
		groups[t.id] = t.group
	}
	var named []string
	for _, id := range absent[:min(len(absent), 10)] {
		named = append(named, fmt.Sprintf("%q (%s)", id, groups[id]))
	}
	more := ""
	if len(absent) > len(named) {
		more = fmt.Sprintf(" and %d more", len(absent)-len(named))
	}
	noun := "a test"
	if len(absent) > 1 {
		noun = "tests"
	}
	return sdk.Errorf(abi.ClassDataset, "instance %s names %s the repository does not have, even without the agent's changes: %s%s; fix the row's FAIL_TO_PASS and PASS_TO_PASS",
		in.ID, noun, strings.Join(slices.Clip(named), ", "), more)
}
