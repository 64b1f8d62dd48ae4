package export

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// FuzzTranscript: any bytes either fail to parse or go through every
// export without panicking; a token sequence, when one is built, is
// aligned and masks only with -100 or the token itself; an ATIF document
// of an exportable rollout passes the v1.7 checks.
func FuzzTranscript(f *testing.F) {
	wrap := func(tr *trajectory.Trajectory) []byte {
		b, _ := json.Marshal(map[string]any{"rollout_id": "a#0", "task_id": "a", "prompt": "p", "trajectory": tr})
		return b
	}
	f.Add(wrap(synth(3, 2, 2)))
	broken := synth(2, 1, 1)
	broken.Turns[1].PromptTokenIDs[0] = 99
	f.Add(wrap(broken))
	b, _ := json.Marshal(synth(2, 3, 1))
	f.Add(b)
	f.Add([]byte(`{"trajectory":{"messages":[{"role":"assistant","tool_calls":[{"id":"","function":{"name":"x","arguments":"[1]"}}]},{"role":"tool","tool_call_id":"","content":"r"}],"turns":[{"index":0,"prompt_token_ids":[1],"completion_token_ids":[2],"completion_logprobs":[0.5,1]}]}}`))
	f.Add([]byte(`{"agent":"oracle","messages":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tc, err := ParseTranscript(data)
		if err != nil {
			return
		}
		tr := tc.Trajectory
		if s, err := Tokens(tr); err == nil {
			if len(s.Masks) != len(s.Tokens) || (s.Logprobs != nil && len(s.Logprobs) != len(s.Tokens)) {
				t.Fatalf("unaligned: %d tokens, %d masks, %d logprobs", len(s.Tokens), len(s.Masks), len(s.Logprobs))
			}
			for i, m := range s.Masks {
				if m != MaskedToken && m != s.Tokens[i] {
					t.Fatalf("mask %d at %d for token %d", m, i, s.Tokens[i])
				}
			}
		}
		r := rundir.Record{RolloutID: "a#0", TaskID: "a", Outcome: rundir.OutcomeFailed}
		g, info, err := Group([]rundir.Record{r, r}, []*trajectory.Trajectory{tr, tr}, Filter{MaxTokens: 5})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(g); err != nil {
			t.Fatal(err)
		}
		if info.Tokens != (g.Tokens != nil && len(g.Masks) == len(g.Tokens)) {
			t.Fatalf("tokens %v but %d token lists, %d mask lists", info.Tokens, len(g.Tokens), len(g.Masks))
		}
		if _, err := json.Marshal(g.MessagesOnly()); err != nil {
			t.Fatal(err)
		}
		if line, ok := SFT(r, tr, Filter{}); ok {
			if _, err := json.Marshal(line); err != nil {
				t.Fatal(err)
			}
		}
		doc, err := json.Marshal(ATIF(r, tr, ATIFMeta{}))
		if err != nil {
			t.Fatal(err)
		}
		if Skip(r, tr) == "" {
			if errs := validateATIF(doc); len(errs) > 0 {
				t.Fatalf("%s\n%s", strings.Join(errs, "\n"), doc)
			}
		}
	})
}
