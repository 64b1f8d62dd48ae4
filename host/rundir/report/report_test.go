package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
)

func TestPassAtK(t *testing.T) {
	for _, c := range []struct {
		n, c, k int
		want    float64
	}{{5, 2, 1, 0.4}, {5, 2, 2, 0.7}, {5, 0, 3, 0}, {5, 5, 1, 1}, {3, 1, 3, 1}} {
		if got := PassAtK(c.n, c.c, c.k); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("pass@%d n=%d c=%d = %v, want %v", c.k, c.n, c.c, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var recs []rundir.Record
	add := func(task, cat string, attempt int, outcome string) {
		recs = append(recs, rundir.Record{TaskID: task, Category: cat, Attempt: attempt, Outcome: outcome, RolloutID: task, Phases: map[string]float64{"agent": 1}})
	}
	add("a", "x", 0, rundir.OutcomePassed)
	add("a", "x", 1, rundir.OutcomeFailed)
	add("b", "y", 0, rundir.OutcomeFailed)
	add("b", "y", 1, rundir.OutcomeInfraError)
	s := Summarize(recs)
	if s.PassRate != 0.25 || math.Abs(s.PassRateScored-1.0/3) > 1e-9 || s.Categories["x"].PassRate != 0.5 {
		t.Fatalf("%+v", s)
	}
	if s.PassAtK["pass@1"] != 0.25 || s.PassAtK["pass@2"] != 0.5 {
		t.Fatalf("pass@k %v", s.PassAtK)
	}
	// task means 0.5 and 0: mean 0.25, sample var 0.125, se sqrt(0.125/2)
	if math.Abs(s.StdErr-math.Sqrt(0.125/2)) > 1e-9 {
		t.Fatalf("stderr %v", s.StdErr)
	}
	var buf bytes.Buffer
	Write(&buf, s, "text")
	if !strings.Contains(buf.String(), "a     x         ✓ ✗       1/2") && !strings.Contains(buf.String(), "✓ ✗") {
		t.Fatalf("table:\n%s", buf.String())
	}
}

// TestSummarizeHugeRewards: rewards whose sum is past float64 (a run that
// recorded 1e308 three times) still give a finite summary that encodes
// (summary.json could not be written, and the run not resumed).
func TestSummarizeHugeRewards(t *testing.T) {
	var recs []rundir.Record
	for i, r := range []float64{math.MaxFloat64, math.MaxFloat64, 1e308, math.Inf(1), math.NaN()} {
		recs = append(recs, rundir.Record{RolloutID: fmt.Sprint(i), TaskID: fmt.Sprint(i), Outcome: rundir.OutcomePassed, Reward: r, CostUSD: r,
			Phases:  map[string]float64{"agent": r},
			Rewards: []rundir.RewardScore{{Name: "j", Weight: 1, Reward: r}}})
	}
	s := Summarize(recs)
	for name, x := range map[string]float64{"mean": s.MeanReward, "cost": s.CostUSD, "judge": s.Rewards["j"].Mean, "phase": s.Phases["agent"].Mean} {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 1e307 {
			t.Errorf("%s = %v, want a large finite number", name, x)
		}
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatalf("summary does not encode: %v", err)
	}
	for _, f := range []string{"text", "md", "json"} {
		if err := Write(io.Discard, s, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestNetworkWithheldReported: tasks that ran without the network they
// asked for are named in the text and Markdown reports, grouped by why.
func TestNetworkWithheldReported(t *testing.T) {
	recs := []rundir.Record{
		{TaskID: "b", Outcome: rundir.OutcomeFailed, NetworkWithheld: "why one"},
		{TaskID: "a", Outcome: rundir.OutcomeFailed, NetworkWithheld: "why one"},
		{TaskID: "c", Outcome: rundir.OutcomePassed, NetworkWithheld: "why two"},
		{TaskID: "d", Outcome: rundir.OutcomePassed, Network: "default"},
	}
	s := Summarize(recs)
	for format, want := range map[string]string{
		"text": "network    withheld from 2 tasks (why one): a, b\nnetwork    withheld from 1 task (why two): c\n",
		"md":   "| network | withheld from 2 tasks (why one): a, b |\n| network | withheld from 1 task (why two): c |\n",
	} {
		var buf bytes.Buffer
		if err := Write(&buf, s, format); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%s report:\n%s\nwant:\n%s", format, buf.String(), want)
		}
	}
	var buf bytes.Buffer
	Write(&buf, Summarize(recs[3:]), "text")
	if strings.Contains(buf.String(), "withheld") {
		t.Errorf("nothing withheld, yet:\n%s", buf.String())
	}
}

// TestVerifierFailedCounts: a verifier that reached no reward is a
// rollout that did not pass, in every denominator (pass rate, excluding
// infra errors, per category, pass@k), and every report names it, as
// Harbor counts a trial without a reward as 0 (src/harbor/metrics/mean.py
// at 738fdfba).
func TestVerifierFailedCounts(t *testing.T) {
	recs := []rundir.Record{
		{RolloutID: "a#0", TaskID: "a", Category: "x", Attempt: 0, Outcome: rundir.OutcomePassed, Reward: 1},
		{RolloutID: "a#1", TaskID: "a", Category: "x", Attempt: 1, Outcome: rundir.OutcomeVerifierFailed},
		{RolloutID: "b#0", TaskID: "b", Category: "y", Attempt: 0, Outcome: rundir.OutcomeVerifierFailed},
		{RolloutID: "b#1", TaskID: "b", Category: "y", Attempt: 1, Outcome: rundir.OutcomeInfraError, ErrorClass: "sandbox"},
	}
	s := Summarize(recs)
	if s.PassRate != 0.25 || math.Abs(s.PassRateScored-1.0/3) > 1e-9 || s.Categories["x"].N != 2 || s.Categories["x"].PassRate != 0.5 ||
		s.PassAtK["pass@1"] != 0.25 || s.Outcomes[rundir.OutcomeVerifierFailed] != 2 || s.MeanReward != 0.25 {
		t.Fatalf("%+v", s)
	}
	var text, md bytes.Buffer
	Write(&text, s, "text")
	Write(&md, s, "md")
	for _, out := range []string{text.String(), md.String()} {
		if !strings.Contains(out, "agent_timeout 0, verifier_failed 2, infra_error 1") || !strings.Contains(out, "✓ ∅") {
			t.Errorf("report:\n%s", out)
		}
	}
	if !strings.Contains(text.String(), "∅ verifier failed") {
		t.Errorf("legend:\n%s", text.String())
	}
}
