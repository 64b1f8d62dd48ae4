package rundir

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestNonFiniteRecordsLoad: lines with NaN, Infinity (as Python's json
// writes them) and numbers past float64 load with those made finite, and
// a record that holds such numbers in memory is still written.
func TestNonFiniteRecordsLoad(t *testing.T) {
	dir := t.TempDir()
	lines := `{"rollout_id":"a#0","task_id":"a","attempt":0,"outcome":"passed","reward":NaN,"scores":{"x":Infinity,"y":-Infinity},"phases":{"agent":1e999}}
{"rollout_id":"b#0","task_id":"b","attempt":0,"outcome":"failed","reward":-1e400,"error":"NaN and Infinity in a string stay","verifier_reward":Infinity,"rewards":[{"name":"j","weight":1,"reward":NaN}]}
`
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := s.Records()
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	a, b := recs[0], recs[1]
	if a.Reward != 0 || a.Scores["x"] != math.MaxFloat64 || a.Scores["y"] != -math.MaxFloat64 || a.Phases["agent"] != math.MaxFloat64 {
		t.Errorf("a: %+v", a)
	}
	if b.Reward != -math.MaxFloat64 || *b.VerifierReward != math.MaxFloat64 || b.Rewards[0].Reward != 0 || b.Error != "NaN and Infinity in a string stay" {
		t.Errorf("b: %+v", b)
	}
	inf := math.Inf(1)
	if err := s.Append(Record{RolloutID: "c#0", TaskID: "c", Reward: math.NaN(), Scores: map[string]float64{"z": inf}, VerifierReward: &inf}); err != nil {
		t.Fatalf("append a record with NaN: %v", err)
	}
	if !math.IsInf(inf, 1) {
		t.Fatal("Append changed the caller's number")
	}
	recs, err = Read(dir)
	if err != nil || len(recs) != 3 || recs[2].Scores["z"] != math.MaxFloat64 {
		t.Fatalf("after append: %v %+v", err, recs)
	}
}

func TestFiniteJSON(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{`{"a":NaN}`, `{"a":0}`},
		{`[Infinity,-Infinity,1e309,-1e309,1.5,-2]`, `[1.7976931348623157e+308,-1.7976931348623157e+308,1.7976931348623157e+308,-1.7976931348623157e+308,1.5,-2]`},
		{`{"s":"NaN \" Infinity 1e999"}`, `{"s":"NaN \" Infinity 1e999"}`},
	} {
		got, _ := finiteJSON([]byte(tc.in))
		if string(got) != tc.out {
			t.Errorf("finiteJSON(%s) = %s, want %s", tc.in, got, tc.out)
		}
	}
}

// FuzzFiniteJSON: finiteJSON never panics, leaves JSON it need not change
// as it was, and what it makes of a value with non-finite numbers decodes.
func FuzzFiniteJSON(f *testing.F) {
	for _, s := range []string{`{"a":NaN}`, `[1e999,"x\"",-Infinity]`, `{"reward":1e308}`, `"\`, `-`, `{"a":[-1e-400]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, changed := finiteJSON(b)
		var v any
		if json.Unmarshal(b, &v) == nil {
			if changed {
				// Only numbers past float64 change valid JSON.
				var w any
				if err := json.Unmarshal(out, &w); err != nil {
					t.Fatalf("%q became %q, which does not decode: %v", b, out, err)
				}
				return
			}
			var w any
			if err := json.Unmarshal(out, &w); err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("valid %q became %q", b, out)
			}
		}
	})
}
