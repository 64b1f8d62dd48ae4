package hermes

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/agent/pystr"
)

// redact is agent/redact.py's redact_sensitive_text, which hermes applies
// to terminal output, read_file content and search matches: known key
// prefixes, secret-named assignments and JSON fields, bearer headers,
// Telegram tokens, private keys, database passwords and phone numbers are
// masked. Go's regexp has no look-around or back-references, so the
// patterns that use them are matched by hand, with the same backtracking
// outcome.
func redact(s string) string {
	if s == "" {
		return s
	}
	s = redactPrefixes(s)
	s = redactEnv(s)
	s = jsonFieldRE.ReplaceAllStringFunc(s, func(m string) string {
		g := jsonFieldRE.FindStringSubmatch(m)
		return g[1] + `: "` + maskToken(g[2]) + `"`
	})
	s = authRE.ReplaceAllStringFunc(s, func(m string) string {
		g := authRE.FindStringSubmatch(m)
		return g[1] + maskToken(g[2])
	})
	s = telegramRE.ReplaceAllString(s, "${1}${2}:***")
	s = privateKeyRE.ReplaceAllString(s, "[REDACTED PRIVATE KEY]")
	s = dbRE.ReplaceAllString(s, "${1}***${3}")
	return redactPhones(s)
}

// maskToken keeps the first 6 and last 4 characters of long tokens.
func maskToken(t string) string {
	if pystr.Len(t) < 18 {
		return "***"
	}
	return pystr.Head(t, 6) + "..." + pystr.Tail(t, 4)
}

// pyWS is Python's \s in a str pattern, as a character class body.
const pyWS = `\t\n\v\f\r \x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}`

var (
	jsonFieldRE  = regexp.MustCompile(`(?i)("(?:api_?[Kk]ey|token|secret|password|access_token|refresh_token|auth_token|bearer|secret_value|raw_secret|secret_input|key_material)")[` + pyWS + `]*:[` + pyWS + `]*"([^"]+)"`)
	authRE       = regexp.MustCompile(`(?i)(Authorization:[` + pyWS + `]*Bearer[` + pyWS + `]+)([^` + pyWS + `]+)`)
	telegramRE   = regexp.MustCompile(`(bot)?(\p{Nd}{8,}):([-A-Za-z0-9_]{30,})`)
	privateKeyRE = regexp.MustCompile(`-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?-----END[A-Z ]*PRIVATE KEY-----`)
	dbRE         = regexp.MustCompile(`(?i)((?:postgres(?:ql)?|mysql|mongodb(?:\+srv)?|redis|amqp)://[^:]+:)([^@]+)(@)`)
)

// keyPattern is one alternative of the known-prefix pattern: a prefix
// (each element the bytes allowed at that place), then min..max bytes of
// class (max 0: unbounded).
type keyPattern struct {
	prefix   []string
	class    string
	min, max int
}

const (
	alnum   = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	tokenCh = alnum + "_-"
)

func lit(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

// keyPatterns are _PREFIX_PATTERNS, in their order.
var keyPatterns = []keyPattern{
	{lit("sk-"), tokenCh, 10, 0},
	{lit("ghp_"), alnum, 10, 0},
	{lit("github_pat_"), alnum + "_", 10, 0},
	{append(lit("xox"), "baprs", "-"), alnum + "-", 10, 0},
	{lit("AIza"), tokenCh, 30, 0},
	{lit("pplx-"), alnum, 10, 0},
	{lit("fal_"), tokenCh, 10, 0},
	{lit("fc-"), alnum, 10, 0},
	{lit("bb_live_"), tokenCh, 10, 0},
	{lit("gAAAA"), tokenCh + "=", 20, 0},
	{lit("AKIA"), "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 16, 16},
	{lit("sk_live_"), alnum, 10, 0},
	{lit("sk_test_"), alnum, 10, 0},
	{lit("rk_live_"), alnum, 10, 0},
	{lit("SG."), tokenCh, 10, 0},
	{lit("hf_"), alnum, 10, 0},
	{lit("r8_"), alnum, 10, 0},
	{lit("npm_"), alnum, 10, 0},
	{lit("pypi-"), tokenCh, 10, 0},
	{lit("dop_v1_"), alnum, 10, 0},
	{lit("doo_v1_"), alnum, 10, 0},
	{lit("am_"), tokenCh, 10, 0},
}

func inSet(set string, c byte) bool { return strings.IndexByte(set, c) >= 0 }

// matchKey is the length of a known-prefix token at s[i:], or 0: the first
// alternative that matches, its run as long as the look-ahead allows.
func matchKey(s string, i int) int {
	for _, p := range keyPatterns {
		j := i
		ok := true
		for _, set := range p.prefix {
			if j >= len(s) || !inSet(set, s[j]) {
				ok = false
				break
			}
			j++
		}
		if !ok {
			continue
		}
		run := 0
		for j+run < len(s) && inSet(p.class, s[j+run]) && (p.max == 0 || run < p.max) {
			run++
		}
		for n := run; n >= p.min; n-- {
			if e := j + n; e >= len(s) || !inSet(tokenCh, s[e]) {
				return e - i
			}
		}
	}
	return 0
}

func redactPrefixes(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if i > 0 && inSet(tokenCh, s[i-1]) {
			continue
		}
		if n := matchKey(s, i); n > 0 {
			b.WriteString(s[last:i])
			b.WriteString(maskToken(s[i : i+n]))
			i += n - 1
			last = i + 1
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// nameLetter is [A-Z_] under re.IGNORECASE.
func nameLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' }

var secretWords = []string{"APIKEY", "API_KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"}

func spaceAt(s string, i int) (bool, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	return pystr.IsSpace(r), n
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		sp, n := spaceAt(s, i)
		if !sp {
			break
		}
		i += n
	}
	return i
}

func skipNonSpace(s string, i int) int {
	for i < len(s) {
		sp, n := spaceAt(s, i)
		if sp {
			break
		}
		i += n
	}
	return i
}

// redactEnv is _ENV_ASSIGN_RE: NAME = value where NAME holds a secret-like
// word, the value optionally quoted (the quote must close inside the
// value's run of non-space characters, else it is part of the value).
func redactEnv(s string) string {
	var b strings.Builder
	last, i := 0, 0
	for i < len(s) {
		if !nameLetter(s[i]) {
			i++
			continue
		}
		p := i
		for i < len(s) && nameLetter(s[i]) {
			i++
		}
		name := s[p:i]
		if !containsAny(strings.ToUpper(name), secretWords) {
			continue
		}
		j := skipSpace(s, i)
		if j >= len(s) || s[j] != '=' {
			continue
		}
		v := skipSpace(s, j+1)
		if v >= len(s) {
			continue
		}
		quote, value, end := "", "", 0
		if q := s[v]; q == '\'' || q == '"' {
			r := skipNonSpace(s, v+1)
			if k := strings.LastIndexByte(s[v+1:r], q); k > 0 {
				quote, value, end = string(q), s[v+1:v+1+k], v+1+k+1
			}
		}
		if end == 0 {
			end = skipNonSpace(s, v)
			value = s[v:end]
		}
		b.WriteString(s[last:p])
		b.WriteString(name + "=" + quote + maskToken(value) + quote)
		last, i = end, end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// redactPhones is _SIGNAL_PHONE_RE: +, a digit 1-9, then 6 to 14 digits
// not followed by an ASCII letter or digit.
func redactPhones(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '+' || s[i+1] < '1' || s[i+1] > '9' {
			continue
		}
		// Offsets of the following digits.
		var ends []int
		j := i + 2
		for len(ends) < 14 && j < len(s) {
			r, n := utf8.DecodeRuneInString(s[j:])
			if !unicode.Is(unicode.Nd, r) {
				break
			}
			j += n
			ends = append(ends, j)
		}
		for k := len(ends); k >= 6; k-- {
			e := ends[k-1]
			if e < len(s) && inSet(alnum, s[e]) {
				continue
			}
			phone := s[i:e]
			masked := pystr.Head(phone, 4) + "****" + pystr.Tail(phone, 4)
			if pystr.Len(phone) <= 8 {
				masked = pystr.Head(phone, 2) + "****" + pystr.Tail(phone, 2)
			}
			b.WriteString(s[last:i])
			b.WriteString(masked)
			last = e
			i = e - 1
			break
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}
