package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

var lastKey = regexp.MustCompile(`last key "([^"]+)"\): (.*)`)

func tomlError(name string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if strings.Contains(msg, "incompatible types") || strings.Contains(msg, "bad duration") {
			return &Error{File: name, Line: pe.Position.Line, Key: pe.LastKey, Msg: msg}
		}
		return &Error{File: name, Line: pe.Position.Line, Key: pe.LastKey, Msg: msg}
	}
	return &Error{File: name, Msg: err.Error()}
}

// checkKeys walks the decoded table against the struct's toml tags and
// reports the first unknown key with the closest valid one. Free-form
// tables (env.config, model.extra_body) are not checked.
func checkKeys(m map[string]any, t reflect.Type, prefix, file string, data []byte) error {
	valid := map[string]reflect.Type{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("toml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		valid[tag] = f.Type
		names = append(names, tag)
	}
	for _, k := range slices.Sorted(mapsKeys(m)) {
		full := strings.TrimPrefix(prefix+"."+k, ".")
		ft, ok := valid[k]
		if ok && ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if !ok {
			e := &Error{File: file, Key: full, Msg: "unknown key"}
			if data != nil {
				e.Line = lineOf(data, full)
			}
			if k == "api_key" || strings.HasSuffix(k, "_key") || k == "token" {
				e.Msg = "secrets do not go in config files"
				e.Hint = "put the key in an environment variable and name it with api_key_env"
			} else if best := closest(k, names); best != "" {
				e.Hint = fmt.Sprintf("did you mean %q?", strings.TrimPrefix(prefix+"."+best, "."))
			} else {
				e.Hint = "valid keys here: " + strings.Join(names, ", ")
			}
			return e
		}
		if ft.Kind() == reflect.Map {
			continue
		}
		switch v := m[k].(type) {
		case map[string]any:
			if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(Duration{}) {
				if err := checkKeys(v, ft, full, file, data); err != nil {
					return err
				}
			}
		case []map[string]any:
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				for _, item := range v {
					if err := checkKeys(item, ft.Elem(), full, file, data); err != nil {
						return err
					}
				}
			}
		case []any: // an array of inline tables
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				for _, item := range v {
					if item, ok := item.(map[string]any); ok {
						if err := checkKeys(item, ft.Elem(), full, file, data); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// lineOf finds the line where a dotted key is set, looking for its last
// part under its table header.
func lineOf(data []byte, key string) int {
	parts := strings.Split(key, ".")
	last := parts[len(parts)-1]
	table := strings.Join(parts[:len(parts)-1], ".")
	cur := ""
	header := regexp.MustCompile(`^\s*\[\[?\s*([^\]]+?)\s*\]\]?`)
	assign := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(last) + `"?\s*=`)
	for i, line := range strings.Split(string(data), "\n") {
		if m := header.FindStringSubmatch(line); m != nil {
			cur = m[1]
			if cur == key {
				return i + 1
			}
			continue
		}
		if cur == table && assign.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// closest returns the valid name nearest to k by edit distance, if close.
func closest(k string, names []string) string {
	best, bd := "", 1<<30
	for _, n := range names {
		if d := editDistance(k, n); d < bd {
			best, bd = n, d
		}
	}
	if bd <= max(2, len(k)/3) {
		return best
	}
	return ""
}

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
