// Command sweshaped is a reward plugin: the shaped reward of hermes-agent's
// SWE-smith-oracle environment (SweSmithOracleEnv.compute_reward), which
// gives a model that cannot yet fix a repository credit for using its
// tools at all:
//
//	no valid tool call            0
//	tool calls                    min(0.02/call, 0.10) + min(0.03/well-formed call, 0.20), at most 0.30
//	the tests ran                 0.4
//	the tests passed              1.0
//
// A call counts when it names one of the rollout's tools; it is well formed
// when its arguments are a JSON object (for terminal, one with a non-blank
// command), as hermes' agent loop counts tool_calls_attempted and
// tool_calls_schema_valid. It pins the behaviour of NousResearch's
// hermes-agent environments/swe_smith_oracle_env.py compute_reward and
// environments/agent_loop.py _normalize_tool_args (as in the m0at/hermes-agent
// fork, 28735ae7).
//
// Where hermes runs `pip install -e .` and pytest in the agent's own
// workspace, this plugin reads the swesmith environment's verdict: "the
// tests ran" is its tests_ran score (the agent's changes applied to a fresh
// checkout and the tests ran to a report) and "passed" its verdict, under
// the run's grading. Stack it on the swesmith environment; to make it the
// run's reward, weigh the verifier's reward 0:
//
//	[env]
//	plugin = "swesmith"
//	reward_weight = 0
//
//	[[reward]]
//	plugin = "sweshaped"
//	weight = 1
package main

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.RegisterReward(scorer{}) }

func main() {}

type scorer struct{}

func (scorer) Manifest() abi.Manifest {
	return abi.Manifest{Name: "sweshaped", Version: "1.0.0",
		Description: "hermes-agent's shaped SWE-smith reward: tool-call credit up to 0.3, 0.4 when the tests run, 1 when they pass"}
}

// Shaped is hermes' formula, in its order: 0 without a tool call, the
// tool-call credit until the tests run, 0.4 once they do, 1 when they
// pass.
func Shaped(attempted, wellFormed int, ran, passed bool) float64 {
	switch {
	case attempted == 0:
		return 0
	case !ran:
		return ToolCredit(attempted, wellFormed)
	case !passed:
		return 0.4
	}
	return 1
}

// ToolCredit is hermes' tool_call_reward. The products are rounded on
// their own (a conversion forbids fusing them into the additions), as
// Python computes them.
func ToolCredit(attempted, wellFormed int) float64 {
	attempt := math.Min(float64(float64(attempted)*0.02), 0.10)
	schema := math.Min(float64(float64(wellFormed)*0.03), 0.20)
	return math.Min(attempt+schema, 0.30)
}

// transcript is the part of a rollout's transcript this plugin reads.
type transcript struct {
	Trajectory struct {
		Tools    []string `json:"tools"`
		Messages []struct {
			Role      string `json:"role"`
			ToolCalls []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	} `json:"trajectory"`
}

// CountCalls counts the assistant's tool calls as hermes' agent loop
// does: attempted when the name is one of the rollout's tools, well formed
// when also its arguments are. A transcript that lists no tools counts
// every call as both, as compute_reward does without the loop's counts.
func CountCalls(raw json.RawMessage) (attempted, wellFormed int, err error) {
	var tr transcript
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &tr); err != nil {
			return 0, 0, errors.New("sweshaped: the transcript is not JSON")
		}
	}
	t := tr.Trajectory
	for _, m := range t.Messages {
		if m.Role != "assistant" {
			continue
		}
		for _, tc := range m.ToolCalls {
			switch {
			case len(t.Tools) == 0:
				attempted++
				wellFormed++
			case slices.Contains(t.Tools, tc.Function.Name):
				attempted++
				if WellFormed(tc.Function.Name, tc.Function.Arguments) {
					wellFormed++
				}
			}
		}
	}
	return attempted, wellFormed, nil
}

// WellFormed is hermes' schema_valid: the arguments decode, as Python's
// json.loads decodes them, straight to an object; terminal's must hold a
// command that is a string with more than whitespace.
func WellFormed(tool, args string) bool {
	obj, ok := pyJSONObject(args)
	if !ok {
		return false
	}
	if tool != "terminal" {
		return true
	}
	var cmd string
	if json.Unmarshal(obj["command"], &cmd) != nil {
		return false
	}
	return strings.TrimFunc(cmd, pyIsSpace) != ""
}

// pyJSONObject decodes s as a JSON object the way Python's json.loads
// accepts it, which also takes NaN, Infinity and -Infinity as values.
func pyJSONObject(s string) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &obj) == nil && obj != nil {
		return obj, true
	}
	if json.Unmarshal([]byte(pyConstants(s)), &obj) == nil && obj != nil {
		return obj, true
	}
	return nil, false
}

// pyConstants replaces Python's NaN, Infinity and -Infinity outside JSON
// strings with null.
func pyConstants(s string) string {
	var b strings.Builder
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		default:
			if w := pyConstant(s[i:]); w > 0 {
				b.WriteString("null")
				i += w - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// pyConstant is the length of the Python constant s starts with, or 0.
func pyConstant(s string) int {
	for _, k := range []string{"-Infinity", "Infinity", "NaN"} {
		if strings.HasPrefix(s, k) {
			return len(k)
		}
	}
	return 0
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// Score scores one rollout.
func (scorer) Score(r abi.RewardRequest) (abi.RewardResponse, error) {
	var cfg struct{}
	if err := sdk.DecodeConfig(r.Config, &cfg); err != nil {
		return abi.RewardResponse{}, errors.New("sweshaped: [[reward]] config: " + err.Error() + " (it takes no keys)")
	}
	// A verdict that passed ran its tests; one that failed must say.
	ran, ok := r.Verify.Scores["tests_ran"]
	switch {
	case !ok && !r.Verify.Passed:
		return abi.RewardResponse{}, errors.New("sweshaped: the verdict failed without a tests_ran score, so whether the tests ran is unknown: stack this reward on the swesmith environment")
	case !ok:
		ran = 1
	}
	attempted, wellFormed, err := CountCalls(r.Trajectory)
	if err != nil {
		return abi.RewardResponse{}, err
	}
	return abi.RewardResponse{Reward: Shaped(attempted, wellFormed, ran == 1, r.Verify.Passed), Scores: map[string]float64{
		"tool_calls_attempted": float64(attempted), "tool_calls_schema_valid": float64(wellFormed),
		"tool_call_reward": ToolCredit(attempted, wellFormed), "tests_ran": ran,
	}}, nil
}
