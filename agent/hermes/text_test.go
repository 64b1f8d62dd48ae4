package hermes

import (
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
)

// Expectations from CPython 3.11.7.

func TestEscapeArg(t *testing.T) {
	if got := escapeArg("it's"); got != `'it'"'"'s'` {
		t.Errorf("escapeArg: %s", got)
	}
}

func TestPyOps(t *testing.T) {
	one, five := big.NewInt(1), big.NewInt(5)
	if v, err := pyAdd(one, 2.5); err != nil || v.(float64) != 3.5 {
		t.Errorf("1 + 2.5 = %v %v", v, err)
	}
	if v, err := pyAdd(true, five); err != nil || pyjson.Str(v) != "6" {
		t.Errorf("True + 5 = %v %v", v, err)
	}
	for _, c := range []struct {
		a, b any
		want string
	}{
		{"5", one, `can only concatenate str (not "int") to str`},
		{five, "5", "unsupported operand type(s) for +: 'int' and 'str'"},
		{nil, one, "unsupported operand type(s) for +: 'NoneType' and 'int'"},
		{[]any{}, one, `can only concatenate list (not "int") to list`},
	} {
		if _, err := pyAdd(c.a, c.b); err == nil || err.Error() != c.want {
			t.Errorf("%#v + %#v: %v, want %s", c.a, c.b, err, c.want)
		}
	}
	if _, err := pyMin("5", big.NewInt(2000)); err == nil || err.Error() != "'<' not supported between instances of 'int' and 'str'" {
		t.Errorf("min('5', 2000): %v", err)
	}
	if m, _ := pyMin(2.5, big.NewInt(2000)); m != 2.5 {
		t.Errorf("min(2.5, 2000) = %v", m)
	}
	if !pyEqual(true, one) || !pyEqual(1.0, one) || pyEqual("1", one) || !pyEqual([]any{one, "a"}, []any{1.0, "a"}) {
		t.Error("==")
	}
	if got := pySlice([]int{0, 1, 2, 3, 4}, -2, 10); !slices.Equal(got, []int{3, 4}) {
		t.Errorf("[-2:10] = %v", got)
	}
	if got := pySlice([]int{0, 1, 2}, 2, 1); got != nil {
		t.Errorf("[2:1] = %v", got)
	}
	if _, err := sliceIndex(2.0); err == nil {
		t.Error("a float slice index was accepted")
	}
}

// TestTruncate is terminal_tool's truncation: by characters, 40% head and
// 60% tail, counted over the whole output even when the sandbox sent only
// its ends.
func TestTruncate(t *testing.T) {
	s := strings.Repeat("a", 40000) + strings.Repeat("é", 60000)
	got := truncate(s, 0, "")
	want := strings.Repeat("a", 20000) + "\n\n... [OUTPUT TRUNCATED - 50000 chars omitted out of 100000 total] ...\n\n" + strings.Repeat("é", 30000)
	if got != want {
		t.Fatalf("truncation kept the wrong parts (%d characters)", pystr.Len(got))
	}
	got = truncate(strings.Repeat("h", 524288), 2000000, strings.Repeat("t", 524288))
	if !strings.Contains(got, "[OUTPUT TRUNCATED - 2998576 chars omitted out of 3048576 total]") || !strings.HasPrefix(got, strings.Repeat("h", 20000)+"\n") || !strings.HasSuffix(got, "\n"+strings.Repeat("t", 30000)) {
		t.Fatalf("truncation of a cut output: %q", got[20000:20100])
	}
	if s := strings.Repeat("x", 50000); truncate(s, 0, "") != s {
		t.Error("50,000 characters were cut")
	}
}
