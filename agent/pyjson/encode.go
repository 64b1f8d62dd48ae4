package pyjson

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
)

// Dumps is json.dumps(v) with the default separators (", " and ": ") and
// ensure_ascii as given. v holds nil, bool, int, int64, *big.Int, float64,
// string, []string, []any and *Object values; anything else panics, as a
// programming error.
func Dumps(v any, ensureASCII bool) string {
	var b strings.Builder
	st := jsonStyle
	if !ensureASCII {
		st = jsonUnicode
	}
	st.write(&b, v)
	return b.String()
}

// style is how a value is written: as JSON, or as Python's repr().
type style struct {
	none, yes, no string
	float         func(float64) string
	str           func(*strings.Builder, string)
}

var (
	jsonStyle   = style{"null", "true", "false", jsonFloat, func(b *strings.Builder, s string) { Quote(b, s, true) }}
	jsonUnicode = style{"null", "true", "false", jsonFloat, func(b *strings.Builder, s string) { Quote(b, s, false) }}
	reprStyle   = style{"None", "True", "False", FloatRepr, reprString}
)

// jsonFloat is how json.dumps writes a float (allow_nan=True).
func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return FloatRepr(f)
}

func (st style) write(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString(st.none)
	case bool:
		if x {
			b.WriteString(st.yes)
		} else {
			b.WriteString(st.no)
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		b.WriteString(st.float(x))
	case string:
		st.str(b, x)
	case []string:
		writeList(b, x, st.str)
	case []any:
		writeList(b, x, st.write)
	case *Object:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			st.str(b, k)
			b.WriteString(": ")
			st.write(b, x.vals[k])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("pyjson: cannot write %T", v))
	}
}

func writeList[T any](b *strings.Builder, l []T, w func(*strings.Builder, T)) {
	b.WriteByte('[')
	for i, e := range l {
		if i > 0 {
			b.WriteString(", ")
		}
		w(b, e)
	}
	b.WriteByte(']')
}

const hexdigits = "0123456789abcdef"

// Quote writes s as a JSON string the way json.dumps does: with
// ensureASCII every character outside ' '..'~' is escaped (astral ones as
// a surrogate pair); without, only '"', '\\' and control characters are.
// Nothing is HTML-escaped.
func Quote(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || ensureASCII && r > '~':
				if r >= 0x10000 {
					r -= 0x10000
					u4(b, 0xd800|(r>>10)&0x3ff)
					u4(b, 0xdc00|r&0x3ff)
				} else {
					u4(b, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func u4(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexdigits[r>>12&0xf])
	b.WriteByte(hexdigits[r>>8&0xf])
	b.WriteByte(hexdigits[r>>4&0xf])
	b.WriteByte(hexdigits[r&0xf])
}

// FloatRepr is Python's repr(float): the shortest digits that read back
// the same, in positional notation when the exponent is in [-4, 16), with
// at least one digit after the point, else as d.ddde±XX.
func FloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := strconv.Itoa(abs(exp))
		if len(es) < 2 {
			es = "0" + es
		}
		s := "+"
		if exp < 0 {
			s = "-"
		}
		return sign + m + "e" + s + es
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// Str is Python's str() of a decoded value: a string as it is, anything
// else as Repr.
func Str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return Repr(v)
}

// Repr is Python's repr() of a decoded value.
func Repr(v any) string {
	var b strings.Builder
	reprStyle.write(&b, v)
	return b.String()
}

// reprString is str.__repr__: single quotes unless the text has a single
// quote and no double quote.
func reprString(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// TypeName is type(v).__name__ of a decoded value.
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int, int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any, []string:
		return "list"
	case *Object:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// Truthy is Python's bool(v).
func Truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int:
		return x != 0
	case int64:
		return x != 0
	case *big.Int:
		return x.Sign() != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case []string:
		return len(x) > 0
	case *Object:
		return x.Len() > 0
	}
	return true
}
