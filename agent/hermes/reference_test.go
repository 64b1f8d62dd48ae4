package hermes

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// The testdata/*.jsonl files hold inputs and the outputs hermes-agent's
// own functions gave for them, at commit Commit under CPython 3.11:
// agent/redact.py's redact_sensitive_text, tools/ansi_strip.py's
// strip_ansi, tools/fuzzy_match.py's fuzzy_find_and_replace and
// tools/patch_parser.py's parse_v4a_patch, on generated inputs built to
// reach every pattern, strategy and marker.

func eachCase(t *testing.T, file string, f func(line []byte)) {
	t.Helper()
	fh, err := os.Open("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
		f(sc.Bytes())
	}
	if n < 100 {
		t.Fatalf("%s: only %d cases", file, n)
	}
}

func TestRedactMatchesHermes(t *testing.T) {
	eachCase(t, "redact.jsonl", func(line []byte) {
		var c struct{ In, Out string }
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		if got := redact(c.In); got != c.Out {
			t.Errorf("redact(%q)\n got %q\nwant %q", c.In, got, c.Out)
		}
	})
}

func TestStripANSIMatchesHermes(t *testing.T) {
	eachCase(t, "ansi.jsonl", func(line []byte) {
		var c struct{ In, Out string }
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		if got := stripANSI(c.In); got != c.Out {
			t.Errorf("stripANSI(%q) = %q, want %q", c.In, got, c.Out)
		}
	})
}

func TestFuzzyMatchesHermes(t *testing.T) {
	eachCase(t, "fuzzy.jsonl", func(line []byte) {
		var c struct {
			Content, Old, New string
			All               bool
			Want              struct {
				Content   string
				Count     int
				Error     *string
				Exception string
			}
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		got, n, msg, err := fuzzyReplace(c.Content, c.Old, c.New, c.All)
		if c.Want.Exception != "" {
			if err == nil {
				t.Errorf("fuzzy(%q, %q): no exception, want %s", c.Content, c.Old, c.Want.Exception)
			}
			return
		}
		want := ""
		if c.Want.Error != nil {
			want = *c.Want.Error
		}
		if err != nil || got != c.Want.Content || n != c.Want.Count || msg != want {
			t.Errorf("fuzzy(%q, %q, %q, %v)\n got %q %d %q %v\nwant %q %d %q", c.Content, c.Old, c.New, c.All, got, n, msg, err, c.Want.Content, c.Want.Count, want)
		}
	})
}

func TestParseV4AMatchesHermes(t *testing.T) {
	kinds := map[opKind]string{opAdd: "add", opUpdate: "update", opDelete: "delete", opMove: "move"}
	eachCase(t, "v4a.jsonl", func(line []byte) {
		var c struct {
			Patch string
			Ops   json.RawMessage
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		var got []any
		for _, op := range parseV4A(c.Patch) {
			var np any
			if op.kind == opMove {
				np = op.newPath
			}
			hunks := []any{}
			for _, h := range op.hunks {
				lines := []any{}
				for _, l := range h.lines {
					lines = append(lines, []any{string(l.prefix), l.content})
				}
				var hint any
				if h.hint != nil {
					hint = *h.hint
				}
				hunks = append(hunks, map[string]any{"hint": hint, "lines": lines})
			}
			got = append(got, map[string]any{"kind": kinds[op.kind], "path": op.path, "new_path": np, "hunks": hunks})
		}
		if got == nil {
			got = []any{}
		}
		g, _ := json.Marshal(got)
		var want any
		json.Unmarshal(c.Ops, &want)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("parse %q\n got %s\nwant %s", c.Patch, g, w)
		}
	})
}
