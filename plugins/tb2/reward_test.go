//go:build !wasip1

package main

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/sdktest"
)

// TestRewardPrecedence pins the order of harbor-framework/harbor
// src/harbor/verifier/verifier.py at 738fdfba: reward.json when it exists,
// else reward.txt; an empty file is an error even when the other file
// would do. The file that gave the reward is recorded.
func TestRewardPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		txt, json  *string
		reward     float64
		scores     map[string]float64
		source     string
		errContain string
	}{
		{name: "both", txt: ptr("0"), json: ptr(`{"reward": 0.75, "style": 0.5}`), reward: 0.75, scores: map[string]float64{"reward": 0.75, "style": 0.5}, source: rewardJSONPath},
		{name: "txt only", txt: ptr("1\n"), reward: 1, source: rewardTextPath},
		{name: "json only", json: ptr(`{"reward": 1}`), reward: 1, scores: map[string]float64{"reward": 1}, source: rewardJSONPath},
		{name: "empty json wins over txt", txt: ptr("1"), json: ptr(""), errContain: "reward.json is empty"},
		{name: "empty txt", txt: ptr(""), errContain: "reward.txt is empty"},
		{name: "blank txt", txt: ptr(" \n"), errContain: "not a number"},
		{name: "neither", errContain: "no reward"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := sdktest.New(t)
			os.MkdirAll(h.Path(verifierDir), 0o755)
			if tc.txt != nil {
				os.WriteFile(h.Path(rewardTextPath), []byte(*tc.txt), 0o644)
			}
			if tc.json != nil {
				os.WriteFile(h.Path(rewardJSONPath), []byte(*tc.json), 0o644)
			}
			r, err := readReward()
			if tc.errContain != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContain) {
					t.Fatalf("want an error with %q, got %+v %v", tc.errContain, r, err)
				}
				return
			}
			if err != nil || r.Value != tc.reward || r.Source != tc.source || !reflect.DeepEqual(r.Scores, tc.scores) {
				t.Fatalf("%+v %v", r, err)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestRewardJSON pins _parse_reward_json and VerifierResult's validation
// (rewards: dict[str, float | int] | None): numbers, booleans and numeric
// strings count; null and {} give no reward (0 in Harbor's metrics); the
// single key of a one-key object is the reward whatever its name.
func TestRewardJSON(t *testing.T) {
	for _, tc := range []struct {
		in     string
		reward float64
		err    string
	}{
		{`{"reward": 0.5, "a": 1}`, 0.5, ""},
		{`{"score": 0.25}`, 0.25, ""},
		{`{"a": 1, "b": 0}`, 0.5, ""},
		{`{"reward": true}`, 1, ""},
		{`{"reward": "0.5"}`, 0.5, ""},
		{`{"reward": 1e0}`, 1, ""},
		{`{}`, 0, ""},
		{`null`, 0, ""},
		{` {"reward": 1} `, 1, ""},
		{`0.5`, 0, "not an object"},
		{`[1]`, 0, "not an object"},
		{`{"reward": null}`, 0, "not a number"},
		{`{"reward": [1]}`, 0, "not a number"},
		{`{"reward": NaN}`, 0, "not a finite"},
		{`{"reward": -Infinity}`, 0, "not a finite"},
		{`{"reward": "NaN"}`, 0, "not a finite"},
		{`{"reward": 1} {"reward": 0}`, 0, "more than one"},
		{"\xef\xbb\xbf{\"reward\": 1}", 0, "not an object"},
		{"{\"reward\": \"\xff\"}", 0, "not UTF-8"},
	} {
		r, err := parseRewardJSON([]byte(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: want an error with %q, got %+v %v", tc.in, tc.err, r, err)
		case tc.err == "" && (err != nil || r.Value != tc.reward):
			t.Errorf("%q: want %v, got %+v %v", tc.in, tc.reward, r, err)
		}
	}
}

// TestRewardText pins _parse_reward_text: Python's float() of the file's
// text, infinities and NaN refused here because JSON cannot carry them.
func TestRewardText(t *testing.T) {
	for _, tc := range []struct {
		in     string
		reward float64
		ok     bool
	}{
		{"1", 1, true}, {"0\n", 0, true}, {"  0.5  \r\n", 0.5, true}, {"1_0", 10, true}, {"\u0661", 1, true},
		{"1.0 1", 0, false}, {"yes", 0, false}, {"inf", 0, false}, {"nan", 0, false}, {"0x1", 0, false}, {"\xff", 0, false},
	} {
		r, err := parseRewardText([]byte(tc.in))
		if (err == nil) != tc.ok || r.Value != tc.reward {
			t.Errorf("%q: %+v %v", tc.in, r, err)
		}
	}
}

// TestPyFloat compares pyFloat with Python's float() on the golden inputs
// (testdata/pyfloat.golden.json holds what CPython 3.11 answered).
func TestPyFloat(t *testing.T) {
	var cases []struct {
		In    string
		OK    bool
		Value string
	}
	readGolden(t, "testdata/pyfloat.golden.json", &cases)
	for _, c := range cases {
		f, ok := pyFloat(c.In)
		if ok != c.OK {
			t.Errorf("pyFloat(%q) ok = %v, Python says %v", c.In, ok, c.OK)
			continue
		}
		if !ok {
			continue
		}
		var want float64
		switch c.Value {
		case "nan":
			want = math.NaN()
		case "inf":
			want = math.Inf(1)
		case "-inf":
			want = math.Inf(-1)
		default:
			want, _ = strconv.ParseFloat(c.Value, 64)
		}
		if !(f == want || math.IsNaN(f) && math.IsNaN(want)) || math.Signbit(f) != math.Signbit(want) {
			t.Errorf("pyFloat(%q) = %v, Python says %s", c.In, f, c.Value)
		}
	}
}

func FuzzRewardFiles(f *testing.F) {
	for _, s := range []string{`{"reward": 1}`, "1\n", `{"a": NaN, "b": "1_0"}`, "null", `{"x": "inf"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) (Reward, error){parseRewardJSON, parseRewardText} {
			r, err := parse(b)
			if err != nil {
				continue
			}
			// What is accepted must travel as JSON to the host.
			if _, err := json.Marshal(r); err != nil {
				t.Fatalf("%q: %+v: %v", b, r, err)
			}
		}
	})
}
