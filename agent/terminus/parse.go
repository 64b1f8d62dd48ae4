package terminus

import (
	"strings"
)

// Command is one batch of keystrokes the model asked for and how long to
// wait after sending it.
type Command struct {
	Keystrokes string
	Duration   float64
}

// Parsed is what a parser read from one reply (Harbor's ParseResult).
// Error is what the model is told when the reply cannot be acted on;
// Warning is told beside the terminal's output. Complete is Python's
// truth value of the reply's task_complete.
type Parsed struct {
	Commands []Command
	Complete bool
	Error    string
	Warning  string
	Analysis string
	Plan     string
}

// Parser reads a reply in one of Terminus-2's formats. A Go error is what
// Harbor's parser raises instead of answering (a Python exception): the
// rollout cannot go on.
type Parser interface {
	Parse(reply string) (Parsed, error)
	// format is the format's name in Harbor ("json", "xml").
	format() string
}

// NewParser returns the parser of a format: "json" (Harbor's default) or
// "xml".
func NewParser(format string) (Parser, bool) {
	switch format {
	case "", "json":
		return jsonParser{}, true
	case "xml":
		return xmlParser{}, true
	}
	return nil, false
}

// bullets joins warnings as the parsers do: "- " + "\n- ".join(warnings).
func bullets(warnings []string) string {
	if len(warnings) == 0 {
		return ""
	}
	return "- " + strings.Join(warnings, "\n- ")
}

// autoCorrected is the warning a successful auto-fix puts first
// (_combine_warnings).
func autoCorrected(fix, existing string) string {
	auto := "AUTO-CORRECTED: " + fix + " - please fix this in future responses"
	if existing != "" {
		return "- " + auto + "\n" + existing
	}
	return "- " + auto
}

// orderWarning checks that the named fields appear in Harbor's order
// (analysis, plan, commands), given where each was found (-1: absent); it
// returns "" when they do or fewer than two are present. what is "Fields"
// or "Sections".
func orderWarning(what string, pos map[string]int) string {
	expected := []string{"analysis", "plan", "commands"}
	var present []string
	for _, f := range expected {
		if p, ok := pos[f]; ok && p >= 0 {
			present = append(present, f)
		}
	}
	if len(present) < 2 {
		return ""
	}
	actual := append([]string(nil), present...)
	// A stable sort by position, as Python's sorted.
	for i := 1; i < len(actual); i++ {
		for j := i; j > 0 && pos[actual[j]] < pos[actual[j-1]]; j-- {
			actual[j], actual[j-1] = actual[j-1], actual[j]
		}
	}
	if strings.Join(actual, " ") == strings.Join(present, " ") {
		return ""
	}
	return what + " appear in wrong order. Found: " + strings.Join(actual, " → ") + ", expected: " + strings.Join(present, " → ")
}
