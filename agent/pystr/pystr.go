// Package pystr does to Go strings what Python's str methods do to str, for
// the agents that reproduce Python programs byte for byte (hermes-agent's
// tools, Harbor's Terminus-2, mini-swe-agent): whitespace as str.isspace
// sees it, lines as str.splitlines cuts them, lengths, indices and slices
// in code points rather than bytes, and shlex.quote.
//
// A string that is not valid UTF-8 is read as Go reads it, each invalid
// byte one code point; callers hand these functions text that came through
// a decoder with Python's errors="replace" (pyjson.ValidUTF8).
package pystr

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// IsSpace is Python's str.isspace for one character (Go's unicode.IsSpace
// lacks the separators U+001C..U+001F).
func IsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// Strip is str.strip(), LStrip str.lstrip() and RStrip str.rstrip().
func Strip(s string) string  { return strings.TrimFunc(s, IsSpace) }
func LStrip(s string) string { return strings.TrimLeftFunc(s, IsSpace) }
func RStrip(s string) string { return strings.TrimRightFunc(s, IsSpace) }

// lineBreak is the length of the line break at s[i:] for str.splitlines
// (2 for \r\n), or 0.
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

// SplitLines is str.splitlines(keepends).
func SplitLines(s string, keepends bool) []string {
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

// Len is len() of a str: its code points.
func Len(s string) int { return utf8.RuneCountInString(s) }

// Head is s[:n] and Tail is s[-n:] of a str (n >= 0; Tail of 0 is "", as
// s[len(s):] rather than Python's s[-0:], which callers never mean).
func Head(s string, n int) string { return s[:Offset(s, n)] }

func Tail(s string, n int) string {
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

// Offset is the byte offset of code point index n of s (len(s) when s is
// shorter).
func Offset(s string, n int) int {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return i
}

// Index is str.find(sub) and LastIndex str.rfind(sub): code point indices,
// -1 when sub is absent.
func Index(s, sub string) int {
	i := strings.Index(s, sub)
	if i < 0 {
		return -1
	}
	return utf8.RuneCountInString(s[:i])
}

func LastIndex(s, sub string) int {
	i := strings.LastIndex(s, sub)
	if i < 0 {
		return -1
	}
	return utf8.RuneCountInString(s[:i])
}

// From is s[i:] for a code point index i >= 0.
func From(s string, i int) string { return s[Offset(s, i):] }

// Quote is Python's shlex.quote.
func Quote(s string) string {
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

// Space and Word are character classes for Go regular expressions that
// match what Python's \s and \w match in a str pattern (str.isspace, and
// letters, numbers and the underscore), where Go's own are ASCII only.
const (
	Space = `[\t\n\v\f\r \x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`
	Word  = `[\p{L}\p{N}_]`
)

// ParseFloat is Python's float(s) of a str: surrounding whitespace,
// a sign, "inf", "infinity" and "nan" in any case, underscores between
// digits, and decimal digits of any script. ok is false where Python
// raises ValueError. A value too large for a float is ±inf, as in Python.
func ParseFloat(s string) (f float64, ok bool) {
	s = Strip(s)
	var b strings.Builder
	for _, r := range s {
		if d := unicode.In(r, unicode.Nd); d && (r < '0' || r > '9') {
			r = '0' + rune(digitValue(r))
		}
		b.WriteRune(r)
	}
	t := b.String()
	body := strings.TrimLeft(t, "+-")
	if len(t)-len(body) > 1 {
		return 0, false
	}
	switch strings.ToLower(body) {
	case "inf", "infinity":
		return signed(math.Inf(1), t), true
	case "nan":
		return math.NaN(), true
	}
	if !floatSyntax.MatchString(body) {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return v, true
}

// floatSyntax is a decimal float without its sign: digits with single
// underscores between them, a point, an exponent.
var floatSyntax = regexp.MustCompile(`^(?:[0-9](?:_?[0-9])*(?:\.(?:[0-9](?:_?[0-9])*)?)?|\.[0-9](?:_?[0-9])*)(?:[eE][+-]?[0-9](?:_?[0-9])*)?$`)

func signed(f float64, s string) float64 {
	if strings.HasPrefix(s, "-") {
		return -f
	}
	return f
}

// digitValue is the value of a decimal digit of any script: Unicode lays
// out every script's digits in runs of ten from zero.
func digitValue(r rune) int {
	start := r
	for unicode.In(start-1, unicode.Nd) {
		start--
	}
	return int(r-start) % 10
}
