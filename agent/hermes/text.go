package hermes

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// isSpace is Python's str.isspace for one character (Go's unicode.IsSpace
// lacks the separators U+001C..U+001F).
func isSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyStrip is str.strip(); pyLStrip is str.lstrip().
func pyStrip(s string) string  { return strings.TrimFunc(s, isSpace) }
func pyLStrip(s string) string { return strings.TrimLeftFunc(s, isSpace) }

// lineBreak reports whether r ends a line for str.splitlines, and the
// length of the break at s[i:] (2 for \r\n).
func lineBreak(s string, i int) int {
	r, n := utf8.DecodeRuneInString(s[i:])
	switch r {
	case '\r':
		if i+1 < len(s) && s[i+1] == '\n' {
			return 2
		}
		return 1
	case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return n
	}
	return 0
}

// splitLines is str.splitlines(keepends).
func splitLines(s string, keepends bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		if n := lineBreak(s, i); n > 0 {
			if keepends {
				out = append(out, s[start:i+n])
			} else {
				out = append(out, s[start:i])
			}
			i += n
			start = i
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// runeLen is len() of a Python str.
func runeLen(s string) int { return utf8.RuneCountInString(s) }

// headRunes is s[:n] and tailRunes is s[-n:] of a Python str (n >= 0).
func headRunes(s string, n int) string {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return s[:i]
}

func tailRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := len(s)
	for k := 0; k < n && i > 0; k++ {
		_, w := utf8.DecodeLastRuneInString(s[:i])
		i -= w
	}
	return s[i:]
}

// shlexQuote is Python's shlex.quote.
func shlexQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_@%+=:,./-", c) >= 0) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// escapeArg is ShellFileOperations._escape_shell_arg: always quoted.
func escapeArg(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }

// ansiRE is the ECMA-48 escape pattern of tools/ansi_strip.py.
var ansiRE = regexp.MustCompile(`\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|\][\s\S]*?(?:\x07|\x1b\\)|[PX^_][\s\S]*?(?:\x1b\\)|[\x20-\x2f]+[\x30-\x7e]|[\x30-\x7e])|\x{9b}[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|\x{9d}[\s\S]*?(?:\x07|\x{9c})|[\x{80}-\x{9f}]`)

// stripANSI is tools/ansi_strip.py's strip_ansi.
func stripANSI(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == 0x1b || r >= 0x80 && r <= 0x9f }) {
		return s
	}
	return ansiRE.ReplaceAllString(s, "")
}
