package serve

import (
	"context"
	"encoding/json"
	"fmt"

	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/run"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/scheduler/schedulertest"
	"github.com/proctor-dev/proctor/host/serve/atropos/atropostest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// fakeEnv is schedulertest's environment with tasks t0, t1, ...
type fakeEnv struct {
	schedulertest.Env
	tasks []scheduler.Task
}

func (e fakeEnv) Tasks(context.Context) ([]scheduler.Task, []abi.Skipped, error) {
	return e.tasks, nil, nil
}

func tasks(n int) []scheduler.Task {
	var ts []scheduler.Task
	for i := range n {
		ts = append(ts, scheduler.Task{ID: fmt.Sprintf("t%d", i)})
	}
	return ts
}

// tokenAgent answers once with exact token ids that spell the rollout's
// identity (so a group at the API says whose it is), and solves odd
// attempts: every group of two has scores 0 and 1. While hold is open,
// agents wait for it.
type tokenAgent struct {
	hold    chan struct{}
	started atomic.Int32
	noIDs   bool
}

func (a *tokenAgent) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	a.started.Add(1)
	if a.hold != nil {
		select {
		case <-a.hold:
		case <-ctx.Done():
			return scheduler.AgentOutput{}, ctx.Err()
		}
	}
	if in.Attempt%2 == 1 {
		if err := in.Oracle(ctx); err != nil {
			return scheduler.AgentOutput{}, err
		}
	}
	var prompt []int
	for _, c := range []byte(in.RolloutID) {
		prompt = append(prompt, int(c))
	}
	turn := agent.Turn{Index: 0, PromptTokenIDs: prompt, CompletionTokenIDs: []int{7, 8, 9}, CompletionLogprobs: []float64{-1, -2, -3}}
	if a.noIDs {
		turn = agent.Turn{Index: 0}
	}
	tr := agent.Trajectory{Agent: "llm", Messages: []agent.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: in.Prompt},
		{Role: "assistant", Content: "done"}}, Turns: []agent.Turn{turn}, StopReason: agent.StopDone}
	return scheduler.AgentOutput{Turns: 1, Transcript: agent.Transcript{RolloutID: in.RolloutID, TaskID: in.Task.ID, Prompt: in.Prompt, Trajectory: &tr}}, nil
}

// rolloutOf reads the rollout identity a tokenAgent spelled in a
// sequence's tokens.
func rolloutOf(tokens []int) string {
	var b []byte
	for _, t := range tokens[:len(tokens)-3] {
		b = append(b, byte(t))
	}
	return string(b)
}

// harness is a serve run against the test API.
type harness struct {
	t     *testing.T
	api   *atropostest.Server
	dir   string
	agent *tokenAgent
	tasks []scheduler.Task
	extra string
	mu    sync.Mutex
	notes []string
	opts  Options
}

func newHarness(t *testing.T, ntasks int, extra string) *harness {
	return &harness{t: t, api: atropostest.New(t), dir: filepath.Join(t.TempDir(), "run"), agent: &tokenAgent{}, tasks: tasks(ntasks), extra: extra}
}

func (h *harness) config() *config.Config {
	h.t.Helper()
	extra := h.extra
	if !strings.Contains(extra, "max_groups") {
		extra += "max_groups = 4\n"
	}
	text := fmt.Sprintf("[run]\nconcurrency = 8\nprogress_interval = \"1h\"\n[agent]\nkind = \"nop\"\n[env]\nplugin = \"fake.wasm\"\n[process]\ngroup_size = 2\n[serve]\napi = %q\ndrain_timeout = \"5s\"\n%s", h.api.URL(), extra)
	c, err := config.Parse([]byte(text), filepath.Join(h.t.TempDir(), "rl.toml"), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) parts() run.Parts {
	return run.Parts{Backend: &schedulertest.Backend{}, Env: fakeEnv{tasks: h.tasks}, Agent: h.agent, EnvInfo: rundir.PluginInfo{Name: "fake", SHA256: "00"}}
}

// serve runs proctor serve until ctx ends or it stops by itself.
func (h *harness) serve(ctx context.Context) (*run.Result, error) {
	c := h.config()
	opts := h.opts
	opts.Poll, opts.Backoff = 5*time.Millisecond, 10*time.Millisecond
	opts.Notify = func(n run.Notice) {
		h.mu.Lock()
		h.notes = append(h.notes, n.Level+": "+n.Text)
		h.mu.Unlock()
	}
	s := New(c, opts)
	r, err := run.Open(c, run.WithDir(h.dir), run.WithDriver(s))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Execute(ctx, h.parts())
}

func (h *harness) said(sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.notes, func(n string) bool { return strings.Contains(n, sub) })
}

// trainer registers a trainer and takes a batch every `every` until ctx
// ends; when the API forgets it (a restart) it registers again.
func (h *harness) trainer(ctx context.Context, cfg atropostest.TrainerConfig, every time.Duration) *sync.WaitGroup {
	tr := h.api.Trainer()
	if _, err := tr.Register(cfg); err != nil {
		h.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := tr.Batch(); err != nil {
				tr.Register(cfg)
			}
			if every > 0 {
				sleep(ctx, every)
			}
		}
	}()
	return &wg
}

// taken is the rollout ids of every group the API took, in order, one
// string per group ("t0#0,t0#1").
func (h *harness) taken() []string {
	var out []string
	for _, tk := range h.api.Taken() {
		var toks [][]int
		json.Unmarshal(tk.Group["tokens"], &toks)
		var ids []string
		for _, s := range toks {
			ids = append(ids, rolloutOf(s))
		}
		out = append(out, strings.Join(ids, ","))
	}
	return out
}

// noDuplicates fails when a group reached the API twice.
func (h *harness) noDuplicates() []string {
	h.t.Helper()
	got := h.taken()
	seen := map[string]bool{}
	for _, g := range got {
		if seen[g] {
			h.t.Errorf("group %s reached the API twice: %v", g, got)
		}
		seen[g] = true
	}
	return got
}

func (h *harness) index() map[key]entry {
	x, err := openIndex(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	defer x.close()
	return x.last
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeUntilTrainerDone: serve registers while the trainer has not
// started (it waits), sends exact-token groups as they finish, and stops
// on its own when the trainer's steps plus the batches queued reach
// num_steps, as base.py env_manager does. Every group the API took is in
// serve.jsonl as sent, once, and the manifest sums them up.
func TestServeUntilTrainerDone(t *testing.T) {
	h := newHarness(t, 3, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := h.api.Trainer()
	if _, err := tr.Register(atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 3}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var res *run.Result
	var err error
	go func() { res, err = h.serve(ctx); close(done) }()
	waitFor(t, "serve to wait for the trainer", func() bool { return h.said("waiting for the trainer to start") })
	if n := len(h.api.Taken()); n != 0 {
		t.Fatalf("%d groups sent before registering", n)
	}
	var tw sync.WaitGroup
	tw.Add(1)
	go func() {
		defer tw.Done()
		for ctx.Err() == nil {
			select {
			case <-done:
				return
			default:
			}
			tr.Batch()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	<-done
	tw.Wait()
	if err != nil || res.Stats.Interrupted {
		t.Fatalf("serve: %v, interrupted %v; notes %v", err, res != nil && res.Stats.Interrupted, h.notes)
	}
	if !h.said("stopping: the trainer has the steps it asked for") {
		t.Errorf("notes %v", h.notes)
	}
	got := h.noDuplicates()
	idx := h.index()
	sent := 0
	for k, e := range idx {
		if e.State == stateSent {
			sent++
			want := fmt.Sprintf("%s#%d,%s#%d", k.task, 2*k.epoch, k.task, 2*k.epoch+1)
			if !slices.Contains(got, want) {
				t.Errorf("serve.jsonl says %s was sent, the API has no %s", k, want)
			}
			if e.EnvID == nil || e.SentAt == nil || e.SentAt.Before(e.ScoredAt) || !slices.Equal(e.Scores, []float64{0, 1}) {
				t.Errorf("entry %+v", e)
			}
		}
	}
	if sent != len(got) || sent < 6 {
		t.Fatalf("%d sent in serve.jsonl, %d at the API; want the same, at least 6 (3 steps of 2 groups)", sent, len(got))
	}
	man, _, _ := rundir.ReadManifest(h.dir)
	if man.Serve == nil || man.Serve.Sent != sent || man.Serve.Name != "rl_0" || man.FinishedAt == nil {
		t.Fatalf("manifest serve %+v finished %v", man.Serve, man.FinishedAt)
	}
	var first atropostest.Request
	for _, r := range h.api.Requests() {
		if r.Path == "/register-env" {
			first = r
			break
		}
	}
	var reg map[string]any
	json.Unmarshal(first.Body, &reg)
	if reg["desired_name"] != "rl" || reg["group_size"] != 2.0 || reg["max_token_length"] != 2048.0 || reg["weight"] != 1.0 || reg["min_batch_allocation"] != nil {
		t.Errorf("register-env body %v", reg)
	}
	if len(h.api.Envs()) == 0 || h.api.Envs()[0].Connected {
		t.Error("serve did not disconnect from the API when it stopped")
	}
}

// TestThrottle: with the trainer stalled, serve stops admitting groups
// once max_batches_offpolicy batches wait at the API (none is generated
// beyond them), and resumes when the trainer takes batches.
func TestThrottle(t *testing.T) {
	h := newHarness(t, 5, "max_batches_offpolicy = 2\nmax_groups = 8\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := h.api.Trainer()
	tr.Register(atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000})
	tr.Batch()
	done := make(chan error, 1)
	go func() { _, err := h.serve(ctx); done <- err }()
	// 2 batches of 4 sequences: 4 groups of 2.
	waitFor(t, "the queue to fill", func() bool { return h.api.QueuedSequences() >= 8 })
	time.Sleep(300 * time.Millisecond) // many polls: nothing more may start
	if n, started := h.api.QueuedSequences(), h.agent.started.Load(); n != 8 || started != 8 {
		t.Fatalf("stalled trainer: %d sequences queued, %d rollouts started; want 8 and 8", n, started)
	}
	// The API cuts every batch it can at once (server.py get_batch): the
	// trainer's first call takes both, the queue empties, and serve
	// refills it to 2 batches again.
	if b, err := tr.Batch(); err != nil || len(b) == 0 || h.api.Step() != 2 {
		t.Fatalf("batch: %v %v, step %d", b, err, h.api.Step())
	}
	waitFor(t, "serve to refill the queue", func() bool { return h.api.QueuedSequences() == 8 && h.agent.started.Load() == 16 })
	time.Sleep(200 * time.Millisecond)
	if n := h.agent.started.Load(); n != 16 {
		t.Fatalf("%d rollouts started after the queue was refilled, want 16", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.noDuplicates()
}

// TestAPIRestart: the API restarts mid-run (every state lost) and is down
// for a while; serve waits, registers again when the trainer is back, and
// delivers the groups that finished meanwhile: none lost, none twice in
// one API's life.
func TestAPIRestart(t *testing.T) {
	h := newHarness(t, 4, "epochs = 2\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.agent.hold = make(chan struct{})
	tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 20*time.Millisecond)
	done := make(chan error, 1)
	go func() { _, err := h.serve(ctx); done <- err }()
	waitFor(t, "rollouts to start", func() bool { return h.agent.started.Load() >= 4 })
	h.api.Down()
	close(h.agent.hold) // the groups finish while the API is away
	time.Sleep(200 * time.Millisecond)
	if err := h.api.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%v", err, h.notes)
	}
	t.Logf("notes: %v", h.notes)
	cancel()
	tw.Wait()
	if !h.said("no longer knows this environment") {
		t.Errorf("no re-registration noted: %v", h.notes)
	}
	got := h.noDuplicates()
	if len(got) != 8 {
		t.Fatalf("the API took %d groups, want all 8 (4 tasks, 2 epochs): %v", len(got), got)
	}
	for _, e := range h.index() {
		if e.State != stateSent {
			t.Errorf("group %s@%d ended %s", e.TaskID, e.Epoch, e.State)
		}
	}
	if envs := h.api.Envs(); len(envs) != 1 {
		t.Errorf("the new API has %d environments registered, want 1", len(envs))
	}
}

// TestLostAnswer: the API takes a group but the answer never arrives;
// serve asks /latest_example before sending it again, finds it there,
// and records it as sent without a second POST.
func TestLostAnswer(t *testing.T) {
	h := newHarness(t, 2, "epochs = 1\nmax_groups = 1\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.api.Inject(atropostest.Fault{Path: "/scored_data", Lost: true})
	tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
	if _, err := h.serve(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	tw.Wait()
	if got := h.noDuplicates(); len(got) != 2 {
		t.Fatalf("taken %v, want each of the 2 groups once", got)
	}
	lost := 0
	for _, e := range h.index() {
		if strings.Contains(e.Ack, "latest_example") {
			lost++
		}
	}
	if lost != 1 {
		t.Errorf("%d groups confirmed by /latest_example, want 1", lost)
	}
}

// TestRefusals: a group the API refuses (422) is recorded as refused and
// not sent again, and serving goes on; three refusals in a row end it with
// an error naming the endpoint.
func TestRefusals(t *testing.T) {
	h := newHarness(t, 2, "epochs = 1\nmax_groups = 1\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.api.Inject(atropostest.Fault{Path: "/scored_data", Status: 422, Body: `{"detail": [{"loc": ["body", "tokens"], "msg": "bad"}]}`})
	tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
	if _, err := h.serve(ctx); err != nil {
		t.Fatal(err)
	}
	states := map[string]int{}
	for _, e := range h.index() {
		states[e.State]++
		if e.State == stateRejected && !strings.Contains(e.Reason, "POST /scored_data: HTTP 422") {
			t.Errorf("refusal reason %q", e.Reason)
		}
	}
	if states[stateRejected] != 1 || states[stateSent] != 1 || len(h.noDuplicates()) != 1 {
		t.Fatalf("states %v, taken %v", states, h.taken())
	}

	h2 := newHarness(t, 4, "epochs = 1\nmax_groups = 1\n")
	h2.api.Inject(atropostest.Fault{Path: "/scored_data", Status: 400, Body: `{"detail": "no"}`, Times: 10})
	h2.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
	_, err := h2.serve(ctx)
	cancel()
	tw.Wait()
	if err == nil || !strings.Contains(err.Error(), "refused 3 posts in a row") || !strings.Contains(err.Error(), "POST /scored_data: HTTP 400") || fault.Hint(err) == "" {
		t.Fatalf("serve: %v (hint %q)", err, fault.Hint(err))
	}
}

// TestBadAnswers: a refused or malformed registration ends serving with
// an error naming the endpoint and a hint; so does a malformed status.
func TestBadAnswers(t *testing.T) {
	for _, tc := range []struct {
		fault atropostest.Fault
		want  string
	}{
		{atropostest.Fault{Path: "/register-env", Status: 422, Body: `{"detail": "group_size"}`}, "rollout API POST /register-env: HTTP 422"},
		{atropostest.Fault{Path: "/register-env", Status: 200, Body: `{"status": "success"}`}, `POST /register-env: malformed answer: no "env_id"`},
		{atropostest.Fault{Path: "/info", Status: 200, Body: `{"batch_size": 4}`}, `GET /info: malformed answer: no "max_token_len"`},
		{atropostest.Fault{Path: "/status-env", Status: 200, Body: `[1, 2]`}, `GET /status-env: malformed answer`},
	} {
		h := newHarness(t, 1, "")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		h.api.Inject(tc.fault)
		tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
		_, err := h.serve(ctx)
		cancel()
		tw.Wait()
		if err == nil || !strings.Contains(err.Error(), tc.want) || fault.Hint(err) == "" {
			t.Errorf("%s: %v (hint %q), want %q", tc.fault.Path, err, fault.Hint(err), tc.want)
		}
	}
	// A group larger than the trainer's batch cannot be served.
	h := newHarness(t, 1, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 1, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
	if _, err := h.serve(ctx); !fault.IsUsage(err) || !strings.Contains(err.Error(), "larger than the trainer's batch_size 1") {
		t.Errorf("group larger than the batch: %v", err)
	}
}

// TestInterrupt: Ctrl-C with on_interrupt = "drop" stops the groups
// running without recording them; "finish" lets them finish and sends
// them. Either way no half group is sent.
func TestInterrupt(t *testing.T) {
	for _, mode := range []string{"drop", "finish"} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, 2, fmt.Sprintf("on_interrupt = %q\nmax_groups = 2\n", mode))
			h.agent.hold = make(chan struct{})
			tctx, stopTrainer := context.WithCancel(context.Background())
			defer stopTrainer()
			tw := h.trainer(tctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
			ctx, interrupt := context.WithCancel(context.Background())
			done := make(chan *run.Result, 1)
			go func() { res, _ := h.serve(ctx); done <- res }()
			waitFor(t, "4 rollouts running", func() bool { return h.agent.started.Load() == 4 })
			interrupt()
			if mode == "finish" {
				time.Sleep(100 * time.Millisecond)
				close(h.agent.hold)
			}
			res := <-done
			stopTrainer()
			tw.Wait()
			if res == nil || !res.Stats.Interrupted {
				t.Fatalf("result %+v", res)
			}
			recs, _ := rundir.Read(h.dir)
			got := h.noDuplicates()
			switch mode {
			case "drop":
				if len(recs) != 0 || len(got) != 0 {
					t.Fatalf("drop: %d rollouts recorded, %d groups sent; want none", len(recs), len(got))
				}
			case "finish":
				if len(recs) != 4 || len(got) != 2 {
					t.Fatalf("finish: %d rollouts recorded, %d groups sent; want 4 and 2", len(recs), len(got))
				}
			}
			for _, g := range got {
				if strings.Count(g, ",") != 1 {
					t.Errorf("half group sent: %s", g)
				}
			}
		})
	}
}
