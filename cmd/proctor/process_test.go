package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestProcessGroups generates one group of three rollouts with an endpoint
// that returns token ids and logprobs: the group's tokens are exactly each
// rollout's last prompt and completion ids, the masks open exactly the
// tokens the model generated, scores are the verifier's, attempts sample
// at the configured temperatures; a resume after a torn write neither
// loses nor repeats a group.
func TestProcessGroups(t *testing.T) {
	sandboxtest.RequireDocker(t)
	write := openaitest.Step{Body: openaitest.Reply("I will write it.", openaitest.Call{Name: "write_file", Args: map[string]any{"path": "/tmp/hello.txt", "content": "Hello, world!\n"}})}
	done := openaitest.Step{Body: openaitest.Reply("Done.")}
	srv := openaitest.New(write, done, done, write, done)
	defer srv.Close()
	root, _ := filepath.Abs("../..")
	out := filepath.Join(t.TempDir(), "proc")
	args := []string{"process", filepath.Join(root, "examples/quickstart.toml"),
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file"]`,
		"--set", "agent.kind=llm", "--set", "model.base_url=" + srv.URL(), "--set", "model.name=scripted",
		"--set", "model.return_tokens=true", "--set", "model.send_seed=true", "--set", "run.concurrency=1",
		"--set", "process.group_size=3", "--set", "process.temperatures=[0.5, 1.0]",
		"--out", out}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	groups := lines(t, filepath.Join(out, rundir.GroupsFile))
	if len(groups) != 1 {
		t.Fatalf("%d groups", len(groups))
	}
	var g export.ScoredDataGroup
	if err := json.Unmarshal([]byte(groups[0]), &g); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Scores, []float64{1, 0, 1}) || len(g.Tokens) != 3 || len(g.Masks) != 3 || len(g.Messages) != 3 || len(g.InferenceLogprobs) != 3 {
		t.Fatalf("group: scores %v, %d token lists, %d mask lists", g.Scores, len(g.Tokens), len(g.Masks))
	}
	checkGroupTokens(t, out, g)
	checkSampling(t, srv.Requests(), g)
	if n := len(lines(t, filepath.Join(out, rundir.SFTFile))); n != 3 {
		t.Errorf("%d SFT lines, want 3", n)
	}
	var man rundir.Manifest
	b, _ := os.ReadFile(filepath.Join(out, rundir.ManifestFile))
	json.Unmarshal(b, &man)
	if man.Process == nil || man.Process.Groups != 1 || man.Process.MessagesGroups != 0 || man.Process.Tokens != "exact" || man.Process.SFT != 3 {
		t.Fatalf("manifest process: %+v", man.Process)
	}

	checkExports(t, out, groups[0])

	// A kill after the group line but before its index entry, with a torn
	// line after it: the resume cuts the tail and writes the group once.
	idx := filepath.Join(out, rundir.IndexFile)
	os.WriteFile(idx, nil, 0o644)
	f, _ := os.OpenFile(filepath.Join(out, rundir.GroupsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"tokens":[[1,2`)
	f.Close()
	stdout.Reset()
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, stderr.String())
	}
	if got := lines(t, filepath.Join(out, rundir.GroupsFile)); len(got) != 1 || got[0] != groups[0] {
		t.Fatalf("after resume: %d groups", len(got))
	}
	if n := len(lines(t, filepath.Join(out, rundir.SFTFile))); n != 3 {
		t.Errorf("after resume: %d SFT lines", n)
	}
	if len(srv.Requests()) != 5 {
		t.Errorf("the resume ran rollouts again: %d requests", len(srv.Requests()))
	}
}

// checkOneGroupPerTask: each of the tasks t0, t1, ... of the run in out
// has its group once in groups.messages.jsonl, made of its own two
// rollouts, and one entry in process.jsonl.
func checkOneGroupPerTask(t *testing.T, out string, tasks int) {
	t.Helper()
	// Each task's group once, made of that task's two rollouts: a group
	// written twice and another lost would leave the count right.
	groups := lines(t, filepath.Join(out, rundir.MessagesFile))
	owners := map[string]int{}
	for _, g := range groups {
		var sg export.MessagesGroup
		if err := json.Unmarshal([]byte(g), &sg); err != nil || len(sg.Scores) != 2 || len(sg.Messages) != 2 {
			t.Fatalf("bad group line: %v %s", err, g)
		}
		var ids []string
		for _, msgs := range sg.Messages {
			task := ""
			for _, m := range msgs {
				if sub := regexp.MustCompile(`"(t\d)"`).FindStringSubmatch(m.Content); m.Role == "user" && sub != nil {
					task = sub[1]
				}
			}
			ids = append(ids, task)
		}
		if ids[0] == "" || ids[0] != ids[1] {
			t.Fatalf("a group of rollouts of tasks %v", ids)
		}
		owners[ids[0]]++
	}
	for i := range tasks {
		if id := fmt.Sprintf("t%d", i); owners[id] != 1 {
			t.Errorf("task %s has %d groups, want 1 (groups by task: %v)", id, owners[id], owners)
		}
	}
	if len(groups) != tasks {
		t.Errorf("%d groups after the resume, want %d", len(groups), tasks)
	}
	entries := map[string]int{}
	for _, l := range lines(t, filepath.Join(out, rundir.IndexFile)) {
		var e struct {
			TaskID string `json:"task_id"`
		}
		json.Unmarshal([]byte(l), &e)
		entries[e.TaskID]++
	}
	if len(entries) != tasks {
		t.Errorf("process.jsonl entries by task: %v", entries)
	}
	for id, n := range entries {
		if n != 1 {
			t.Errorf("task %s has %d entries in process.jsonl", id, n)
		}
	}
}

// checkGroupTokens checks the group g of the run in out against each
// rollout's transcript (see checkAlignment).
func checkGroupTokens(t *testing.T, out string, g export.ScoredDataGroup) {
	t.Helper()
	store, err := rundir.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	recs := store.Records()
	store.Close()
	slices.SortFunc(recs, func(a, b rundir.Record) int { return a.Attempt - b.Attempt })
	for i, rec := range recs {
		tr, err := export.ReadTrajectory(filepath.Join(out, rec.Transcript))
		if err != nil {
			t.Fatal(err)
		}
		checkAlignment(t, i, tr, g.Tokens[i], g.Masks[i], g.InferenceLogprobs[i])
	}
}

// checkSampling: attempts 0, 1, 2 sample at 0.5, 1.0, 0.5 with a seed of
// their own, and the group tells the trainer each rollout's temperature.
func checkSampling(t *testing.T, reqs []openaitest.Request, g export.ScoredDataGroup) {
	t.Helper()
	var temps, seeds []float64
	for _, r := range reqs {
		temps = append(temps, r.Body["temperature"].(float64))
		seed, _ := r.Body["seed"].(float64)
		seeds = append(seeds, seed)
		if r.Body["return_token_ids"] != true || r.Body["logprobs"] != true {
			t.Errorf("request without token ids or logprobs asked: %v", r.Body)
		}
	}
	if !slices.Equal(temps, []float64{0.5, 0.5, 1.0, 0.5, 0.5}) {
		t.Errorf("temperatures by request %v: attempts 0, 1, 2 sample at 0.5, 1.0, 0.5", temps)
	}
	// The trainer learns each rollout's temperature from the group.
	if got, _ := json.Marshal(g.Overrides); string(got) != `[{"temperature":0.5},{"temperature":1},{"temperature":0.5}]` {
		t.Errorf("overrides %s", got)
	}
	if got, _ := json.Marshal(g.GroupOverrides); string(got) != `{"group_size":3}` {
		t.Errorf("group_overrides %s", got)
	}
	if seeds[0] == 0 || seeds[0] != seeds[1] || seeds[3] != seeds[4] || seeds[0] == seeds[2] || seeds[0] == seeds[3] || seeds[2] == seeds[3] {
		t.Errorf("seeds by request %v: one per rollout, different between attempts", seeds)
	}
}

// checkExports: export makes the same group from the finished run in
// out, and ATIF files.
func checkExports(t *testing.T, out, group string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	exported := filepath.Join(t.TempDir(), "groups.jsonl")
	if code := run([]string{"export", out, "--format", "atropos", "-o", exported}, &stdout, &stderr); code != 0 {
		t.Fatalf("export: exit %d\n%s", code, stderr.String())
	}
	if got := lines(t, exported); len(got) != 1 || got[0] != group {
		t.Errorf("export atropos differs from the process run's group")
	}
	atif := filepath.Join(t.TempDir(), "atif")
	if code := run([]string{"export", out, "--format", "atif", "-o", atif}, &stdout, &stderr); code != 0 {
		t.Fatalf("export atif: exit %d\n%s", code, stderr.String())
	}
	docs, _ := filepath.Glob(filepath.Join(atif, "*.json"))
	if len(docs) != 3 {
		t.Fatalf("%d ATIF documents, want 3", len(docs))
	}
	var doc struct {
		SchemaVersion string           `json:"schema_version"`
		Steps         []map[string]any `json:"steps"`
	}
	b, _ := os.ReadFile(docs[0])
	if err := json.Unmarshal(b, &doc); err != nil || doc.SchemaVersion != "ATIF-v1.7" || len(doc.Steps) < 3 {
		t.Errorf("ATIF document: %v %s", err, b)
	}

}

// checkAlignment: tokens are the last turn's prompt and completion ids;
// every turn's completion sits at its place, unmasked, with its logprobs;
// everything else is masked.
func checkAlignment(t *testing.T, i int, tr *agent.Trajectory, tokens, masks []int, logprobs []float64) {
	t.Helper()
	prompts, err := agent.FullPrompts(tr.Turns)
	if err != nil {
		t.Fatal(err)
	}
	last := tr.Turns[len(tr.Turns)-1]
	want := append(slices.Clone(prompts[len(prompts)-1]), last.CompletionTokenIDs...)
	if !slices.Equal(tokens, want) {
		t.Fatalf("rollout %d: tokens are not the last prompt and completion ids", i)
	}
	if len(tr.Turns) > 1 && tr.Turns[1].PromptPrefix == 0 {
		t.Errorf("rollout %d: the second prompt does not share the first call's ids", i)
	}
	open := make([]bool, len(tokens))
	for ti, turn := range tr.Turns {
		at := len(prompts[ti])
		if !slices.Equal(tokens[at:at+len(turn.CompletionTokenIDs)], turn.CompletionTokenIDs) {
			t.Fatalf("rollout %d turn %d: completion not at offset %d", i, turn.Index, at)
		}
		for k := range turn.CompletionTokenIDs {
			open[at+k] = true
			if logprobs[at+k] != turn.CompletionLogprobs[k] {
				t.Fatalf("rollout %d turn %d: logprob %d is %v, want %v", i, turn.Index, k, logprobs[at+k], turn.CompletionLogprobs[k])
			}
		}
	}
	for k := range tokens {
		switch {
		case open[k] && masks[k] != tokens[k]:
			t.Fatalf("rollout %d: generated token %d masked", i, k)
		case !open[k] && masks[k] != -100:
			t.Fatalf("rollout %d: prompt token %d not masked", i, k)
		}
	}
}

func lines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// TestProcessWithoutTokens: with no token ids recorded (here the replay
// agent), groups go to groups.messages.jsonl with messages only and the
// manifest says why, instead of inventing tokens; groups.jsonl stays
// empty; drop_equal_scores drops a group of equal scores.
func TestProcessWithoutTokens(t *testing.T) {
	sandboxtest.RequireDocker(t)
	root, _ := filepath.Abs("../..")
	out := filepath.Join(t.TempDir(), "proc")
	base := []string{"process", filepath.Join(root, "examples/quickstart.toml"),
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", `env.config.tasks=["hello-file", "custom-workdir"]`,
		"--set", "agent.kind=replay", "--set", "agent.script=" + filepath.Join(root, "testdata/scripts/hello-file.json"),
		"--set", "process.group_size=2"}
	var stdout, stderr bytes.Buffer
	if code := run(append(base, "--out", out), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if b, err := os.ReadFile(filepath.Join(out, rundir.GroupsFile)); err != nil || len(b) != 0 {
		t.Fatalf("%s must hold only groups with exact tokens: %v %q", rundir.GroupsFile, err, b)
	}
	groups := lines(t, filepath.Join(out, rundir.MessagesFile))
	if len(groups) != 2 || strings.Contains(groups[0], `"tokens"`) || !strings.Contains(groups[0], `"messages"`) {
		t.Fatalf("groups without token ids: %v", groups)
	}
	var man rundir.Manifest
	b, _ := os.ReadFile(filepath.Join(out, rundir.ManifestFile))
	json.Unmarshal(b, &man)
	if man.Process == nil || man.Process.Tokens != "none" || man.Process.Groups != 0 || man.Process.MessagesGroups != 2 || len(man.Process.NoTokens) == 0 {
		t.Fatalf("manifest process: %+v", man.Process)
	}
	// The replay script solves hello-file every time and custom-workdir never:
	// both groups have equal scores, so drop_equal_scores keeps neither.
	out2 := filepath.Join(t.TempDir(), "proc2")
	if code := run(append(base, "--set", "process.drop_equal_scores=true", "--out", out2), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	b, _ = os.ReadFile(filepath.Join(out2, rundir.MessagesFile))
	man = rundir.Manifest{}
	mb, _ := os.ReadFile(filepath.Join(out2, rundir.ManifestFile))
	json.Unmarshal(mb, &man)
	if len(b) != 0 || man.Process.Dropped[export.DropEqualScores] != 2 || man.Process.SFT != 4 {
		t.Fatalf("drop_equal_scores: groups %q, manifest %+v", b, man.Process)
	}
}

// TestKillProcessAndResume kills `proctor process` with SIGKILL once some
// groups are written and others are in flight, resumes it, and checks that
// every task has exactly one group line, made of its own rollouts, and
// one SFT line per rollout.
func TestKillProcessAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	sandboxtest.RequireDocker(t)
	dir := t.TempDir()
	bin := buildProctor(t)
	cfg := replayRun(t, dir, 6, "sleep 1; printf x > answer.txt", "name = \"killproc\"\nconcurrency = 3", "[process]\ngroup_size = 2")
	// Each task its own text, so a group's prompt says whose it is.
	b, _ := os.ReadFile(cfg)
	for i := range 6 {
		b = bytes.Replace(b, []byte(fmt.Sprintf(`{id = "t%d", text = "x"}`, i)), []byte(fmt.Sprintf(`{id = "t%d", text = "t%d"}`, i, i)), 1)
	}
	os.WriteFile(cfg, b, 0o644)
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "process", filepath.Join(dir, "run.toml"), "--out", out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The replay agent records no token ids: every group goes to
	// groups.messages.jsonl.
	poll.Until(t, "a group written", func() bool { return countLines(filepath.Join(out, rundir.MessagesFile)) >= 1 || ended(cmd) })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if n := countLines(filepath.Join(out, rundir.MessagesFile)); n == 0 || n >= 6 {
		t.Fatalf("killed with %d of 6 groups written; want some but not all", n)
	}
	if b, err := exec.Command(bin, "process", filepath.Join(dir, "run.toml"), "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("resume: %v\n%s", err, b)
	}
	seen := map[string]int{}
	for _, l := range lines(t, filepath.Join(out, rundir.SFTFile)) {
		var r struct {
			TaskID  string `json:"task_id"`
			Attempt int    `json:"attempt"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad SFT line %q", l)
		}
		seen[fmt.Sprintf("%s#%d", r.TaskID, r.Attempt)]++
	}
	if len(seen) != 12 {
		t.Errorf("%d rollouts in sft.jsonl, want 12", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s written %d times", id, n)
		}
	}
	checkOneGroupPerTask(t, out, 6)
}
