package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/report"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestStackedRewards stacks three reward plugins on a real tb2 run: a
// judge that asks the (scripted) model, a plugin that needs no capability,
// and one that traps for real (an out-of-bounds memory access). The trap costs only its own score; the combined
// reward is the weighted sum of the others and the verifier's, and the
// run exits 1 saying which plugin failed; the manifest names every reward
// plugin's bytes; the judge never sees the key.
func TestStackedRewards(t *testing.T) {
	sandboxtest.RequireDocker(t)
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply("Clean and direct.\nSCORE: 8")},
		openaitest.Step{Body: openaitest.Reply("Fine.\nSCORE: 8")},
	)
	defer srv.Close()
	t.Setenv("JUDGE_TEST_KEY", "sk-judge-test-secret")
	root, _ := filepath.Abs("../..")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
[run]
name = "stacked"
attempts = 2
concurrency = 2

[agent]
kind = "replay"
script = %q

[model]
base_url = %q
name = "judge-model"
api_key_env = "JUDGE_TEST_KEY"

[env]
plugin = %q
reward_weight = 1.0

[env.config]
dataset = %q
tasks = ["hello-file"]

[[reward]]
plugin = %q
name = "judge"
weight = 0.5
grants = ["host.info", "model.complete"]
[reward.config]
rubric = "Was the agent direct?"

[[reward]]
plugin = %q
weight = 0.25

[[reward]]
plugin = %q
name = "trap"
`, filepath.Join(root, "testdata/scripts/hello-file.json"), srv.URL(), wasmtest.Build(t, "./plugins/tb2"),
		filepath.Join(root, "testdata/tb2/tasks"), wasmtest.Build(t, "./plugins/judge"), wasmtest.Build(t, "./plugins/toolstats"),
		wasmtest.Build(t, "./host/env/testdata/badreward"))), 0o644)
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	// The trap fails on every rollout: the run says so on stderr and in
	// its summary, and exits 1, as when rollouts end as infra_error.
	if code := run([]string{"eval", cfg, "--out", out}, &stdout, &stderr); code != exitRolloutsErr {
		t.Fatalf("exit %d, want %d: a reward plugin failed\n%s\n%s", code, exitRolloutsErr, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "proctor: error: reward plugin trap failed on 2 of 2 rollouts; the first: ") {
		t.Errorf("stderr does not say the reward plugin failed:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "reward     trap: mean 0.000 over 0 rollouts, 2 errors\n           first error: ") ||
		!strings.Contains(stdout.String(), "reward     judge: mean 0.800 over 2 rollouts, 0 errors; 200 tokens in, 40 out\n") {
		t.Errorf("the report does not sum up the stacked rewards:\n%s", stdout.String())
	}
	store, err := rundir.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	recs := store.Records()
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	checkStackedScores(t, recs)
	var man rundir.Manifest
	b, _ := os.ReadFile(filepath.Join(out, rundir.ManifestFile))
	json.Unmarshal(b, &man)
	if len(man.Rewards) != 3 || man.Rewards[1].Name != "toolstats" || len(man.Rewards[1].SHA256) != 64 {
		t.Errorf("manifest rewards: %+v", man.Rewards)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Auth != "Bearer sk-judge-test-secret" || !strings.Contains(fmt.Sprint(reqs[0].Body["messages"]), "Was the agent direct?") {
		t.Errorf("judge requests: %+v", reqs)
	}
	if bytes.Contains(b, []byte("sk-judge")) {
		t.Error("the key reached the manifest")
	}
}

// checkStackedScores: each rollout has the judge's, toolstats' and the
// trap's scores, and the combined reward is their weighted sum with the
// verifier's.
func checkStackedScores(t *testing.T, recs []rundir.Record) {
	t.Helper()
	for _, rec := range recs {
		if rec.Outcome != rundir.OutcomePassed || rec.VerifierReward == nil || *rec.VerifierReward != 1 || len(rec.Rewards) != 3 {
			t.Fatalf("%s: %+v", rec.RolloutID, rec)
		}
		judge, stats, trap := rec.Rewards[0], rec.Rewards[1], rec.Rewards[2]
		if judge.Name != "judge" || judge.Error != "" || judge.Reward != 0.8 || judge.Scores["score"] != 8 || judge.Usage == nil || judge.Usage.CompletionTokens != 20 {
			t.Errorf("judge: %+v", judge)
		}
		if stats.Name != "toolstats" || stats.Error != "" || stats.Reward != 1 || stats.Scores["tool_calls"] != 2 {
			t.Errorf("toolstats: %+v", stats)
		}
		if trap.Name != "trap" || !strings.Contains(trap.Error, "badreward") || !strings.Contains(trap.Error, "out of bounds memory access") {
			t.Errorf("trap: %+v", trap)
		}
		if want := 1 + 0.5*0.8 + 0.25*1; rec.Reward != want {
			t.Errorf("combined reward %v, want %v", rec.Reward, want)
		}
	}
}

// TestJudgeLocal runs a judge on the local backend (no Docker): the run
// manifest names the model the judge used although the agent is not a
// model, and each judge score keeps its tokens. Without the model.complete
// grant the judge is refused, naming the grant to add.
func TestJudgeLocal(t *testing.T) {
	t.Setenv("PROCTOR_CACHE_DIR", t.TempDir())
	srv := openaitest.New(openaitest.Step{Body: openaitest.Reply("SCORE: 8")}, openaitest.Step{Body: openaitest.Reply("SCORE: 8")})
	defer srv.Close()
	dir := t.TempDir()
	writeConfig := func(grants string) string {
		return localRun(t, filepath.Join(dir, "run.toml"), wasmtest.Build(t, "./plugins/example"), "attempts = 2", "oracle",
			`{ id = "greet", text = "hello" }`,
			fmt.Sprintf("[model]\nbase_url = %q\nname = \"judge-model\"", srv.URL()),
			fmt.Sprintf("[[reward]]\nplugin = %q\nname = \"judge\"\ngrants = %s", wasmtest.Build(t, "./plugins/judge"), grants))
	}
	out := filepath.Join(dir, "run")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"eval", writeConfig(`["host.info", "model.complete"]`), "--out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	var man rundir.Manifest
	b, _ := os.ReadFile(filepath.Join(out, rundir.ManifestFile))
	json.Unmarshal(b, &man)
	if man.Model["name"] != "judge-model" || man.Model["base_url"] != srv.URL() {
		t.Errorf("manifest model: %v", man.Model)
	}
	recs, err := rundir.Read(out)
	if err != nil || len(recs) != 2 {
		t.Fatalf("%d records: %v", len(recs), err)
	}
	for _, rec := range recs {
		j := rec.Rewards[0]
		if j.Error != "" || j.Reward != 0.8 || j.Usage == nil || j.Usage.PromptTokens != 100 || j.Usage.CompletionTokens != 20 {
			t.Errorf("%s: judge score %+v (usage %+v)", rec.RolloutID, j, j.Usage)
		}
	}

	stdout.Reset()
	stderr.Reset()
	code := run([]string{"eval", writeConfig(`["host.info"]`), "--out", filepath.Join(dir, "nogrant")}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "declares model.complete, which the run does not grant") ||
		!strings.Contains(stderr.String(), `hint: grant the capabilities in that [[reward]] table: grants = ["host.info", "model.complete"]`) {
		t.Errorf("a judge without the grant: exit %d\n%s", code, stderr.String())
	}
}

// TestFailedRewardPluginExits1: a run whose rollouts all passed, but whose
// reward plugin failed on every one, exits 1 saying which plugin failed
// and why, as a run with infra errors does; one with none exits 0.
func TestFailedRewardPluginExits1(t *testing.T) {
	s := report.Summary{Outcomes: map[string]int{rundir.OutcomePassed: 3},
		Rewards: map[string]report.RewardStat{"judge": {Errors: 3, FirstError: "plugin judge hook reward.score: no answer within 2m0s"}, "ok": {N: 3, Mean: 1}}}
	var stderr bytes.Buffer
	if err := incomplete(&stderr, s); exitCode(err) != exitRolloutsErr {
		t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitRolloutsErr)
	}
	if want := "proctor: error: reward plugin judge failed on 3 of 3 rollouts; the first: plugin judge hook reward.score: no answer within 2m0s\n"; stderr.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), want)
	}
	s.Rewards = map[string]report.RewardStat{"ok": {N: 3, Mean: 1}}
	stderr.Reset()
	if err := incomplete(&stderr, s); err != nil || stderr.Len() != 0 {
		t.Errorf("a run with nothing missing: %v, %q", err, stderr.String())
	}
}
