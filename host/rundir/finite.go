package rundir

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
)

// A record's numbers are finite: JSON has no infinity, so a record with
// one could not be written, and one infinity in results.jsonl makes every
// sum and mean of the run infinite (summary.json then cannot be written
// either). The plugin boundary refuses rewards outside their range; these
// functions make sure whatever a results.jsonl holds still loads and adds
// up: one written by another tool (Python's json writes NaN and Infinity),
// or by an older proctor that kept rewards of 1e308.

// Finite is x where it is finite; NaN is 0, and an infinity the largest
// float64 of its sign.
func Finite(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return 0
	case math.IsInf(x, 1):
		return math.MaxFloat64
	case math.IsInf(x, -1):
		return -math.MaxFloat64
	}
	return x
}

// finiteMap applies Finite to every value of m, in place.
func finiteMap(m map[string]float64) {
	for k, v := range m {
		m[k] = Finite(v)
	}
}

// makeFinite applies Finite to every number of rec that a reward, a price
// or a clock made.
func (rec *Record) makeFinite() {
	rec.Reward = Finite(rec.Reward)
	rec.CostUSD = Finite(rec.CostUSD)
	if rec.VerifierReward != nil {
		v := Finite(*rec.VerifierReward)
		rec.VerifierReward = &v
	}
	finiteMap(rec.Scores)
	finiteMap(rec.Phases)
	for i := range rec.Rewards {
		rs := &rec.Rewards[i]
		rs.Weight, rs.Reward = Finite(rs.Weight), Finite(rs.Reward)
		finiteMap(rs.Scores)
	}
}

// finiteCopy is rec made finite, sharing none of its maps with rec.
func (rec Record) finiteCopy() Record {
	rec.Scores, rec.Phases = maps.Clone(rec.Scores), maps.Clone(rec.Phases)
	rec.Rewards = slices.Clone(rec.Rewards)
	for i := range rec.Rewards {
		rec.Rewards[i].Scores = maps.Clone(rec.Rewards[i].Scores)
	}
	rec.makeFinite()
	return rec
}

// decodeRecord decodes one line of results.jsonl. A line that is not JSON
// only because of NaN, Infinity or a number past float64 is read with
// those made finite.
func decodeRecord(line []byte, rec *Record) error {
	err := json.Unmarshal(line, rec)
	if err != nil {
		fixed, changed := finiteJSON(line)
		if !changed {
			return err
		}
		*rec = Record{}
		if json.Unmarshal(fixed, rec) != nil {
			return err
		}
	}
	rec.makeFinite()
	return nil
}

var (
	maxText = []byte(strconv.FormatFloat(math.MaxFloat64, 'g', -1, 64))
	minText = []byte(strconv.FormatFloat(-math.MaxFloat64, 'g', -1, 64))
)

// finiteJSON rewrites, outside strings, the words NaN, Infinity and
// -Infinity and numbers past float64's range as finite numbers (as Finite
// does); changed says whether it rewrote anything.
func finiteJSON(b []byte) (out []byte, changed bool) {
	out = make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			j := endOfString(b, i)
			out = append(out, b[i:j]...)
			i = j
		case bytes.HasPrefix(b[i:], []byte("NaN")):
			out, i, changed = append(out, '0'), i+3, true
		case bytes.HasPrefix(b[i:], []byte("Infinity")):
			out, i, changed = append(out, maxText...), i+8, true
		case bytes.HasPrefix(b[i:], []byte("-Infinity")):
			out, i, changed = append(out, minText...), i+9, true
		case c == '-' || c >= '0' && c <= '9':
			j := i + 1
			for j < len(b) && bytes.IndexByte([]byte("0123456789.eE+-"), b[j]) >= 0 {
				j++
			}
			num := b[i:j]
			if f, err := strconv.ParseFloat(string(num), 64); err != nil && math.IsInf(f, 0) {
				if f > 0 {
					num = maxText
				} else {
					num = minText
				}
				changed = true
			}
			out = append(out, num...)
			i = j
		default:
			out = append(out, c)
			i++
		}
	}
	return out, changed
}

// endOfString returns the index after the string that starts at b[i] (a
// quote), or len(b) if it does not end.
func endOfString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}
