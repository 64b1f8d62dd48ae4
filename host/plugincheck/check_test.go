package plugincheck

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
)

// TestCheckLines: each outcome starts its line as plugin check and plugin
// test print it.
func TestCheckLines(t *testing.T) {
	for _, tc := range []struct {
		c    Check
		want string
	}{
		{Check{Name: "describe", Outcome: OK, Detail: "x 1"}, "ok   describe: x 1"},
		{Check{Name: "no rollout.verify", Outcome: Warn, Detail: "why"}, "warn no rollout.verify: why"},
		{Check{Name: "oracle on t", Outcome: Fail, Detail: "failed (reward 0): a\n     b"}, "FAIL oracle on t: failed (reward 0): a\n     b"},
		{Check{Name: "reward.score", Outcome: Skip, Detail: "why"}, "skip reward.score: why"},
		{Check{Name: "skipped t", Outcome: More, Detail: "why"}, "     skipped t: why"},
		{Check{Name: "alone", Outcome: Note}, "note alone"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
	if !(Check{Outcome: OK}).Counted() || !(Check{Outcome: Fail}).Counted() || (Check{Outcome: Warn}).Counted() {
		t.Error("only passed and failed checks count")
	}
}

// TestJudgeRollout: the oracle's rollouts must pass and nop's must not; a
// failed stacked reward fails the rollout's check.
func TestJudgeRollout(t *testing.T) {
	for _, tc := range []struct {
		kind      string
		rec       rundir.Record
		hasVerify bool
		want      []Outcome
	}{
		{"oracle", rundir.Record{TaskID: "t", Outcome: rundir.OutcomePassed, Reward: 1}, true, []Outcome{OK}},
		{"oracle", rundir.Record{TaskID: "t", Outcome: rundir.OutcomeFailed}, true, []Outcome{Fail}},
		{"nop", rundir.Record{TaskID: "t", Outcome: rundir.OutcomeFailed}, true, []Outcome{OK}},
		{"nop", rundir.Record{TaskID: "t", Outcome: rundir.OutcomePassed, Reward: 1}, true, []Outcome{Fail}},
		{"oracle", rundir.Record{TaskID: "t", Outcome: rundir.OutcomeInfraError}, false, nil},
		{"nop", rundir.Record{TaskID: "t", Outcome: rundir.OutcomeInfraError}, false, []Outcome{Fail}},
		{"oracle", rundir.Record{TaskID: "t", Outcome: rundir.OutcomeVerifierFailed}, true, []Outcome{Fail}},
		{"oracle", rundir.Record{TaskID: "t", Outcome: rundir.OutcomePassed, Reward: 1,
			Rewards: []rundir.RewardScore{{Name: "judge", Error: "no answer"}}}, true, []Outcome{Fail, OK}},
	} {
		var tr tester
		tr.judgeRollout(tc.kind, tc.rec, tc.hasVerify)
		var got []Outcome
		for _, c := range tr.checks {
			got = append(got, c.Outcome)
			if c.Name != tc.kind+" on t" {
				t.Errorf("%s %s: check named %q", tc.kind, tc.rec.Outcome, c.Name)
			}
		}
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) || (len(got) > 1 && got[1] != tc.want[1]) {
			t.Errorf("%s %s (verify %v): %v, want %v", tc.kind, tc.rec.Outcome, tc.hasVerify, got, tc.want)
		}
	}
}

func TestFirstLines(t *testing.T) {
	if got := firstLines("a\nb\nc\n", 2); got != "a\n     b\n     ..." {
		t.Errorf("%q", got)
	}
	if got := firstLines(" a\nb ", 8); got != "a\n     b" {
		t.Errorf("%q", got)
	}
}

// TestRef: a relative path on the command line is the current folder's;
// bundled names and OCI references stay as they are.
func TestRef(t *testing.T) {
	wd, _ := os.Getwd()
	for ref, want := range map[string]string{
		"":                    "",
		"tb2":                 "tb2",
		"oci://r.example/p:1": "oci://r.example/p:1",
		"/abs/p.wasm":         "/abs/p.wasm",
		"rel/p.wasm":          filepath.Join(wd, "rel/p.wasm"),
	} {
		if got := Ref(ref); got != want {
			t.Errorf("Ref(%q) = %q, want %q", ref, got, want)
		}
	}
}
