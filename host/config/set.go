package config

import (
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// applySet sets one dotted key from "a.b.c=value". The value is read as a
// TOML value (number, bool, array, quoted string), else as a plain string.
func applySet(raw map[string]any, s string) error {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return &Error{File: "--set", Msg: fmt.Sprintf("%q is not key=value", s), Hint: "write --set section.key=value, e.g. --set agent.max_turns=30"}
	}
	var holder map[string]any
	var val any = v
	if _, err := toml.Decode("v = "+v, &holder); err == nil {
		val = holder["v"]
	}
	parts := strings.Split(k, ".")
	m := raw
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = val
	return nil
}
