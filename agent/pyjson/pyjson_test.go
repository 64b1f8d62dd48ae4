package pyjson

import (
	"encoding/json"
	"math"
	"math/big"
	"strings"
	"testing"
)

// TestDecodeErrors pins json.loads' messages as CPython 3.11 words them
// (Lib/json/decoder.py and Modules/_json.c); the expectations were taken
// from CPython 3.11.7.
func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{``, "Expecting value: line 1 column 1 (char 0)"},
		{` `, "Expecting value: line 1 column 2 (char 1)"},
		{`{"command": `, "Expecting value: line 1 column 13 (char 12)"},
		{`{'a': 1}`, "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"},
		{`{"a" 1}`, "Expecting ':' delimiter: line 1 column 6 (char 5)"},
		{`{"a": 1 "b": 2}`, "Expecting ',' delimiter: line 1 column 9 (char 8)"},
		{`{"a": 1}x`, "Extra data: line 1 column 9 (char 8)"},
		{`"abc`, "Unterminated string starting at: line 1 column 1 (char 0)"},
		{"\"a\x01\"", "Invalid control character at: line 1 column 3 (char 2)"},
		{`"\x"`, `Invalid \escape: line 1 column 2 (char 1)`},
		{`{"a":1,}`, "Expecting property name enclosed in double quotes: line 1 column 8 (char 7)"},
		{`[1,]`, "Expecting value: line 1 column 4 (char 3)"},
		{"{\n\"a\":\n}", "Expecting value: line 3 column 1 (char 7)"},
		{"\ufeff{}", "Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)"},
		{`"\u12"`, `Invalid \uXXXX escape: line 1 column 3 (char 2)`},
		{`"\u12`, `Invalid \uXXXX escape: line 1 column 3 (char 2)`},
		{`"\u123"`, `Invalid \uXXXX escape: line 1 column 3 (char 2)`},
		{`"\ud800\u12"`, `Invalid \uXXXX escape: line 1 column 9 (char 8)`},
		{`-`, "Expecting value: line 1 column 1 (char 0)"},
		{`-a`, "Expecting value: line 1 column 1 (char 0)"},
		{`1e`, "Extra data: line 1 column 2 (char 1)"},
		{`1.`, "Extra data: line 1 column 2 (char 1)"},
		{`01`, "Extra data: line 1 column 2 (char 1)"},
		{`[`, "Expecting value: line 1 column 2 (char 1)"},
		{`{`, "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"},
		{`{"a"`, "Expecting ':' delimiter: line 1 column 5 (char 4)"},
		{`{"a":`, "Expecting value: line 1 column 6 (char 5)"},
		{`{"a":1`, "Expecting ',' delimiter: line 1 column 7 (char 6)"},
		{`nul`, "Expecting value: line 1 column 1 (char 0)"},
		{`tru`, "Expecting value: line 1 column 1 (char 0)"},
		{`[1 2]`, "Expecting ',' delimiter: line 1 column 4 (char 3)"},
		{`"\`, "Unterminated string starting at: line 1 column 1 (char 0)"},
		{`"é\q"`, `Invalid \escape: line 1 column 3 (char 2)`},
		{"{\"x\":\"\t\"}", "Invalid control character at: line 1 column 7 (char 6)"},
		{"\t\n[\n1,\n\n2", "Expecting ',' delimiter: line 5 column 2 (char 9)"},
		{`{"😀":1,}`, "Expecting property name enclosed in double quotes: line 1 column 8 (char 7)"},
		{`1e+`, "Extra data: line 1 column 2 (char 1)"},
		{`1e+5x`, "Extra data: line 1 column 5 (char 4)"},
		{`[-]`, "Expecting value: line 1 column 2 (char 1)"},
		{`{"a":[}`, "Expecting value: line 1 column 7 (char 6)"},
		{`"\uD83D\uDE00`, `Invalid \uXXXX escape: line 1 column 9 (char 8)`},
		{`]`, "Expecting value: line 1 column 1 (char 0)"},
	} {
		_, err := Decode(c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("Decode(%q) = %v, want %q", c.in, err, c.want)
		}
	}
}

func TestDecodeValues(t *testing.T) {
	v, err := Decode(` {"b": [1, 2.5, "x\u00e9\ud83d\ude00", null, true, false, NaN, -Infinity], "a": {}, "b": -0} `)
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	if got := strings.Join(o.Keys(), ","); got != "b,a" {
		t.Errorf("keys %s: a repeated key keeps its first place", got)
	}
	if b, _ := o.Get("b"); b.(*big.Int).Sign() != 0 {
		t.Errorf("a repeated key keeps its last value: %v", b)
	}
	v, _ = Decode(`[1, 2.5, "x\u00e9\ud83d\ude00", null, true, NaN, 123456789012345678901234567890]`)
	l := v.([]any)
	if l[0].(*big.Int).Int64() != 1 || l[1].(float64) != 2.5 || l[2].(string) != "xé😀" || l[3] != nil || l[4] != true || !math.IsNaN(l[5].(float64)) {
		t.Errorf("values: %#v", l)
	}
	if l[6].(*big.Int).String() != "123456789012345678901234567890" {
		t.Errorf("big int: %v", l[6])
	}
	if _, err := Decode(strings.Repeat("[", MaxDepth+1)); err == nil || !strings.Contains(err.Error(), "recursion") {
		t.Errorf("deep nesting: %v", err)
	}
}

// TestDumps pins json.dumps' output (CPython 3.11.7).
func TestDumps(t *testing.T) {
	o := NewObject().Set("a", "<b>&\u00e9\U0001F600\x7f\x01\t\"\\/").Set("n", nil).Set("t", true).Set("l", []any{1, 2.5, "x"})
	if got, want := Dumps(o, true), `{"a": "<b>&\u00e9\ud83d\ude00\u007f\u0001\t\"\\/", "n": null, "t": true, "l": [1, 2.5, "x"]}`; got != want {
		t.Errorf("ensure_ascii:\n got %s\nwant %s", got, want)
	}
	o = NewObject().Set("a", "<b>&\u00e9\U0001F600\x7f\x01\t\"\\/").Set("n", nil)
	if got, want := Dumps(o, false), "{\"a\": \"<b>&é😀\x7f\\u0001\\t\\\"\\\\/\", \"n\": null}"; got != want {
		t.Errorf("ensure_ascii=False:\n got %s\nwant %s", got, want)
	}
}

// TestFloatRepr pins repr(float) (CPython 3.11.7).
func TestFloatRepr(t *testing.T) {
	for f, want := range map[float64]string{
		1.0: "1.0", 0.1: "0.1", 1e16: "1e+16", 1.5e16: "1.5e+16", 1234567.0: "1234567.0", 1e-5: "1e-05",
		0.0001: "0.0001", 123.456: "123.456", -2.5: "-2.5", 1e22: "1e+22", 5e-324: "5e-324",
		1.7976931348623157e308: "1.7976931348623157e+308", 0.0: "0.0", 100.0: "100.0",
		9999999999999998.0: "9999999999999998.0", 1e15: "1000000000000000.0", math.Inf(1): "inf",
	} {
		if got := FloatRepr(f); got != want {
			t.Errorf("FloatRepr(%v) = %s, want %s", f, got, want)
		}
	}
	if got := FloatRepr(math.Copysign(0, -1)); got != "-0.0" {
		t.Errorf("-0.0: %s", got)
	}
}

// TestRepr pins repr() of decoded values (CPython 3.11.7).
func TestRepr(t *testing.T) {
	v := []any{"it's", `say "hi"`, `both ' "`, "tab\tnl\n\x7f\u0085é😀\u200b\ufffd", NewObject().Set("k", []any{nil, true, 1.5})}
	want := `["it's", 'say "hi"', 'both \' "', 'tab\tnl\n\x7f\x85é😀\u200b` + "\ufffd" + `', {'k': [None, True, 1.5]}]`
	if got := Repr(v); got != want {
		t.Errorf("repr:\n got %s\nwant %s", got, want)
	}
	if Str("x") != "x" || Str(nil) != "None" || Str(big.NewInt(5)) != "5" {
		t.Error("str()")
	}
}

func TestValidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"ok é":         "ok é",
		"a\xe2\x82Ab":  "a\ufffdAb", // a truncated sequence is one U+FFFD
		"\xff\xfe":     "\ufffd\ufffd",
		"\xed\xa0\x80": "\ufffd\ufffd\ufffd", // a surrogate: ED is valid only before 80-9F
		"\xf0\x9f\x98": "\ufffd",
	} {
		if got := ValidUTF8([]byte(in)); got != want {
			t.Errorf("ValidUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzDecode: Decode never panics, accepts exactly what encoding/json
// accepts (besides Python's NaN and Infinity), and puts every error inside
// the document.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"command": "ls"}`, `{"command": `, ``, `[1,2]`, `"\ud83d\ude00"`, `{"a":1,}`, `NaN`, `-0.5e+3`, "\ufeff1", `{"a":{"b":[1,{"c":null}]}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Decode(s)
		if err != nil {
			if se, ok := err.(*SyntaxError); ok && (se.Pos < 0 || se.Pos > len([]rune(s))) {
				t.Fatalf("error position %d outside %q", se.Pos, s)
			}
		}
		if strings.Contains(s, "NaN") || strings.Contains(s, "Infinity") || strings.Count(s, "[")+strings.Count(s, "{") > MaxDepth {
			return
		}
		if (err == nil) != json.Valid([]byte(s)) {
			t.Fatalf("Decode(%q) err=%v, encoding/json valid=%v", s, err, json.Valid([]byte(s)))
		}
		if err == nil {
			// What decodes, encodes and decodes again to the same text.
			out := Dumps(v, true)
			v2, err := Decode(out)
			if err != nil || Dumps(v2, true) != out {
				t.Fatalf("round trip of %q: %s, %v", s, out, err)
			}
		}
	})
}
