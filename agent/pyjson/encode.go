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
	dump(&b, v, ensureASCII)
	return b.String()
}

func dump(b *strings.Builder, v any, ascii bool) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(FloatRepr(x))
		}
	case string:
		Quote(b, x, ascii)
	case []string:
		b.WriteByte('[')
		for i, s := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			Quote(b, s, ascii)
		}
		b.WriteByte(']')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			dump(b, e, ascii)
		}
		b.WriteByte(']')
	case *Object:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			Quote(b, k, ascii)
			b.WriteString(": ")
			dump(b, x.vals[k], ascii)
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("pyjson: cannot encode %T", v))
	}
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
	repr(&b, v)
	return b.String()
}

func repr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		b.WriteString(FloatRepr(x))
	case string:
		reprString(b, x)
	case []string:
		b.WriteByte('[')
		for i, s := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			reprString(b, s)
		}
		b.WriteByte(']')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			repr(b, e)
		}
		b.WriteByte(']')
	case *Object:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			reprString(b, k)
			b.WriteString(": ")
			repr(b, x.vals[k])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("pyjson: no repr for %T", v))
	}
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
