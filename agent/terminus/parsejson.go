package terminus

import (
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
)

// jsonParser is TerminusJSONPlainParser
// (src/harbor/agents/terminus_2/terminus_json_plain_parser.py).
type jsonParser struct{}

func (jsonParser) format() string { return "json" }

// jsonFixes are _get_auto_fixes, in order.
var jsonFixes = []struct {
	name string
	fix  func(reply, err string) (string, bool)
}{
	{"Fixed incomplete JSON by adding missing closing brace", fixIncompleteJSON},
	{"Extracted JSON from mixed content", fixMixedContent},
}

// Parse is parse_response: a parse, then each auto-fix in turn until one
// gives a reply without error.
func (p jsonParser) Parse(reply string) (Parsed, error) {
	res := p.try(reply)
	if res.Error == "" {
		return res, nil
	}
	for _, f := range jsonFixes {
		fixed, ok := f.fix(reply, res.Error)
		if !ok {
			continue
		}
		if r := p.try(fixed); r.Error == "" {
			r.Warning = autoCorrected(f.name, r.Warning)
			return r, nil
		}
	}
	return res, nil
}

// try is _try_parse_response.
func (jsonParser) try(reply string) Parsed {
	content, warnings := extractJSON(reply)
	if content == "" {
		return Parsed{Error: "No valid JSON found in response", Warning: bullets(warnings)}
	}
	v, err := pyjson.Decode(content)
	if err != nil {
		msg := "Invalid JSON: " + err.Error()
		if pystr.Len(content) < 200 {
			msg += " | Content: " + pyjson.Repr(content)
		} else {
			msg += " | Content preview: " + pyjson.Repr(pystr.Head(content, 100)) + "..."
		}
		return Parsed{Error: msg, Warning: bullets(warnings)}
	}
	data, ok := v.(*pyjson.Object)
	if !ok {
		return Parsed{Error: "Response must be a JSON object", Warning: bullets(warnings)}
	}
	if msg := validateJSON(data, content, &warnings); msg != "" {
		return Parsed{Error: msg, Warning: bullets(warnings)}
	}
	complete := false
	if tc, ok := data.Get("task_complete"); ok {
		if s, isStr := tc.(string); isStr {
			l := strings.ToLower(s)
			complete = l == "true" || l == "1" || l == "yes"
		} else {
			complete = pyjson.Truthy(tc)
		}
	}
	analysis, plan := field(data, "analysis"), field(data, "plan")
	cmds, _ := data.Get("commands")
	commands, perr := parseJSONCommands(cmds.([]any), &warnings)
	if perr != "" {
		if complete {
			warnings = append(warnings, perr)
			return Parsed{Complete: true, Warning: bullets(warnings), Analysis: analysis, Plan: plan}
		}
		return Parsed{Error: perr, Warning: bullets(warnings), Analysis: analysis, Plan: plan}
	}
	return Parsed{Commands: commands, Complete: complete, Warning: bullets(warnings), Analysis: analysis, Plan: plan}
}

// field is str() of a field, "" when it is absent or false, as the agent
// uses analysis and plan.
func field(data *pyjson.Object, k string) string {
	v, ok := data.Get(k)
	if !ok || !pyjson.Truthy(v) {
		return ""
	}
	return pyjson.Str(v)
}

// extractJSON is _extract_json_content: the first balanced {...} outside
// strings, and warnings for text around it. Every character it looks at is
// ASCII, so bytes stand for code points.
func extractJSON(reply string) (string, []string) {
	start, end, depth := -1, -1, 0
	inString, escape := false, false
	for i := 0; i < len(reply) && end < 0; i++ {
		c := reply[i]
		switch {
		case escape:
			escape = false
		case c == '\\':
			escape = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{':
			if depth == 0 {
				start = i
			}
			depth++
		case c == '}':
			depth--
			if depth == 0 && start != -1 {
				end = i + 1
			}
		}
	}
	if start == -1 || end == -1 {
		return "", []string{"No valid JSON object found"}
	}
	var warnings []string
	if pystr.Strip(reply[:start]) != "" {
		warnings = append(warnings, "Extra text detected before JSON object")
	}
	if pystr.Strip(reply[end:]) != "" {
		warnings = append(warnings, "Extra text detected after JSON object")
	}
	return reply[start:end], warnings
}

// validateJSON is _validate_json_structure.
func validateJSON(data *pyjson.Object, content string, warnings *[]string) string {
	var missing []string
	for _, f := range []string{"analysis", "plan", "commands"} {
		if _, ok := data.Get(f); !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return "Missing required fields: " + strings.Join(missing, ", ")
	}
	for _, f := range []string{"analysis", "plan"} {
		if v, _ := data.Get(f); !isStr(v) {
			*warnings = append(*warnings, "Field '"+f+"' should be a string")
		}
	}
	if v, _ := data.Get("commands"); !isList(v) {
		return "Field 'commands' must be an array"
	}
	pos := map[string]int{}
	for _, f := range []string{"analysis", "plan", "commands"} {
		if loc := fieldRE[f].FindStringIndex(content); loc != nil {
			pos[f] = loc[0]
		}
	}
	if w := orderWarning("Fields", pos); w != "" {
		*warnings = append(*warnings, w)
	}
	if tc, ok := data.Get("task_complete"); ok && tc != nil {
		if _, b := tc.(bool); !b && !isStr(tc) {
			*warnings = append(*warnings, "Field 'task_complete' should be a boolean or string")
		}
	}
	return ""
}

// fieldRE finds a field's name followed by a colon (_check_field_order).
var fieldRE = map[string]*regexp.Regexp{
	"analysis": regexp.MustCompile(`"(analysis)"` + pystr.Space + `*:`),
	"plan":     regexp.MustCompile(`"(plan)"` + pystr.Space + `*:`),
	"commands": regexp.MustCompile(`"(commands)"` + pystr.Space + `*:`),
}

func isStr(v any) bool  { _, ok := v.(string); return ok }
func isList(v any) bool { _, ok := v.([]any); return ok }

// parseJSONCommands is _parse_commands.
func parseJSONCommands(list []any, warnings *[]string) ([]Command, string) {
	var out []Command
	for i, item := range list {
		n := strconv.Itoa(i + 1)
		cmd, ok := item.(*pyjson.Object)
		if !ok {
			return nil, "Command " + n + " must be an object"
		}
		ks, ok := cmd.Get("keystrokes")
		if !ok {
			return nil, "Command " + n + " missing required 'keystrokes' field"
		}
		keys, ok := ks.(string)
		if !ok {
			return nil, "Command " + n + " 'keystrokes' must be a string"
		}
		duration := 1.0
		if d, ok := cmd.Get("duration"); ok {
			if f, num := number(d); num {
				duration = f
			} else {
				*warnings = append(*warnings, "Command "+n+": Invalid duration value, using default 1.0")
			}
		} else {
			*warnings = append(*warnings, "Command "+n+": Missing duration field, using default 1.0")
		}
		// Harbor joins a set, whose order Python's string hashing makes
		// differ from one process to the next; the document's order here.
		var unknown []string
		for _, k := range cmd.Keys() {
			if k != "keystrokes" && k != "duration" {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			*warnings = append(*warnings, "Command "+n+": Unknown fields: "+strings.Join(unknown, ", "))
		}
		if i < len(list)-1 && !strings.HasSuffix(keys, "\n") {
			*warnings = append(*warnings, "Command "+n+" should end with newline when followed by another command. Otherwise the two commands will be concatenated together on the same line.")
		}
		out = append(out, Command{Keystrokes: keys, Duration: duration})
	}
	return out, ""
}

// number is float(v) of a JSON number or a bool (an int in Python); an
// int too large for a float is +-inf (where Python raises OverflowError).
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case float64:
		return x, true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		if math.IsInf(f, 0) || f == 0 && x.Sign() != 0 {
			return math.Inf(x.Sign()), true
		}
		return f, true
	}
	return 0, false
}

// fixIncompleteJSON is _fix_incomplete_json: close the braces left open.
func fixIncompleteJSON(reply, err string) (string, bool) {
	if !strings.Contains(err, "Invalid JSON") && !strings.Contains(err, "Expecting") &&
		!strings.Contains(err, "Unterminated") && !strings.Contains(err, "No valid JSON found") {
		return reply, false
	}
	if n := strings.Count(reply, "{") - strings.Count(reply, "}"); n > 0 {
		return reply + strings.Repeat("}", n), true
	}
	return reply, false
}

// mixedRE is _fix_mixed_content's pattern: an object with at most one
// level of nesting. Go's leftmost-first matching finds what Python's
// backtracking finds.
var mixedRE = regexp.MustCompile(`\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}`)

// fixMixedContent is _fix_mixed_content: the first such object that is
// valid JSON.
func fixMixedContent(reply, _ string) (string, bool) {
	for _, m := range mixedRE.FindAllString(reply, -1) {
		if _, err := pyjson.Decode(m); err == nil {
			return m, true
		}
	}
	return reply, false
}
