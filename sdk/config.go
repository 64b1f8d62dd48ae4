package sdk

import (
	"reflect"
	"strings"
)

// closestKey is the JSON key of v's type (or of a struct inside it) nearest
// to key by edit distance, when it is close enough to be a typo.
func closestKey(key string, v any) string {
	var names []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case f.Anonymous && name == "":
				walk(f.Type)
				continue
			case name == "":
				name = f.Name
			}
			names = append(names, name)
			walk(f.Type)
		}
	}
	if v != nil {
		walk(reflect.TypeOf(v))
	}
	best, bd := "", len(key)/3+2
	for _, n := range names {
		if d := editDistance(strings.ToLower(key), strings.ToLower(n)); d < bd {
			best, bd = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
