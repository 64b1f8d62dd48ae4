// Package term makes text that plugins, datasets, agents and model
// endpoints wrote safe to show: task ids, error messages, categories and
// reasons reach the user's terminal and the reports proctor writes.
//
// On a terminal an escape sequence can move the cursor, rewrite earlier
// lines, set the window's title or worse; a bidirectional override can
// make a line read other than it is. Line and Text write every control and
// format character as a visible escape (\x1b, \u202e) and invalid UTF-8 as
// its bytes (\xff); Markdown also neutralises markup, so a task id cannot
// add a <script> or break a table.
package term

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line is s for one line of a terminal or a table: every control
// character (newlines and tabs too) and format character escaped.
func Line(s string) string { return escape(s, false) }

// Text is s for a terminal, kept on its lines: newlines and tabs stay,
// every other control or format character is escaped.
func Text(s string) string { return escape(s, true) }

// Markdown is s for a cell of a Markdown table: Line, then '&', '<' and
// '>' as HTML entities, and what Markdown reads inside a line (emphasis,
// code, links, strikethrough, the backslash) and '|', which ends a cell,
// escaped with a backslash.
func Markdown(s string) string {
	var b strings.Builder
	for _, r := range Line(s) {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\\', '|', '`', '*', '_', '[', ']', '~':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func escape(s string, keepLines bool) string {
	if safe(s, keepLines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// safe reports whether s needs no escape, the common case.
func safe(s string, keepLines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return false // checked rune by rune
		}
		if (c < 0x20 || c == 0x7f) && !(keepLines && (c == '\n' || c == '\t')) {
			return false
		}
	}
	return true
}
