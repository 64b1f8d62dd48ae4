package terminus

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent/pyjson"
)

// golden is testdata/parse.json, written by testdata/gen.py from Harbor's
// parsers.
type golden struct {
	Commit string `json:"commit"`
	Cases  []struct {
		Format    string `json:"format"`
		Reply     string `json:"reply"`
		Exception string `json:"exception"`
		Commands  []struct {
			Keystrokes string `json:"keystrokes"`
			Duration   string `json:"duration"` // repr(float)
		} `json:"commands"`
		Complete  bool   `json:"complete"`
		Error     string `json:"error"`
		Warning   string `json:"warning"`
		Unordered bool   `json:"unordered"`
	} `json:"cases"`
	Salvage []struct {
		Reply    string  `json:"reply"`
		Salvaged *string `json:"salvaged"`
	} `json:"salvage"`
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestParsersMatchHarbor: every reply of parse.json gets, byte for byte,
// the commands, completion, error and warnings Harbor's parsers gave it
// (warnings Harbor takes from a Python set compared as a set of lines),
// and the replies Harbor's parser raised on fail here too.
func TestParsersMatchHarbor(t *testing.T) {
	var g golden
	readJSON(t, "testdata/parse.json", &g)
	if len(g.Cases) < 800 {
		t.Fatalf("parse.json holds %d cases", len(g.Cases))
	}
	for i, c := range g.Cases {
		p, _ := NewParser(c.Format)
		got, err := p.Parse(c.Reply)
		if c.Exception != "" {
			if err == nil {
				t.Errorf("case %d (%s %q): no error, Harbor raised %s", i, c.Format, c.Reply, c.Exception)
			}
			continue
		}
		if err != nil {
			t.Errorf("case %d (%s %q): %v", i, c.Format, c.Reply, err)
			continue
		}
		if got.Error != c.Error || got.Complete != c.Complete {
			t.Errorf("case %d (%s %q):\n got error %q complete %v\nwant error %q complete %v", i, c.Format, c.Reply, got.Error, got.Complete, c.Error, c.Complete)
		}
		gw, ww := got.Warning, c.Warning
		if c.Unordered {
			gw, ww = sortedLines(gw), sortedLines(ww)
		}
		if gw != ww {
			t.Errorf("case %d (%s %q):\n got warning %q\nwant warning %q", i, c.Format, c.Reply, got.Warning, c.Warning)
		}
		if len(got.Commands) != len(c.Commands) {
			t.Errorf("case %d (%s %q): %d commands, want %d", i, c.Format, c.Reply, len(got.Commands), len(c.Commands))
			continue
		}
		for k, want := range c.Commands {
			if gc := got.Commands[k]; gc.Keystrokes != want.Keystrokes || pyjson.FloatRepr(gc.Duration) != want.Duration {
				t.Errorf("case %d command %d: %q %s, want %q %s", i, k, gc.Keystrokes, pyjson.FloatRepr(gc.Duration), want.Keystrokes, want.Duration)
			}
		}
	}
	for i, c := range g.Salvage {
		got, ok := xmlParser{}.salvage(c.Reply)
		if ok != (c.Salvaged != nil) || ok && got != *c.Salvaged {
			t.Errorf("salvage %d (%q): %q %v, want %v", i, c.Reply, got, ok, c.Salvaged)
		}
	}
}

func sortedLines(s string) string {
	l := strings.Split(s, "\n")
	slices.Sort(l)
	return strings.Join(l, "\n")
}

// TestUnknownFieldsInDocumentOrder: where Harbor joins a Python set (its
// order changes from one process to the next), the document's order.
func TestUnknownFieldsInDocumentOrder(t *testing.T) {
	got, _ := jsonParser{}.Parse(`{"analysis": "", "plan": "", "commands": [{"keystrokes": "x", "duration": 1, "zeta": 1, "alpha": 2}]}`)
	if want := "- Command 1: Unknown fields: zeta, alpha"; got.Warning != want {
		t.Errorf("warning %q, want %q", got.Warning, want)
	}
	got, _ = xmlParser{}.Parse(`<response><zeta/><commands></commands><alpha>x</alpha><zeta/></response>`)
	want := "- Missing <analysis> section\n- Missing <plan> section\n- Unknown tag found: <zeta>, expected analysis/plan/commands/task_complete\n- Unknown tag found: <alpha>, expected analysis/plan/commands/task_complete\n- Commands section is empty; not taking any action. If you want to wait a specific amount of time please use `sleep`, but if you're waiting for a command to finish then continue to wait."
	if got.Warning != want {
		t.Errorf("warning %q,\nwant %q", got.Warning, want)
	}
}

func FuzzParsers(f *testing.F) {
	var g golden
	readJSON(f, "testdata/parse.json", &g)
	for _, c := range g.Cases[:120] {
		f.Add(c.Reply)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		for _, p := range []Parser{jsonParser{}, xmlParser{}} {
			r, err := p.Parse(reply)
			if err == nil && r.Error != "" && len(r.Commands) > 0 {
				t.Fatalf("%s: commands with an error", p.format())
			}
		}
		xmlParser{}.salvage(reply)
	})
}
