package export

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"sort"
	"testing"

	"github.com/proctor-dev/proctor/agent"
)

var update = flag.Bool("update", false, "rewrite toolschemas.jsonl from the agent's tools")

// TestToolSchemasAreTheAgents: the export's copy of proctor's tool
// definitions is the llm agent's, byte for byte, every tool of every
// toolset.
func TestToolSchemasAreTheAgents(t *testing.T) {
	var sets []string
	for set := range agent.Toolsets {
		sets = append(sets, set)
	}
	sort.Strings(sets)
	ts, err := agent.NewToolset(sets)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for _, s := range ts.Schemas() {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		want.Write(append(b, '\n'))
	}
	if *update {
		if err := os.WriteFile("toolschemas.jsonl", want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(toolSchemasJSON, want.Bytes()) {
		t.Fatalf("toolschemas.jsonl is not the agent's tool definitions: run go test ./host/rundir/export -run TestToolSchemasAreTheAgents -update")
	}
	for _, s := range ts.Schemas() {
		got := toolSchemas([]string{s.Function.Name})
		if len(got) != 1 {
			t.Errorf("%s: the export does not know it", s.Function.Name)
			continue
		}
		a, _ := json.Marshal(got[0])
		b, _ := json.Marshal(s)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the export writes its definition as %s, the agent offers %s", s.Function.Name, a, b)
		}
	}
}
