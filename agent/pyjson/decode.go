// Package pyjson reads and writes JSON the way CPython's json module does,
// so that what a model receives from proctor's tools matches, byte for byte,
// what it receives from tools written in Python: json.loads' error messages
// (with their line, column and character positions), json.dumps' spacing
// and escaping, and Python's str() and repr() of the decoded values.
//
// Decoded values are Go values: nil (None), bool, *big.Int (int), float64,
// string, []any (list) and *Object (dict, keys in document order).
package pyjson

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects Decode accepts. CPython
// stops near its recursion limit (1000) with a RecursionError.
const MaxDepth = 1000

// SyntaxError is json.JSONDecodeError: Msg at character Pos (a code point
// index) of the document.
type SyntaxError struct {
	Msg    string
	Pos    int
	Line   int
	Column int
}

// Error is Python's str(JSONDecodeError).
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s: line %d column %d (char %d)", e.Msg, e.Line, e.Column, e.Pos)
}

// DepthError is CPython's RecursionError for a document nested too deeply.
type DepthError struct{ Object bool }

func (e *DepthError) Error() string {
	what := "array"
	if e.Object {
		what = "object"
	}
	return "maximum recursion depth exceeded while decoding a JSON " + what + " from a unicode string"
}

// Object is a JSON object (a Python dict): its keys in insertion order. A
// repeated key keeps its first position and its last value, as in Python.
type Object struct {
	keys []string
	vals map[string]any
}

// NewObject returns an empty object.
func NewObject() *Object { return &Object{vals: map[string]any{}} }

// Set sets key k to v, appending k when it is new.
func (o *Object) Set(k string, v any) *Object {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
	return o
}

// Get returns the value of k.
func (o *Object) Get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// Keys returns the keys in order.
func (o *Object) Keys() []string { return o.keys }

// Len is the number of keys.
func (o *Object) Len() int { return len(o.keys) }

// Decode is json.loads of a str.
func Decode(s string) (any, error) {
	d := decoder{s: []rune(s)}
	if len(d.s) > 0 && d.s[0] == '\ufeff' {
		return nil, d.err("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0)
	}
	i := d.ws(0)
	v, end, err := d.value(i, 0)
	if err != nil {
		if st, ok := err.(stopIteration); ok {
			return nil, d.err("Expecting value", int(st))
		}
		return nil, err
	}
	end = d.ws(end)
	if end != len(d.s) {
		return nil, d.err("Extra data", end)
	}
	return v, nil
}

type decoder struct{ s []rune }

// stopIteration is the scanner's StopIteration(idx): no value starts at idx.
type stopIteration int

func (stopIteration) Error() string { return "stop iteration" }

func (d *decoder) err(msg string, pos int) *SyntaxError {
	line := 1
	last := -1
	for i := 0; i < pos && i < len(d.s); i++ {
		if d.s[i] == '\n' {
			line++
			last = i
		}
	}
	return &SyntaxError{Msg: msg, Pos: pos, Line: line, Column: pos - last}
}

func isWS(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

func (d *decoder) ws(i int) int {
	for i < len(d.s) && isWS(d.s[i]) {
		i++
	}
	return i
}

func (d *decoder) lit(i int, w string) bool {
	if i+len(w) > len(d.s) {
		return false
	}
	for k, c := range w {
		if d.s[i+k] != c {
			return false
		}
	}
	return true
}

// value is scan_once: one term at i.
func (d *decoder) value(i, depth int) (any, int, error) {
	if i >= len(d.s) {
		return nil, 0, stopIteration(i)
	}
	switch d.s[i] {
	case '"':
		return d.str(i + 1)
	case '{':
		if depth >= MaxDepth {
			return nil, 0, &DepthError{Object: true}
		}
		return d.object(i+1, depth+1)
	case '[':
		if depth >= MaxDepth {
			return nil, 0, &DepthError{}
		}
		return d.array(i+1, depth+1)
	case 'n':
		if d.lit(i, "null") {
			return nil, i + 4, nil
		}
	case 't':
		if d.lit(i, "true") {
			return true, i + 4, nil
		}
	case 'f':
		if d.lit(i, "false") {
			return false, i + 5, nil
		}
	case 'N':
		if d.lit(i, "NaN") {
			return math.NaN(), i + 3, nil
		}
	case 'I':
		if d.lit(i, "Infinity") {
			return math.Inf(1), i + 8, nil
		}
	case '-':
		if d.lit(i, "-Infinity") {
			return math.Inf(-1), i + 9, nil
		}
	}
	return d.number(i)
}

func digit(r rune) bool { return r >= '0' && r <= '9' }

// number is _match_number_unicode.
func (d *decoder) number(start int) (any, int, error) {
	s, end := d.s, len(d.s)-1
	i := start
	if s[i] == '-' {
		i++
		if i > end {
			return nil, 0, stopIteration(start)
		}
	}
	switch {
	case s[i] >= '1' && s[i] <= '9':
		i++
		for i <= end && digit(s[i]) {
			i++
		}
	case s[i] == '0':
		i++
	default:
		return nil, 0, stopIteration(start)
	}
	float := false
	if i < end && s[i] == '.' && digit(s[i+1]) {
		float = true
		i += 2
		for i <= end && digit(s[i]) {
			i++
		}
	}
	if i < end && (s[i] == 'e' || s[i] == 'E') {
		e := i
		i++
		if i < end && (s[i] == '-' || s[i] == '+') {
			i++
		}
		for i <= end && digit(s[i]) {
			i++
		}
		if digit(s[i-1]) {
			float = true
		} else {
			i = e
		}
	}
	text := string(s[start:i])
	if float {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !isRange(err) {
			return nil, 0, err
		}
		return f, i, nil
	}
	n, _ := new(big.Int).SetString(text, 10)
	return n, i, nil
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func hexval(r rune) (rune, bool) {
	switch {
	case r >= '0' && r <= '9':
		return r - '0', true
	case r >= 'a' && r <= 'f':
		return r - 'a' + 10, true
	case r >= 'A' && r <= 'F':
		return r - 'A' + 10, true
	}
	return 0, false
}

// str is scanstring_unicode: end is the index after the opening quote.
func (d *decoder) str(end int) (any, int, error) {
	s, n := d.s, len(d.s)
	begin := end - 1
	var b strings.Builder
	for {
		next := end
		var c rune
		for ; next < n; next++ {
			c = s[next]
			if c == '"' || c == '\\' {
				break
			}
			if c <= 0x1f {
				return nil, 0, d.err("Invalid control character at", next)
			}
		}
		if next == n || (c != '"' && c != '\\') {
			return nil, 0, d.err("Unterminated string starting at", begin)
		}
		b.WriteString(string(s[end:next]))
		next++
		if c == '"' {
			return b.String(), next, nil
		}
		if next == n {
			return nil, 0, d.err("Unterminated string starting at", begin)
		}
		c = s[next]
		if c != 'u' {
			end = next + 1
			switch c {
			case '"', '\\', '/':
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			default:
				return nil, 0, d.err(`Invalid \escape`, end-2)
			}
			b.WriteRune(c)
			continue
		}
		next++
		end = next + 4
		if end >= n {
			return nil, 0, d.err(`Invalid \uXXXX escape`, next-1)
		}
		c = 0
		for ; next < end; next++ {
			h, ok := hexval(s[next])
			if !ok {
				return nil, 0, d.err(`Invalid \uXXXX escape`, end-5)
			}
			c = c<<4 | h
		}
		if c >= 0xd800 && c <= 0xdbff && end+6 < n && s[next] == '\\' && s[next+1] == 'u' {
			next += 2
			end += 6
			var c2 rune
			for ; next < end; next++ {
				h, ok := hexval(s[next])
				if !ok {
					return nil, 0, d.err(`Invalid \uXXXX escape`, end-5)
				}
				c2 = c2<<4 | h
			}
			if c2 >= 0xdc00 && c2 <= 0xdfff {
				c = 0x10000 + (c-0xd800)<<10 + (c2 - 0xdc00)
			} else {
				end -= 6
			}
		}
		// A lone surrogate has no UTF-8 form: WriteRune writes U+FFFD.
		b.WriteRune(c)
	}
}

// object is _parse_object_unicode: i is the index after '{'.
func (d *decoder) object(i, depth int) (any, int, error) {
	s, end := d.s, len(d.s)-1
	o := NewObject()
	i = d.ws(i)
	if i > end || s[i] != '}' {
		for {
			if i > end || s[i] != '"' {
				return nil, 0, d.err("Expecting property name enclosed in double quotes", i)
			}
			k, next, err := d.str(i + 1)
			if err != nil {
				return nil, 0, err
			}
			i = d.ws(next)
			if i > end || s[i] != ':' {
				return nil, 0, d.err("Expecting ':' delimiter", i)
			}
			i = d.ws(i + 1)
			v, next, err := d.value(i, depth)
			if err != nil {
				return nil, 0, err
			}
			o.Set(k.(string), v)
			i = d.ws(next)
			if i <= end && s[i] == '}' {
				break
			}
			if i > end || s[i] != ',' {
				return nil, 0, d.err("Expecting ',' delimiter", i)
			}
			i = d.ws(i + 1)
		}
	}
	return o, i + 1, nil
}

// array is _parse_array_unicode: i is the index after '['.
func (d *decoder) array(i, depth int) (any, int, error) {
	s, end := d.s, len(d.s)-1
	l := []any{}
	i = d.ws(i)
	if i > end || s[i] != ']' {
		for {
			v, next, err := d.value(i, depth)
			if err != nil {
				return nil, 0, err
			}
			l = append(l, v)
			i = d.ws(next)
			if i <= end && s[i] == ']' {
				break
			}
			if i > end || s[i] != ',' {
				return nil, 0, d.err("Expecting ',' delimiter", i)
			}
			i = d.ws(i + 1)
		}
	}
	return l, i + 1, nil
}

// ValidUTF8 is s with each invalid sequence replaced as Python's UTF-8
// decoder with errors="replace" does: one U+FFFD per maximal invalid
// subpart (so a truncated three-byte sequence gives one U+FFFD, not two).
func ValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefix(b[i:])
	}
	return sb.String()
}

// invalidPrefix is the length of the maximal subpart of an invalid
// sequence at the start of b (at least 1).
func invalidPrefix(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xbf)
	switch {
	case c >= 0xc2 && c <= 0xdf:
		need = 1
	case c == 0xe0:
		need, lo = 2, 0xa0
	case c >= 0xe1 && c <= 0xec, c == 0xee, c == 0xef:
		need = 2
	case c == 0xed:
		need, hi = 2, 0x9f
	case c == 0xf0:
		need, lo = 3, 0x90
	case c >= 0xf1 && c <= 0xf3:
		need = 3
	case c == 0xf4:
		need, hi = 3, 0x8f
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if x < lo || x > hi {
			break
		}
		lo, hi = 0x80, 0xbf
		n++
	}
	return n
}
