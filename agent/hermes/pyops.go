package hermes

import (
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/proctor-dev/proctor/agent/pyjson"
)

// The tools of hermes-agent take their arguments as the model sent them and
// do arithmetic, comparisons and formatting on them with Python's rules. So
// that a string where an integer belongs fails with the same message, the
// few operations the tools use are written here with those rules, on the
// values pyjson decodes (nil, bool, *big.Int, float64, string, []any,
// *pyjson.Object).

// pyError is a Python exception: its type name and message.
type pyError struct{ Type, Msg string }

func (e *pyError) Error() string { return e.Msg }

func typeErr(format string, args ...any) *pyError {
	return &pyError{"TypeError", fmt.Sprintf(format, args...)}
}

// num is a Python int, bool or float as one of int64 or float64.
type num struct {
	isFloat bool
	i       int64
	f       float64
}

func asNum(v any) (num, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return num{i: 1}, true
		}
		return num{}, true
	case *big.Int:
		if x.IsInt64() {
			return num{i: x.Int64()}, true
		}
		f, _ := new(big.Float).SetInt(x).Float64()
		return num{isFloat: true, f: f}, true
	case int:
		return num{i: int64(x)}, true
	case float64:
		return num{isFloat: true, f: x}, true
	}
	return num{}, false
}

func (n num) float() float64 {
	if n.isFloat {
		return n.f
	}
	return float64(n.i)
}

func (n num) value() any {
	if n.isFloat {
		return n.f
	}
	return big.NewInt(n.i)
}

// pyAdd is a + b for numbers and strings.
func pyAdd(a, b any) (any, error) {
	x, okx := asNum(a)
	y, oky := asNum(b)
	if okx && oky {
		if x.isFloat || y.isFloat {
			return x.float() + y.float(), nil
		}
		return big.NewInt(x.i + y.i), nil
	}
	if s, ok := a.(string); ok {
		if t, ok := b.(string); ok {
			return s + t, nil
		}
		return nil, typeErr(`can only concatenate str (not "%s") to str`, pyjson.TypeName(b))
	}
	if l, ok := a.([]any); ok {
		if m, ok := b.([]any); ok {
			return append(append([]any{}, l...), m...), nil
		}
		return nil, typeErr(`can only concatenate list (not "%s") to list`, pyjson.TypeName(b))
	}
	return nil, typeErr("unsupported operand type(s) for +: '%s' and '%s'", pyjson.TypeName(a), pyjson.TypeName(b))
}

// pyCompare is a op b (op one of <, >, <=, >=) for numbers and strings.
func pyCompare(a any, op string, b any) (bool, error) {
	x, okx := asNum(a)
	y, oky := asNum(b)
	cmp := 0
	s, oks := a.(string)
	t, okt := b.(string)
	switch {
	case okx && oky && !x.isFloat && !y.isFloat:
		cmp = compare(x.i, y.i)
	case okx && oky:
		if math.IsNaN(x.float()) || math.IsNaN(y.float()) {
			return false, nil
		}
		cmp = compare(x.float(), y.float())
	case oks && okt:
		cmp = strings.Compare(s, t)
	default:
		return false, typeErr("'%s' not supported between instances of '%s' and '%s'", op, pyjson.TypeName(a), pyjson.TypeName(b))
	}
	switch op {
	case "<":
		return cmp < 0, nil
	case ">":
		return cmp > 0, nil
	case "<=":
		return cmp <= 0, nil
	}
	return cmp >= 0, nil
}

func compare[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pyMin is min(a, b): the first of the smallest.
func pyMin(a, b any) (any, error) {
	less, err := pyCompare(b, "<", a)
	if err != nil {
		return nil, err
	}
	if less {
		return b, nil
	}
	return a, nil
}

// pyEqual is a == b for decoded values.
func pyEqual(a, b any) bool {
	x, okx := asNum(a)
	y, oky := asNum(b)
	if okx && oky {
		if !x.isFloat && !y.isFloat {
			return x.i == y.i
		}
		return x.float() == y.float()
	}
	switch s := a.(type) {
	case nil:
		return b == nil
	case string:
		t, ok := b.(string)
		return ok && s == t
	case []any:
		t, ok := b.([]any)
		if !ok || len(s) != len(t) {
			return false
		}
		for i := range s {
			if !pyEqual(s[i], t[i]) {
				return false
			}
		}
		return true
	case *pyjson.Object:
		t, ok := b.(*pyjson.Object)
		if !ok || s.Len() != t.Len() {
			return false
		}
		for _, k := range s.Keys() {
			v, _ := s.Get(k)
			w, ok := t.Get(k)
			if !ok || !pyEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// sliceIndex is a slice bound: ints and bools only.
func sliceIndex(v any) (int, error) {
	switch v.(type) {
	case bool, *big.Int, int:
		n, _ := asNum(v)
		if n.isFloat {
			return int(math.Copysign(math.MaxInt32, n.f)), nil
		}
		return clampInt(n.i), nil
	}
	return 0, typeErr("slice indices must be integers or None or have an __index__ method")
}

func clampInt(i int64) int {
	return int(max(min(i, math.MaxInt32), math.MinInt32))
}

// pySlice is l[start:stop] with Python's bounds for negative indices.
func pySlice[T any](l []T, start, stop int) []T {
	n := len(l)
	norm := func(i int) int {
		if i < 0 {
			i += n
			if i < 0 {
				i = 0
			}
		}
		return min(i, n)
	}
	a, b := norm(start), norm(stop)
	if a >= b {
		return nil
	}
	return l[a:b]
}

// attrErr is what calling a str method on another type raises.
func attrErr(v any, method string) *pyError {
	return &pyError{"AttributeError", fmt.Sprintf("'%s' object has no attribute '%s'", pyjson.TypeName(v), method)}
}

// argStr reads a str argument the tool then calls method on: anything else
// fails as Python's attribute lookup would.
func argStr(v any, method string) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", attrErr(v, method)
}
