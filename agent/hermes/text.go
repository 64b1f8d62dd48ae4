package hermes

import (
	"regexp"
	"strings"
)

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
