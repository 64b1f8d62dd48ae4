package serve

import "testing"

// TestStillOurs pins the rule that tells an env_id the API still holds
// as this run's from one of an API started afresh.
func TestStillOurs(t *testing.T) {
	old := envLine{EnvID: 1, Name: "rl_1", Step: 10}
	for _, tc := range []struct {
		now  envLine
		want bool
	}{
		{envLine{EnvID: 2, Name: "rl_2", Step: 10}, true},
		{envLine{EnvID: 5, Name: "rl_3", Step: 12}, true},
		{envLine{EnvID: 1, Name: "rl_1", Step: 10}, false}, // the same number again: a new list
		{envLine{EnvID: 0, Name: "rl_0", Step: 12}, false},
		{envLine{EnvID: 3, Name: "rl_0", Step: 12}, false}, // others registered first in a new list
		{envLine{EnvID: 2, Name: "rl_2", Step: 3}, false},  // the step went back
		{envLine{EnvID: 2, Name: "renamed_0", Step: 10}, true},
	} {
		if got, why := stillOurs(old, tc.now); got != tc.want || got == (why != "") {
			t.Errorf("%+v: %v %q, want %v", tc.now, got, why, tc.want)
		}
	}
}
