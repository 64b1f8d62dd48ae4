package env

import (
	"fmt"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// An exec's output reaches the plugin as JSON strings, where a control
// byte or a byte that is not UTF-8 takes six bytes: 32 MiB of zeros would
// be 192 MiB of answer. fitExec cuts the output so the answer stays within
// abi.MaxExecResponse, keeping head and tail as the sandbox's own cut does.

// execSlack is room in the answer for its other fields and the markers.
const execSlack = 4 << 10

// fitExec cuts stdout and stderr so that, as JSON strings, they take at
// most abi.MaxExecResponse less execSlack together; cut says whether
// either was.
func fitExec(stdout, stderr string) (string, string, bool) {
	budget := abi.MaxExecResponse - execSlack
	co, ce := jsonCost(stdout), jsonCost(stderr)
	if co+ce <= budget {
		return stdout, stderr, false
	}
	switch {
	case ce <= budget/2:
		stdout = fitJSON(stdout, co, budget-ce)
	case co <= budget/2:
		stderr = fitJSON(stderr, ce, budget-co)
	default:
		stdout, stderr = fitJSON(stdout, co, budget/2), fitJSON(stderr, ce, budget/2)
	}
	return stdout, stderr, true
}

// fitJSON cuts s, whose JSON cost is cost, to at most budget bytes of JSON:
// its head and its tail around a line that says how many bytes were cut.
func fitJSON(s string, cost, budget int) string {
	if cost <= budget {
		return s
	}
	half := max(budget-200, 0) / 2
	head, n := 0, 0
	for head < len(s) {
		c, size := runeCost(s, head)
		if n+c > half {
			break
		}
		n, head = n+c, head+size
	}
	tail, n := len(s), 0
	for tail > head {
		r, size := utf8.DecodeLastRuneInString(s[:tail])
		c := runeCost1(r, size)
		if n+c > half {
			break
		}
		n, tail = n+c, tail-size
	}
	return s[:head] + fmt.Sprintf("\n…[proctor: %d bytes cut to fit the answer's %d MiB]…\n", tail-head, abi.MaxExecResponse>>20) + s[tail:]
}

// jsonCost is how many bytes encoding/json writes for s as a string, its
// quotes left out.
func jsonCost(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c, size := runeCost(s, i)
		n, i = n+c, i+size
	}
	return n
}

// runeCost is the JSON cost and the size of the rune at s[i:].
func runeCost(s string, i int) (cost, size int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiCost(c), 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	return runeCost1(r, size), size
}

// runeCost1 is the JSON cost of rune r, read from size bytes (RuneError
// from one byte: a byte that is not UTF-8, written as \ufffd).
func runeCost1(r rune, size int) int {
	switch {
	case r < utf8.RuneSelf:
		return asciiCost(byte(r))
	case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
		return 6
	}
	return size
}

// asciiCost is the JSON cost of an ASCII byte with encoding/json's HTML
// escaping.
func asciiCost(c byte) int {
	switch {
	case c == '"', c == '\\', c == '\n', c == '\r', c == '\t', c == '\b', c == '\f':
		return 2
	case c < 0x20, c == '<', c == '>', c == '&':
		return 6
	}
	return 1
}
