package term

import (
	"strings"
	"testing"
	"unicode"
)

func TestEscapes(t *testing.T) {
	for _, tc := range []struct{ in, line, text, md string }{
		{"plain-id", "plain-id", "plain-id", "plain-id"},
		{"\x1b[2J\x1b]0;pwned\x07", `\x1b[2J\x1b]0;pwned\x07`, `\x1b[2J\x1b]0;pwned\x07`, `\\x1b\[2J\\x1b\]0;pwned\\x07`},
		{"two\nlines\tand\r", `two\x0alines\x09and\x0d`, "two\nlines\tand\\x0d", `two\\x0alines\\x09and\\x0d`},
		{"évil\u202etxt.exe\u200b", `évil\u202etxt.exe\u200b`, `évil\u202etxt.exe\u200b`, `évil\\u202etxt.exe\\u200b`},
		{"bad\xffutf8\u009b", `bad\xffutf8\u009b`, `bad\xffutf8\u009b`, `bad\\xffutf8\\u009b`},
		{"<script>alert(1)</script> | *x* [l](u) `c` a&b", "", "", `&lt;script&gt;alert(1)&lt;/script&gt; \| \*x\* \[l\](u) \` + "`c\\`" + ` a&amp;b`},
	} {
		if tc.line != "" && Line(tc.in) != tc.line {
			t.Errorf("Line(%q) = %q, want %q", tc.in, Line(tc.in), tc.line)
		}
		if tc.text != "" && Text(tc.in) != tc.text {
			t.Errorf("Text(%q) = %q, want %q", tc.in, Text(tc.in), tc.text)
		}
		if Markdown(tc.in) != tc.md {
			t.Errorf("Markdown(%q) = %q, want %q", tc.in, Markdown(tc.in), tc.md)
		}
	}
}

// FuzzLine: what Line returns holds no control or format character and no
// invalid UTF-8; Text keeps only newlines and tabs of them; Markdown holds
// no raw '<' or unescaped '|'.
func FuzzLine(f *testing.F) {
	for _, s := range []string{"\x1b[31mred", "a\u202eb", "\xff\xfe", "<b>|</b>", "\\|"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		check := func(name, out string, keep bool) {
			if !utf8Valid(out) {
				t.Fatalf("%s(%q) = %q: invalid UTF-8", name, s, out)
			}
			for _, r := range out {
				if keep && (r == '\n' || r == '\t') {
					continue
				}
				if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
					t.Fatalf("%s(%q) = %q holds %U", name, s, out, r)
				}
			}
		}
		check("Line", Line(s), false)
		check("Text", Text(s), true)
		md := Markdown(s)
		check("Markdown", md, false)
		if strings.Contains(md, "<") {
			t.Fatalf("Markdown(%q) = %q holds a '<'", s, md)
		}
		for i := 0; i < len(md); i++ {
			switch md[i] {
			case '\\':
				i++ // what follows is escaped
			case '|', '`', '*', '[':
				t.Fatalf("Markdown(%q) = %q: unescaped %q at %d", s, md, md[i], i)
			}
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
