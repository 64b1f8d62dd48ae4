package main

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SWE-smith's log parsers, as its grading reads a test log: each turns the
// log into test name → status, with SWE-bench's status names (FAILED,
// PASSED, SKIPPED, ERROR, XFAIL). A later line overrides an earlier one
// for the same name. They are Python code matched against Python's
// definitions: \s and str.split() mean Python's whitespace (str.isspace,
// which adds U+001C..U+001F to Go's unicode.IsSpace), \d a Unicode decimal
// digit.
//
// They pin the behaviour of SWE-bench/SWE-smith swesmith/harness/log_parsers.py
// (MAP_REPO_TO_PARSER) at cf2e649, the harness before SWE-bench/SWE-smith#95.

// SWE-bench's test statuses, in the order of its TestStatus enum
// (swebench/harness/constants).
const (
	stFailed  = "FAILED"
	stPassed  = "PASSED"
	stSkipped = "SKIPPED"
	stError   = "ERROR"
	stXfail   = "XFAIL"
)

var testStatuses = []string{stFailed, stPassed, stSkipped, stError, stXfail}

// logParsers are the parsers by the name a profile gives (SWE-smith's
// function name without parse_log_).
var logParsers = map[string]func(string) map[string]string{
	"pytest":         parsePytest,
	"gotest":         parseGotest,
	"mypy":           parseMypy,
	"python_slugify": parseSlugify,
	"tornado":        parseTornado,
	"paramiko":       parseParamiko,
	"autograd":       parseAutograd,
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyFields is Python's str.split() without arguments.
func pyFields(s string) []string { return strings.FieldsFunc(s, pyIsSpace) }

// pyStrip is Python's str.strip() without arguments.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// leadingToken splits a line as the pattern ^(\S+)(\s+) does: the first
// run of non-space characters and what follows the run of spaces after
// it. ok is false when the line starts with a space or has no space.
func leadingToken(line string) (token, rest string, ok bool) {
	i := strings.IndexFunc(line, pyIsSpace)
	if i <= 0 {
		return "", "", false
	}
	j := strings.IndexFunc(line[i:], func(r rune) bool { return !pyIsSpace(r) })
	if j < 0 {
		return line[:i], "", true
	}
	return line[:i], line[i+j:], true
}

// parsePytest is parse_log_pytest: a line "<name> <STATUS>..." (pytest
// -v) records name with the status its second field starts with.
func parsePytest(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		name, rest, ok := leadingToken(line)
		if !ok {
			continue
		}
		for _, st := range testStatuses {
			if strings.HasPrefix(rest, st) {
				sm[name] = st
			}
		}
	}
	return sm
}

// goResult is parse_log_gotest's pattern, matched on the stripped line.
var goResult = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (.+) \((.+)\)$`)

// parseGotest is parse_log_gotest: `go test -v` result lines, subtests
// included.
func parseGotest(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := goResult.FindStringSubmatch(pyStrip(line))
		if m == nil {
			continue
		}
		switch m[1] {
		case "PASS":
			sm[m[2]] = stPassed
		case "FAIL":
			sm[m[2]] = stFailed
		case "SKIP":
			sm[m[2]] = stSkipped
		}
	}
	return sm
}

// parseMypy is parse_log_mypy: a line that contains PASSED (else FAILED)
// anywhere records its last field.
func parseMypy(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		for _, st := range []string{stPassed, stFailed} {
			if strings.Contains(line, st) {
				f := pyFields(line)
				sm[f[len(f)-1]] = st
				break
			}
		}
	}
	return sm
}

// pySpaceClass is Python's \s as a character class.
const pySpaceClass = `\t\n\v\f\r \x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}`

// slugifyName is parse_log_python_slugify's test description, followed by
// " ... ", with Python's \s spelt out.
const slugifyName = `^([a-zA-Z0-9_\-,\.` + pySpaceClass + `\(\)']+)[` + pySpaceClass + `]\.{3}[` + pySpaceClass + `]`

var slugifyResults = []struct {
	re     *regexp.Regexp
	status string
}{
	{regexp.MustCompile(slugifyName + `ok$`), stPassed},
	{regexp.MustCompile(slugifyName + `FAIL$`), stFailed},
	{regexp.MustCompile(slugifyName + `ERROR$`), stError},
}

// parseSlugify is parse_log_python_slugify: unittest's verbose lines
// "<description> ... ok|FAIL|ERROR".
func parseSlugify(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		for _, r := range slugifyResults {
			if m := r.re.FindStringSubmatch(line); m != nil {
				sm[m[1]] = r.status
			}
		}
	}
	return sm
}

// parseTornado is parse_log_tornado: unittest's verbose output. A line
// ending "... ok" passes the text before " ... ", one with " ... skipped "
// skips it, and a summary line "FAIL: name (id)" or "ERROR: name (id)"
// fails its second and third fields: "test_x (module.Class)", the id
// unittest prints.
func parseTornado(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.HasSuffix(line, "... ok"):
			name, _, _ := strings.Cut(line, " ... ")
			sm[name] = stPassed
		case strings.Contains(line, " ... skipped "):
			name, _, _ := strings.Cut(line, " ... ")
			sm[name] = stSkipped
		case strings.HasPrefix(line, "ERROR:"), strings.HasPrefix(line, "FAIL:"):
			f := pyFields(line)
			sm[strings.Join(f[min(1, len(f)):min(3, len(f))], " ")] = stFailed
		}
	}
	return sm
}

// parseParamiko is parse_log_paramiko: pytest's -rA summary lines
// "<STATUS> <name>".
func parseParamiko(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		for _, st := range testStatuses {
			if name, ok := afterStatus(line, st); ok {
				sm[name] = st
			}
		}
	}
	return sm
}

// parseAutograd is parse_log_autograd: pytest-xdist's lines
// "[gwN] <STATUS> <name>", N one decimal digit.
func parseAutograd(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		rest, ok := strings.CutPrefix(line, "[gw")
		if !ok {
			continue
		}
		d, n := utf8.DecodeRuneInString(rest)
		if !unicode.IsDigit(d) || !strings.HasPrefix(rest[n:], "]") {
			continue
		}
		rest = rest[n+1:]
		sp, n := utf8.DecodeRuneInString(rest)
		if !pyIsSpace(sp) {
			continue
		}
		for _, st := range testStatuses {
			if name, ok := afterStatus(rest[n:], st); ok {
				sm[name] = st
			}
		}
	}
	return sm
}

// afterStatus matches ^STATUS\s(\S+): the status, one space character,
// then the name up to the next space.
func afterStatus(line, status string) (string, bool) {
	rest, ok := strings.CutPrefix(line, status)
	if !ok {
		return "", false
	}
	sp, n := utf8.DecodeRuneInString(rest)
	if n == 0 || !pyIsSpace(sp) {
		return "", false
	}
	rest = rest[n:]
	if end := strings.IndexFunc(rest, pyIsSpace); end >= 0 {
		rest = rest[:end]
	}
	return rest, rest != ""
}
