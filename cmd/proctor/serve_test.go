package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
	"github.com/proctor-dev/proctor/host/serve/atropos/atropostest"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// trainer registers a trainer with api and takes batches until the test
// ends.
func trainer(t testing.TB, api *atropostest.Server) {
	t.Helper()
	tr := api.Trainer()
	cfg := atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 4096, NumSteps: 1000}
	if _, err := tr.Register(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if _, err := tr.Batch(); err != nil {
				tr.Register(cfg)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// serveArgs serves the tb2 fixture tasks to api.
func serveArgs(t testing.TB, api *atropostest.Server, out string, tasks string, sets ...string) []string {
	root, _ := filepath.Abs("../..")
	args := []string{"serve", filepath.Join(root, "examples/quickstart.toml"), "--api", api.URL(),
		"--set", "env.plugin=" + wasmtest.Build(t, "./plugins/tb2"),
		"--set", "env.config.dataset=" + filepath.Join(root, "testdata/tb2/tasks"),
		"--set", "env.config.tasks=" + tasks, "--set", "process.group_size=2", "--out", out}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// TestServeGroups serves a fixture task for two epochs in real sandboxes,
// with an endpoint that returns token ids: each group reaches the API as
// soon as it is scored, once, with the verifier's scores, each sequence
// exactly the ids its transcript recorded, and the messages asked for.
func TestServeGroups(t *testing.T) {
	sandboxtest.RequireDocker(t)
	api := atropostest.New(t)
	trainer(t, api)
	write := openaitest.Step{Body: openaitest.Reply("I will write it.", openaitest.Call{Name: "write_file", Args: map[string]any{"path": "/tmp/hello.txt", "content": "Hello, world!\n"}})}
	done := openaitest.Step{Body: openaitest.Reply("Done.")}
	model := openaitest.New(write, done, done, write, done, done)
	defer model.Close()
	out := filepath.Join(t.TempDir(), "serve")
	args := serveArgs(t, api, out, `["hello-file"]`, "agent.kind=llm", "model.base_url="+model.URL(), "model.name=scripted",
		"model.return_tokens=true", "run.concurrency=1", "serve.epochs=2", "serve.max_groups=1", "serve.include_messages=true")
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "served "+api.URL()+" as quickstart_0: 2 groups sent, 0 refused, 0 waiting to be sent") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	// pass@k per group of 2 (a task's epoch), not over both epochs'
	// attempts, which two policies sampled.
	if out := stdout.String(); !strings.Contains(out, "groups     2 of up to 2 rollouts") || !strings.Contains(out, "pass@2") || strings.Contains(out, "pass@3") {
		t.Errorf("stdout:\n%s", out)
	}
	if !strings.Contains(stderr.String(), "proctor: serve: registered with the rollout API at "+api.URL()+" as quickstart_0 (env 0)") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	taken := api.Taken()
	if len(taken) != 2 {
		t.Fatalf("the API took %d groups, want 2", len(taken))
	}
	trajs := transcriptsByTokens(t, out)
	for _, tk := range taken {
		var g export.ScoredDataGroup
		raw, _ := json.Marshal(tk.Group)
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(slices.Sorted(slices.Values(g.Scores)), []float64{0, 1}) || tk.EnvID == nil || *tk.EnvID != 0 || g.GroupOverrides["group_size"] != 2.0 || len(g.Messages) != 2 {
			t.Fatalf("group: scores %v env %v overrides %v, %d message lists", g.Scores, tk.EnvID, g.GroupOverrides, len(g.Messages))
		}
		for i, seq := range g.Tokens {
			r, ok := trajs[fmtInts(seq)]
			if !ok {
				t.Fatalf("sequence %d of a group is no transcript's tokens", i)
			}
			checkAlignment(t, i, r.tr, seq, g.Masks[i], g.InferenceLogprobs[i])
			if g.Scores[i] != r.reward {
				t.Errorf("sequence %d has score %v, its rollout's reward is %v", i, g.Scores[i], r.reward)
			}
		}
	}
	var sent int
	for _, l := range lines(t, filepath.Join(out, rundir.ServeIndexFile)) {
		if strings.Contains(l, `"state":"sent"`) {
			sent++
		}
	}
	if sent != 2 {
		t.Errorf("serve.jsonl records %d groups sent, want 2", sent)
	}
}

type scoredTrajectory struct {
	tr     *agent.Trajectory
	reward float64
}

// transcriptsByTokens maps each rollout's token sequence to its
// trajectory and reward.
func transcriptsByTokens(t *testing.T, out string) map[string]scoredTrajectory {
	t.Helper()
	recs, err := rundir.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]scoredTrajectory{}
	for _, r := range recs {
		tr, err := export.ReadTrajectory(filepath.Join(out, r.Transcript))
		if err != nil {
			t.Fatal(err)
		}
		seq, err := export.Tokens(tr)
		if err != nil {
			t.Fatal(err)
		}
		m[fmtInts(seq.Tokens)] = scoredTrajectory{tr, r.Reward}
	}
	return m
}

func fmtInts(s []int) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestServeReplay: the replay agent records no token ids, so its groups
// are no ScoredDataGroups: serve records them as dropped, says once what
// to set, sends nothing and ends when its epochs are done.
func TestServeReplay(t *testing.T) {
	sandboxtest.RequireDocker(t)
	api := atropostest.New(t)
	trainer(t, api)
	root, _ := filepath.Abs("../..")
	out := filepath.Join(t.TempDir(), "serve")
	args := serveArgs(t, api, out, `["hello-file", "custom-workdir"]`, "agent.kind=replay",
		"agent.script="+filepath.Join(root, "testdata/scripts/hello-file.json"), "serve.epochs=1")
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if n := len(api.Taken()); n != 0 {
		t.Fatalf("%d groups without token ids were sent", n)
	}
	if strings.Count(stderr.String(), "set [model] return_tokens = true") != 1 {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "groups dropped: 2 no_tokens") || !strings.Contains(stderr.String(), "serve: stopping: every epoch is sent") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// TestServeOracle: the oracle agent asks no model, so its rollouts have
// no turn to train on and no group can be sent: serve says so once,
// during the run, as it does for the replay agent's groups without token
// ids, and records the groups as dropped (empty).
func TestServeOracle(t *testing.T) {
	sandboxtest.RequireDocker(t)
	api := atropostest.New(t)
	trainer(t, api)
	out := filepath.Join(t.TempDir(), "serve")
	args := serveArgs(t, api, out, `["hello-file", "custom-workdir"]`, "agent.kind=oracle", "serve.epochs=1")
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if n := len(api.Taken()); n != 0 {
		t.Fatalf("%d groups of oracle rollouts were sent", n)
	}
	if strings.Count(stderr.String(), `has no rollout a model generated (agent.kind = "oracle"; 2 no_model_turn): no group of this run can be sent`) != 1 {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "groups dropped: 2 empty") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

// TestServeKillAndResume kills proctor serve with SIGKILL mid-run and
// starts it again: the API gets every group exactly once (serve.jsonl and
// the API agree), and no sandbox of the run is left. The environment the
// killed start registered, with a min_batch_allocation, is disconnected
// by the restart: left connected with nothing queued it stops every
// batch (atroposlib/api/utils.py grab_batch_with_minimum_allocations,
// lines 204-214 at 296a0bc5), as it did at 1ae3d96. The restart names
// the lock it took over as proctor serve's.
func TestServeKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	sandboxtest.RequireDocker(t)
	bin := buildProctor(t)
	api := atropostest.New(t)
	trainer(t, api)
	model := openaitest.New() // every answer: "done", with token ids
	defer model.Close()
	out := filepath.Join(t.TempDir(), "serve")
	args := serveArgs(t, api, out, `["hello-file", "custom-workdir"]`, "agent.kind=llm", "model.base_url="+model.URL(),
		"model.name=scripted", "model.return_tokens=true", "run.concurrency=2", "serve.epochs=3", "serve.max_groups=1",
		"serve.min_batch_allocation=0.5")
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && len(api.Taken()) < 2; {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(700 * time.Millisecond) // into the next group
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	before := len(api.Taken())
	if before < 2 || before >= 6 {
		t.Fatalf("killed with %d of 6 groups sent; want some but not all", before)
	}
	again := exec.Command(bin, args...)
	b, err := again.CombinedOutput()
	if err != nil {
		t.Fatalf("restart: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "took over the lock of proctor serve (pid") || !strings.Contains(string(b), "disconnected env 0 (quickstart_0), which this run registered earlier") {
		t.Errorf("restart:\n%s", b)
	}
	for _, e := range api.Envs() {
		if e.Connected {
			t.Errorf("env %d (%s) left connected", e.RegisteredID, e.RealName)
		}
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && api.QueuedSequences() > 0; {
		time.Sleep(50 * time.Millisecond)
	}
	if n := api.QueuedSequences(); n > 0 {
		t.Errorf("%d sequences still queued: the trainer got no batch", n)
	}
	if n := len(api.Taken()); n != 6 {
		t.Errorf("the API took %d groups over both runs, want each of the 6 once", n)
	}
	sent := map[string]int{}
	for _, l := range lines(t, filepath.Join(out, rundir.ServeIndexFile)) {
		var e struct {
			TaskID string `json:"task_id"`
			Epoch  int    `json:"epoch"`
			State  string `json:"state"`
		}
		json.Unmarshal([]byte(l), &e)
		if e.State == "sent" {
			sent[fmt.Sprintf("%s@%d", e.TaskID, e.Epoch)]++
		}
	}
	if len(sent) != 6 {
		t.Errorf("serve.jsonl: %v, want 6 groups sent", sent)
	}
	for g, n := range sent {
		if n != 1 {
			t.Errorf("group %s recorded as sent %d times", g, n)
		}
	}
	man, _, _ := rundir.ReadManifest(out)
	if n := containers(t, man.RunID); n != 0 {
		t.Errorf("%d containers of the run left", n)
	}
}

// BenchmarkServeFixtures serves the tb2 fixture tasks in Docker, two
// rollouts a group, four rollouts at once, with the llm agent against a
// local endpoint that answers at once with token ids (the replay agent
// records none, so its groups are never sent). It reports the groups the
// API acknowledged per second of serving and the time from a group's last
// reward to the API's answer to its POST.
func BenchmarkServeFixtures(b *testing.B) {
	sandboxtest.RequireDocker(b)
	var perSec, p50, p95 []float64
	for range b.N {
		api := atropostest.New(b)
		trainer(b, api)
		model := openaitest.New()
		out := filepath.Join(b.TempDir(), "serve")
		args := serveArgs(b, api, out, `["hello-file", "custom-workdir", "dash-instruction", "python-fix", "background-service", "partial-credit"]`,
			"agent.kind=llm", "model.base_url="+model.URL(), "model.name=scripted", "model.return_tokens=true",
			"run.concurrency=4", "serve.epochs=2", "serve.max_groups=2")
		var stdout, stderr bytes.Buffer
		start := time.Now()
		if code := run(args, &stdout, &stderr); code != 0 {
			b.Fatalf("exit %d\n%s", code, stderr.String())
		}
		elapsed := time.Since(start)
		model.Close()
		var lat []time.Duration
		for _, l := range lines(b, filepath.Join(out, rundir.ServeIndexFile)) {
			var e struct {
				State    string     `json:"state"`
				ScoredAt time.Time  `json:"scored_at"`
				SentAt   *time.Time `json:"sent_at"`
			}
			json.Unmarshal([]byte(l), &e)
			if e.State == "sent" {
				lat = append(lat, e.SentAt.Sub(e.ScoredAt))
			}
		}
		if len(lat) != 12 {
			b.Fatalf("%d groups sent, want 12", len(lat))
		}
		slices.Sort(lat)
		perSec = append(perSec, float64(len(lat))/elapsed.Seconds())
		p50 = append(p50, float64(lat[len(lat)/2].Microseconds())/1000)
		p95 = append(p95, float64(lat[min(len(lat)-1, len(lat)*95/100)].Microseconds())/1000)
	}
	slices.Sort(perSec)
	slices.Sort(p50)
	slices.Sort(p95)
	b.ReportMetric(perSec[len(perSec)/2], "groups/s")
	b.ReportMetric(p50[len(p50)/2], "ms-to-post-p50")
	b.ReportMetric(p95[len(p95)/2], "ms-to-post-p95")
}

// TestPrintServed: a serve run stopped before the API gave it a name says
// it never registered, instead of an empty name.
func TestPrintServed(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"", "served http://127.0.0.1:1 (never registered): 0 groups sent"},
		{"rl_0", "served http://127.0.0.1:1 as rl_0: 0 groups sent"},
	} {
		dir := t.TempDir()
		if err := rundir.WriteManifest(dir, rundir.Manifest{Serve: &rundir.ServeInfo{API: "http://127.0.0.1:1", Name: tc.name}}); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		printServed(&out, dir)
		if !strings.HasPrefix(out.String(), tc.want) {
			t.Errorf("%q: %q, want it to start %q", tc.name, out.String(), tc.want)
		}
	}
}
