package atropostest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// validationError is what FastAPI answers 422 with: pydantic's errors
// under "detail", each with where ("loc") and what ("msg").
type validationError struct{ detail []map[string]any }

func (e *validationError) Error() string { return fmt.Sprint(e.detail) }

func invalid(loc []any, msg string) *validationError {
	return &validationError{detail: []map[string]any{{"loc": loc, "msg": msg, "type": "value_error"}}}
}

// field is one field of a pydantic model: its name, its shape and whether
// it may be left out (Optional[...] = None).
type field struct {
	name     string
	shape    string // "int", "float", "str", "dict", "any", "[X]" for List[X], "messages"
	optional bool
}

// Models of server.py, field by field.
var (
	registration = []field{{"wandb_group", "str", false}, {"wandb_project", "str", false}, {"batch_size", "int", false},
		{"max_token_len", "int", false}, {"checkpoint_dir", "str", false}, {"save_checkpoint_interval", "int", false},
		{"starting_step", "int", false}, {"num_steps", "int", false}}
	registerEnv = []field{{"max_token_length", "int", false}, {"desired_name", "str", false}, {"weight", "float", false},
		{"group_size", "int", false}, {"min_batch_allocation", "float", true}}
	envIdentifier = []field{{"env_id", "int", false}}
	scoredData    = []field{{"tokens", "[[int]]", false}, {"masks", "[[int]]", false}, {"scores", "[float]", false},
		{"advantages", "[[float]]", true}, {"ref_logprobs", "[[float]]", true}, {"messages", "messages", true},
		{"generation_params", "dict", true}, {"inference_logprobs", "[[float]]", true}, {"overrides", "[dict]", true},
		{"group_overrides", "dict", true}, {"images", "any", true}, {"env_id", "int", true},
		{"distill_token_ids", "[[[int]]]", true}, {"distill_logprobs", "[[[float]]]", true}}
)

// decode parses a JSON body into generic values, numbers kept exact.
func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data")
	}
	return v, nil
}

// model validates obj against fields, as pydantic does for a request
// body: every error of a missing or mistyped field is reported. It
// returns the object with defaults (None) filled in.
func model(obj any, fields []field, loc []any) (map[string]any, *validationError) {
	m, ok := obj.(map[string]any)
	if !ok {
		return nil, invalid(loc, "Input should be a valid dictionary or object to extract fields from")
	}
	out := map[string]any{}
	var errs []map[string]any
	for _, f := range fields {
		v, ok := m[f.name]
		at := append(append([]any(nil), loc...), f.name)
		if !ok || v == nil {
			if !f.optional {
				if !ok {
					errs = append(errs, map[string]any{"loc": at, "msg": "Field required", "type": "missing"})
				} else {
					errs = append(errs, map[string]any{"loc": at, "msg": "Input should not be None", "type": "type_error"})
				}
			}
			out[f.name] = nil
			continue
		}
		if msg := shape(v, f.shape); msg != "" {
			errs = append(errs, map[string]any{"loc": at, "msg": msg, "type": "type_error"})
			continue
		}
		out[f.name] = v
	}
	if errs != nil {
		return nil, &validationError{detail: errs}
	}
	return out, nil
}

// shape checks v against a shape; "" when it fits. Integers may be
// written as integral floats (1.0), as pydantic's lax mode takes them;
// 1.5 is not an int.
func shape(v any, s string) string {
	switch {
	case s == "any":
		return ""
	case s == "int":
		n, ok := v.(json.Number)
		if !ok {
			return "Input should be a valid integer"
		}
		f, err := n.Float64()
		if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
			return "Input should be a valid integer, got a number with a fractional part"
		}
	case s == "float":
		if _, ok := v.(json.Number); !ok {
			return "Input should be a valid number"
		}
	case s == "str":
		if _, ok := v.(string); !ok {
			return "Input should be a valid string"
		}
	case s == "dict":
		if _, ok := v.(map[string]any); !ok {
			return "Input should be a valid dictionary"
		}
	case s == "messages":
		// List[List[Dict[str, Any]]] whose dicts have role and content
		// (ScoredData.validate_messages).
		if msg := shape(v, "[[dict]]"); msg != "" {
			return msg
		}
		for _, list := range v.([]any) {
			for _, m := range list.([]any) {
				d := m.(map[string]any)
				_, role := d["role"]
				_, content := d["content"]
				if !role || !content {
					return "Value error, Message must have 'role' and 'content' fields"
				}
			}
		}
	case strings.HasPrefix(s, "["):
		list, ok := v.([]any)
		if !ok {
			return "Input should be a valid list"
		}
		inner := s[1 : len(s)-1]
		for _, x := range list {
			if x == nil && inner != "any" {
				return "Input should be a valid " + strings.Trim(inner, "[]")
			}
			if msg := shape(x, inner); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// intOf reads a validated int field.
func intOf(v any) int {
	f, _ := v.(json.Number).Float64()
	return int(f)
}

// floatOf reads a validated float field.
func floatOf(v any) float64 {
	f, _ := v.(json.Number).Float64()
	return f
}

// body validates a request body against a model.
func body(b []byte, fields []field) (map[string]any, error) {
	v, err := decode(b)
	if err != nil {
		return nil, invalid([]any{"body"}, "JSON decode error")
	}
	m, verr := model(v, fields, []any{"body"})
	if verr != nil {
		return nil, verr
	}
	return m, nil
}
