// Package config loads run configurations: TOML decoded strictly (an unknown
// key or a wrong type names the file, the line and the key, with the
// closest valid key), every key overridable with --set section.key=value,
// secrets only as names of environment variables.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// Error is a config mistake: where, which key, what to do.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
	Hint string
}

func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	s := where + ": "
	if e.Key != "" {
		s += e.Key + ": "
	}
	return s + e.Msg
}

// Load reads path, applies the --set overrides, fills defaults and
// validates. Every mistake is an *Error.
func Load(path string, sets []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error(), Hint: "check the path of the config file"}
	}
	abs, _ := filepath.Abs(path)
	return Parse(data, abs, sets)
}

// Parse is Load for bytes already read; name is used in messages and to
// resolve relative paths.
func Parse(data []byte, name string, sets []string) (*Config, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, tomlError(name, err)
	}
	if err := checkKeys(raw, reflect.TypeOf(Config{}), "", name, data); err != nil {
		return nil, err
	}
	for _, s := range sets {
		if err := applySet(raw, s); err != nil {
			return nil, err
		}
		if err := checkKeys(raw, reflect.TypeOf(Config{}), "", "--set "+s, nil); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(raw); err != nil {
		return nil, &Error{File: name, Msg: err.Error()}
	}
	var c Config
	if _, err := toml.Decode(buf.String(), &c); err != nil {
		// Positions refer to the re-encoded text: find the key in the file.
		e := tomlError(name, err)
		ce, ok := e.(*Error)
		if m := lastKey.FindStringSubmatch(err.Error()); ok && m != nil {
			ce.Key, ce.Msg = m[1], strings.TrimPrefix(m[2], "incompatible types: ")
		}
		if ok && ce.Key != "" {
			ce.Line = lineOf(data, ce.Key)
		}
		return nil, e
	}
	c.Path = name
	c.BaseDir = filepath.Dir(name)
	c.defaults()
	if err := c.validate(data); err != nil {
		return nil, err
	}
	return &c, nil
}

// RewardConfig is the i-th [[reward]] table's config as JSON.
func (c *Config) RewardConfig(i int) json.RawMessage {
	b, _ := json.Marshal(c.Reward[i].Config)
	if c.Reward[i].Config == nil {
		b = []byte("{}")
	}
	return b
}

// Resolve turns a path from the config into one relative to the current
// directory (relative paths in a config are relative to its folder).
func (c *Config) Resolve(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.BaseDir, p)
}

// Resolved is the configuration with every default filled in, as TOML. It
// holds no secret: only names of environment variables.
func (c *Config) Resolved() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("# resolved configuration of this run (defaults filled in)\n")
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Hash is the sha256 of the resolved configuration.
func (c *Config) Hash() string {
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Named is every string [env.config] holds, in tables and arrays too: the
// datasets (paths relative to the config file's folder, hf:// names) the
// plugin may read through dataset.read, whichever keys name them.
func (c *Config) Named() []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case []map[string]any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, k := range slices.Sorted(mapsKeys(x)) {
				walk(x[k])
			}
		}
	}
	walk(c.Env.Config)
	return out
}

// PluginConfig is env.config as JSON, for the plugin.
func (c *Config) PluginConfig() json.RawMessage {
	b, _ := json.Marshal(c.Env.Config)
	return b
}
