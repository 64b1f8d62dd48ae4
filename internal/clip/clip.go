// Package clip cuts text a plugin hands the host to a bound, marked, and
// never through a rune. It imports only the standard library, so the
// plugin runtime (host/plugin/wasm), which may import nothing of host,
// shares it with the environment adapter (host/env).
package clip

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text keeps the head of s up to max bytes and, when it cut, says how
// many bytes it cut: "head... [proctor: N bytes cut]". It never cuts a
// rune in two, and drops invalid UTF-8 from the head.
func Text(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.ToValidUTF8(s[:n], "") + fmt.Sprintf("... [proctor: %d bytes cut]", len(s)-n)
}
