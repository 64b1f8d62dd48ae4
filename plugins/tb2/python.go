package main

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Harbor is Python: where it reads text (an instruction, a reward), these
// reproduce what the Python functions it calls do, so a file reads the
// same here and there.

// pyIsSpace is Python's str.isspace for one character: Go's unicode.IsSpace
// and the separators U+001C..U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyStrip is str.strip() without arguments.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pyText is Path.read_text(): the bytes as UTF-8 (ok is false when they are
// not, where Python raises UnicodeDecodeError), with universal newlines:
// "\r\n" and a lone "\r" read as "\n".
func pyText(b []byte) (s string, ok bool) {
	if !utf8.Valid(b) {
		return "", false
	}
	s = strings.ReplaceAll(string(b), "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n"), true
}

// pyDecimal is the syntax float() accepts for a finite number once the
// sign is off: digits with single underscores between them, a fraction,
// an exponent.
var pyDecimal = regexp.MustCompile(`^(([0-9](_?[0-9])*)(\.([0-9](_?[0-9])*)?)?|\.[0-9](_?[0-9])*)([eE][+-]?[0-9](_?[0-9])*)?$`)

// pyFloat is Python's float(str): surrounding whitespace is dropped, any Unicode decimal digit counts, underscores may
// separate digits, "inf", "infinity" and "nan" in any case are numbers, and
// a value too large is infinity rather than an error.
func pyFloat(s string) (float64, bool) {
	// As CPython's _PyUnicode_TransformDecimalAndSpaceToASCII: ASCII stays
	// (only " \t\n\v\f\r" are spaces there), other spaces become ' ',
	// other digits their ASCII digit, anything else makes it no number.
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case pyIsSpace(r):
			b.WriteByte(' ')
		case unicode.Is(unicode.Nd, r):
			b.WriteByte('0' + digitValue(r))
		default:
			return 0, false
		}
	}
	t := strings.Trim(b.String(), " \t\n\v\f\r")
	body := strings.TrimLeft(t, "+-")
	if len(t)-len(body) > 1 {
		return 0, false
	}
	switch strings.ToLower(body) {
	case "inf", "infinity":
		if t[0] == '-' {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "nan":
		return math.NaN(), true
	}
	if !pyDecimal.MatchString(body) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64)
	if err != nil && !isRange(err) {
		return 0, false
	}
	return f, true
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// digitValue is the value of a Unicode decimal digit: each run of Nd
// characters starts at a zero.
func digitValue(r rune) byte {
	for _, rg := range unicode.Nd.R16 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return byte((r - rune(rg.Lo)) % 10)
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return byte((r - rune(rg.Lo)) % 10)
		}
	}
	return 0
}
