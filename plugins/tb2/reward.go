package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
)

// The reward files test.sh writes, in the order Harbor's verifier looks
// for them: reward.json first, then reward.txt (harbor-framework/harbor
// src/harbor/verifier/verifier.py at 738fdfba; the order was the other way
// round before harbor-framework/harbor#1620, May 2026).
const (
	rewardJSONPath = verifierDir + "/reward.json"
	rewardTextPath = verifierDir + "/reward.txt"
)

// maxRewardFile bounds what is read of a reward file.
const maxRewardFile = 1 << 20

// Reward is what the reward files said.
type Reward struct {
	Value  float64
	Scores map[string]float64 // reward.json's keys; nil for reward.txt
	Source string             // the file that gave it
}

// errNoReward marks what test.sh left as no reward Harbor can read: no
// file, an empty one, one that does not parse. Harbor raises
// RewardFileNotFoundError, RewardFileEmptyError or VerifierOutputParseError
// (src/harbor/verifier/verifier.py at 738fdfba) and records the trial
// without a reward; an error without it is the host's failing to read.
var errNoReward = errors.New("no reward")

// readReward reads the reward as Harbor's verifier does: reward.json when
// it exists (an object of numbers), else reward.txt (one number, as
// Python's float() reads it). An empty file, a file that does not parse
// and no file at all are errors that match errNoReward, as in Harbor.
func readReward() (Reward, error) {
	r, err := findReward()
	if err != nil && !errors.Is(err, errSandbox) {
		err = fmt.Errorf("%w: %w", errNoReward, err)
	}
	return r, err
}

// errSandbox marks a reward file the sandbox could not read.
var errSandbox = errors.New("read the reward")

func findReward() (Reward, error) {
	for _, p := range []string{rewardJSONPath, rewardTextPath} {
		b, size, err := sdk.ReadFileHead(p, maxRewardFile)
		if errors.Is(err, sdk.ErrNotFound) {
			continue
		}
		if err != nil {
			return Reward{}, fmt.Errorf("%w %s: %w", errSandbox, p, err)
		}
		if size > maxRewardFile {
			return Reward{}, fmt.Errorf("%s is %d bytes, over the %d read", p, size, maxRewardFile)
		}
		if p == rewardJSONPath {
			return parseRewardJSON(b)
		}
		return parseRewardText(b)
	}
	return Reward{}, errors.New("test.sh wrote neither " + rewardTextPath + " nor " + rewardJSONPath)
}

// parseRewardText is Verifier._parse_reward_text: {"reward": float(text)}.
func parseRewardText(b []byte) (Reward, error) {
	if len(b) == 0 {
		return Reward{}, errors.New("reward.txt is empty")
	}
	s, ok := pyText(b)
	f, num := pyFloat(s)
	if !ok || !num {
		return Reward{}, fmt.Errorf("reward.txt holds %q, not a number", clip(string(b), 80))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Reward{}, fmt.Errorf("reward.txt holds %q, not a finite number", clip(string(b), 80))
	}
	return Reward{Value: f, Source: rewardTextPath}, nil
}

// parseRewardJSON is Verifier._parse_reward_json and VerifierResult's
// validation: an object whose values pydantic reads as float | int
// (numbers, booleans, numeric strings), or null for no rewards. Python's
// json also reads NaN and Infinity, which are not finite and refused here.
// The reward is the "reward" key, else the only key (Harbor's metrics take
// the single value whatever its name), else the mean of the keys.
func parseRewardJSON(b []byte) (Reward, error) {
	r := Reward{Source: rewardJSONPath}
	if len(b) == 0 {
		return r, errors.New("reward.json is empty")
	}
	s, ok := pyText(b)
	if !ok {
		return r, errors.New("reward.json is not UTF-8")
	}
	if strings.TrimSpace(s) == "null" {
		return r, nil
	}
	dec := json.NewDecoder(bytes.NewReader(pyJSONSpecials([]byte(s))))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return r, fmt.Errorf("reward.json is not an object of numbers: %v", err)
	}
	if dec.More() {
		return r, errors.New("reward.json holds more than one JSON value")
	}
	r.Scores = make(map[string]float64, len(m))
	for k, v := range m {
		f, ok := rewardNumber(v)
		if !ok {
			return r, fmt.Errorf("reward.json: %q is %s, not a number", k, clip(fmt.Sprint(v), 40))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return r, fmt.Errorf("reward.json: %q is not a finite number", k)
		}
		r.Scores[k] = f
	}
	switch v, ok := r.Scores["reward"]; {
	case ok:
		r.Value = v
	case len(r.Scores) > 0:
		sum := 0.0
		for _, k := range slices.Sorted(maps.Keys(r.Scores)) {
			sum += r.Scores[k]
		}
		r.Value = sum / float64(len(r.Scores))
	}
	return r, nil
}

// rewardNumber converts one value as pydantic's float | int does.
func rewardNumber(v any) (float64, bool) {
	switch t := v.(type) {
	case json.Number:
		f, err := t.Float64()
		return f, err == nil || isRange(err)
	case bool:
		if t {
			return 1, true
		}
		return 0, true
	case string:
		return pyFloat(t)
	}
	return 0, false
}

// pyJSONSpecials quotes the bare NaN, Infinity and -Infinity Python's json
// module reads, so Go's decoder sees them as strings pyFloat reads.
func pyJSONSpecials(b []byte) []byte {
	var out []byte
	inStr, esc := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			out = append(out, c)
			continue
		}
		if c == '"' {
			inStr = true
			out = append(out, c)
			continue
		}
		matched := false
		for _, w := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(b[i:], []byte(w)) {
				out = append(out, '"')
				out = append(out, w...)
				out = append(out, '"')
				i += len(w) - 1
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, c)
		}
	}
	return out
}

// clip keeps the first n bytes of s.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
