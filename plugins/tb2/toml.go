package main

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseTOML reads the subset of TOML that task.toml files use: tables,
// dotted-free keys, strings (basic and literal, one line), numbers,
// booleans and one-line arrays. Keys before any table are under "".
func ParseTOML(s string) (map[string]map[string]any, error) {
	doc := map[string]map[string]any{"": {}}
	sec := ""
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(stripComment(line))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[") {
			name := strings.Trim(line, "[] \t")
			sec = name
			if doc[sec] == nil {
				doc[sec] = map[string]any{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want key = value", n+1)
		}
		val, err := parseValue(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		doc[sec][strings.Trim(strings.TrimSpace(k), `"'`)] = val
	}
	return doc, nil
}

func stripComment(line string) string {
	inStr := byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inStr != 0 && c == '\\' && inStr == '"':
			i++
		case inStr != 0 && c == inStr:
			inStr = 0
		case inStr == 0 && (c == '"' || c == '\''):
			inStr = c
		case inStr == 0 && c == '#':
			return line[:i]
		}
	}
	return line
}

func parseValue(v string) (any, error) {
	switch {
	case v == "true":
		return true, nil
	case v == "false":
		return false, nil
	case strings.HasPrefix(v, `"""`) || strings.HasPrefix(v, `'''`):
		return strings.Trim(v, `"'`), nil
	case strings.HasPrefix(v, `"`):
		s, err := strconv.Unquote(v)
		if err != nil {
			return nil, fmt.Errorf("bad string %s", v)
		}
		return s, nil
	case strings.HasPrefix(v, `'`) && strings.HasSuffix(v, `'`) && len(v) >= 2:
		return v[1 : len(v)-1], nil
	case strings.HasPrefix(v, "["):
		inner := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"))
		var out []any
		if inner == "" {
			return out, nil
		}
		for _, part := range strings.Split(inner, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			pv, err := parseValue(part)
			if err != nil {
				return nil, err
			}
			out = append(out, pv)
		}
		return out, nil
	}
	clean := strings.ReplaceAll(v, "_", "")
	if i, err := strconv.ParseInt(clean, 10, 64); err == nil {
		return i, nil
	}
	if f, err := strconv.ParseFloat(clean, 64); err == nil {
		return f, nil
	}
	return nil, fmt.Errorf("unsupported value %q", v)
}
