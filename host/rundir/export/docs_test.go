package export

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// TestSFTDocExample: the SFT line docs/training.md shows is what SFT
// writes for such a rollout, a Terminal-Bench task's, whose transcript has
// no system prompt: the same fields, and the same messages, without a
// system message the model never had (issue 32: the example showed one).
func TestSFTDocExample(t *testing.T) {
	b, err := os.ReadFile("../../../docs/training.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "### SFT chat (`sft.jsonl`)")
	_, block, ok2 := strings.Cut(after, "```json\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/training.md has no SFT example")
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("the SFT example is not JSON: %v", err)
	}

	tr := &trajectory.Trajectory{Agent: "llm", Tools: []string{"terminal"}, Messages: []trajectory.Message{
		{Role: "user", Content: "..."},
		{Role: "assistant", Reasoning: "...", ToolCalls: []trajectory.ToolCall{{ID: "call_0", Type: "function", Function: trajectory.FunctionCall{Name: "terminal", Arguments: `{"command": "ls"}`}}}},
		{Role: "tool", ToolCallID: "call_0", Name: "terminal", Content: "..."},
	}}
	line, ok := SFT(rundir.Record{RolloutID: "fix-git#0", TaskID: "fix-git", Outcome: rundir.OutcomePassed, Reward: 1}, tr, Filter{})
	if !ok {
		t.Fatal("no SFT line")
	}
	var got map[string]any
	js, _ := json.Marshal(line)
	json.Unmarshal(js, &got)

	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		slices.Sort(k)
		return k
	}
	if !reflect.DeepEqual(keys(got), keys(doc)) {
		t.Errorf("fields: export %v, docs %v", keys(got), keys(doc))
	}
	roles := func(m map[string]any) []any {
		var r []any
		for _, msg := range m["messages"].([]any) {
			r = append(r, msg.(map[string]any)["role"])
		}
		return r
	}
	if !reflect.DeepEqual(roles(got), roles(doc)) {
		t.Errorf("messages: export %v, docs %v", roles(got), roles(doc))
	}
	if !reflect.DeepEqual(got["messages"], doc["messages"]) {
		t.Errorf("the example's messages are not what SFT writes:\nexport %v\ndocs   %v", got["messages"], doc["messages"])
	}
}
