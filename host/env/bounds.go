package env

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/internal/clip"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// The host's bounds on what a plugin hands it (abi.Max*): a number of
// things a record or a run keeps over its bound is the plugin's error; a
// text over its bound is cut, and says so.

// checkPrompt refuses a prompt over abi.MaxPrompt.
func checkPrompt(system, user string) error {
	for _, p := range []struct{ what, s string }{{"system", system}, {"user", user}} {
		if len(p.s) > abi.MaxPrompt {
			return fmt.Errorf("the %s prompt is %s, over the %s a prompt may be (abi.MaxPrompt)", p.what, size(len(p.s)), size(abi.MaxPrompt))
		}
	}
	return nil
}

// checkScores refuses more named scores than abi.MaxScores, a name over
// abi.MaxScoreName, and a score outside ±MaxReward.
func checkScores(scores map[string]float64) error {
	if len(scores) > abi.MaxScores {
		return fmt.Errorf("%d named scores, over the %d a verdict may hold (abi.MaxScores)", len(scores), abi.MaxScores)
	}
	for _, k := range slices.Sorted(maps.Keys(scores)) {
		if len(k) > abi.MaxScoreName {
			return fmt.Errorf("a score's name is %d bytes (%.40q...), over the %d a name may be (abi.MaxScoreName)", len(k), k, abi.MaxScoreName)
		}
		if !inRange(scores[k]) {
			return fmt.Errorf("score %q is %g, outside the range a score may take, finite and within ±%g", k, scores[k], float64(MaxReward))
		}
	}
	return nil
}

// checkTests refuses more tests than abi.MaxTests and names over
// abi.MaxTestName or, together, abi.MaxTestNames; it cuts each message to
// abi.MaxTestMessage and all of them to abi.MaxTestMessages.
func checkTests(tests []abi.TestResult) error {
	if len(tests) > abi.MaxTests {
		return fmt.Errorf("%d tests, over the %d a verdict may list (abi.MaxTests)", len(tests), abi.MaxTests)
	}
	names := 0
	for _, t := range tests {
		if len(t.Name) > abi.MaxTestName {
			return fmt.Errorf("a test's name is %s (%.40q...), over the %s a name may be (abi.MaxTestName)", size(len(t.Name)), t.Name, size(abi.MaxTestName))
		}
		names += len(t.Name) + len(t.Status)
	}
	if names > abi.MaxTestNames {
		return fmt.Errorf("the tests' names are %s together, over the %s a verdict may list (abi.MaxTestNames)", size(names), size(abi.MaxTestNames))
	}
	left := abi.MaxTestMessages
	for i := range tests {
		m := tests[i].Message
		keep := min(len(m), abi.MaxTestMessage, left)
		if keep < len(m) {
			tests[i].Message = clip.Text(m, keep)
		}
		left -= keep
	}
	return nil
}

// size is n bytes in words: "12 bytes", "3 KiB", "1.5 MiB".
func size(n int) string {
	switch {
	case n >= 1<<20:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<20)), ".0") + " MiB"
	case n >= 1<<10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<10)), ".0") + " KiB"
	}
	return fmt.Sprintf("%d bytes", n)
}
