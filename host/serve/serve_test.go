package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"os"
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
	"github.com/proctor-dev/proctor/host/serve/atropos"
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
	delay   time.Duration // how long it thinks
	hold    chan struct{}
	gate    func(scheduler.AgentInput) chan struct{} // when set, what each rollout waits for instead of hold (nil: nothing)
	started atomic.Int32
	noIDs   bool
	noModel bool // no assistant message: what the oracle and nop agents record
}

func (a *tokenAgent) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	a.started.Add(1)
	if a.delay > 0 {
		time.Sleep(a.delay)
	}
	wait := a.hold
	if a.gate != nil {
		wait = a.gate(in)
	}
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return scheduler.AgentOutput{}, ctx.Err()
		}
	}
	if in.Attempt%2 == 1 {
		if _, err := in.Oracle(ctx); err != nil {
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
	if a.noModel {
		tr.Messages, tr.Turns = tr.Messages[:2], nil
	}
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
	t     testing.TB
	api   *atropostest.Server
	dir   string
	agent *tokenAgent
	tasks []scheduler.Task
	extra string
	sets  []string
	mu    sync.Mutex
	notes []string
	opts  Options
	s     *Serve // the last serve started
}

// running is the last serve started, if any.
func (h *harness) running() *Serve {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.s
}

func newHarness(t testing.TB, ntasks int, extra string) *harness {
	return &harness{t: t, api: atropostest.New(t), dir: filepath.Join(t.TempDir(), "run"), agent: &tokenAgent{}, tasks: tasks(ntasks), extra: extra}
}

func (h *harness) config() *config.Config {
	h.t.Helper()
	extra := h.extra
	if !strings.Contains(extra, "max_groups") {
		extra = "max_groups = 4\n" + extra
	}
	text := fmt.Sprintf("[run]\nconcurrency = 8\nprogress_interval = \"1h\"\n[agent]\nkind = \"nop\"\n[env]\nplugin = \"fake.wasm\"\n[process]\ngroup_size = 2\n[serve]\napi = %q\ndrain_timeout = \"5s\"\n%s", h.api.URL(), extra)
	c, err := config.Parse([]byte(text), filepath.Join(h.t.TempDir(), "rl.toml"), h.sets)
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
	h.mu.Lock()
	h.s = s
	h.mu.Unlock()
	r, err := run.Open(c, run.WithDir(h.dir), run.WithDriver(s))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Execute(ctx, h.parts())
}

// background serves until ctx ends or serving stops; the channel gets
// its error.
func (h *harness) background(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { _, err := h.serve(ctx); done <- err }()
	return done
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
	if !h.said("no longer knows env 0") {
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
// serve asks /latest_example before sending it again (asking again when
// that fails too), finds it there, and records it as sent without a
// second POST.
func TestLostAnswer(t *testing.T) {
	h := newHarness(t, 2, "epochs = 1\nmax_groups = 1\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.api.Inject(atropostest.Fault{Path: "/scored_data", Lost: true})
	h.api.Inject(atropostest.Fault{Path: "/latest_example", Status: 503})
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

// TestRestartServe: serve stopped mid-run and started again sends every
// group once. Left by the first start: t0's group taken by the API but its
// "sent" line lost (as if killed between the answer and the line), t1's
// group whole but never delivered (the API was away), t2's group half
// done. The second start finds t0's at /latest_example (asking again when
// the API fails to answer) instead of posting it again, posts t1's, and
// runs only t2's missing rollout.
func TestRestartServe(t *testing.T) {
	h := newHarness(t, 3, "epochs = 1\nmax_groups = 3\n")
	t1, t2 := make(chan struct{}), make(chan struct{})
	h.agent.gate = func(in scheduler.AgentInput) chan struct{} {
		switch {
		case in.Task.ID == "t1":
			return t1
		case in.Task.ID == "t2" && in.Attempt == 1:
			return t2
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
	first, interrupt := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := h.serve(first); done <- err }()
	recorded := func(n int) func() bool {
		return func() bool { recs, _ := rundir.Read(h.dir); return len(recs) == n }
	}
	waitFor(t, "t0's group sent and t2#0 recorded", func() bool { return len(h.api.Taken()) == 1 && recorded(3)() })
	h.api.Down()
	close(t1)
	waitFor(t, "t1's group to be whole", recorded(5))
	interrupt()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	started := h.agent.started.Load()
	lines := readLines(t, filepath.Join(h.dir, rundir.ServeIndexFile))
	var kept []string
	for _, l := range lines {
		var e entry
		json.Unmarshal([]byte(l), &e)
		if !(e.State == stateSent && e.TaskID == "t0") {
			kept = append(kept, l)
		}
	}
	os.WriteFile(filepath.Join(h.dir, rundir.ServeIndexFile), []byte(strings.Join(kept, "\n")+"\n"+`{"task_id":"t9","epo`), 0o644)

	if err := h.api.Up(); err != nil {
		t.Fatal(err)
	}
	h.agent.gate = nil
	// The API fails the first look at its latest group: serve asks again
	// rather than post t0's group a second time.
	h.api.Inject(atropostest.Fault{Path: "/latest_example", Status: 500})
	posts := countPosts(h.api.Requests())
	if _, err := h.serve(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	tw.Wait()
	if n := h.agent.started.Load() - started; n != 1 {
		t.Errorf("the second start ran %d rollouts, want only t2#1", n)
	}
	got := h.noDuplicates()
	if len(got) != 3 {
		t.Fatalf("taken %v, want the 3 groups", got)
	}
	if n := countPosts(h.api.Requests()) - posts; n < 1 || n > 2 {
		t.Errorf("the second start posted %d times, want t1's and t2's groups only", n)
	}
	idx := h.index()
	for k, e := range idx {
		if e.State != stateSent {
			t.Errorf("%s: %s", k, e.State)
		}
	}
	if e := idx[key{"t0", 0}]; !strings.Contains(e.Ack, "latest_example") {
		t.Errorf("t0's group: %+v, want it confirmed by /latest_example", e)
	}
	if !h.said("GET /latest_example: HTTP 500") || !h.said("asking again") {
		t.Errorf("the failed look at /latest_example was not reported: %q", h.notes)
	}
	man, _, _ := rundir.ReadManifest(h.dir)
	if man.Serve == nil || man.Serve.Sent != 3 || man.Serve.Pending != 0 {
		t.Errorf("manifest serve %+v", man.Serve)
	}
}

func countPosts(reqs []atropostest.Request) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r.Path, "/scored_data") {
			n++
		}
	}
	return n
}

func readLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestGroupSizeGuard: a serve run resumed with another group size is
// refused before anything runs, its attempts would fall in other groups;
// also when the first start was stopped before any group was decided.
func TestGroupSizeGuard(t *testing.T) {
	h := newHarness(t, 1, "")
	h.agent.hold = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 1000}, 10*time.Millisecond)
	first, interrupt := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := h.serve(first); done <- err }()
	waitFor(t, "a rollout to start", func() bool { return h.agent.started.Load() > 0 })
	interrupt()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c := h.config()
	c.Process.GroupSize = 4
	r, err := run.Open(c, run.WithDir(h.dir), run.WithDriver(New(c, Options{})))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Execute(ctx, h.parts())
	cancel()
	tw.Wait()
	if !fault.IsUsage(err) || !strings.Contains(err.Error(), "process.group_size is 4, but the serve run") || !strings.Contains(fault.Hint(err), "group_size=2") {
		t.Fatalf("resume with another group size: %v (hint %q)", err, fault.Hint(err))
	}
}

// TestFilters: groups the filters drop, or without exact token ids, are
// recorded as dropped with the reason and never sent; the first group
// without token ids says what to set.
func TestFilters(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		maxTok      int
		noIDs       bool
		want        string
	}{
		{"trainer max_token_len", "", 5, false, "max_tokens"},
		{"min_reward", "process.min_reward=2.0", 64, false, "min_reward"},
		{"no token ids", "", 64, true, dropNoTokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 2, "epochs = 1\n")
			if tc.extra != "" {
				h.sets = []string{tc.extra}
			}
			h.agent.noIDs = tc.noIDs
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: tc.maxTok, NumSteps: 1000}, 10*time.Millisecond)
			if _, err := h.serve(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			tw.Wait()
			if n := len(h.api.Taken()); n != 0 {
				t.Fatalf("%d groups sent", n)
			}
			for k, e := range h.index() {
				if e.State != stateDropped || e.Dropped != tc.want {
					t.Errorf("%s: %+v, want dropped %s", k, e, tc.want)
				}
			}
			if tc.noIDs && !h.said("set [model] return_tokens = true") {
				t.Errorf("notes %v", h.notes)
			}
			man, _, _ := rundir.ReadManifest(h.dir)
			if man.Serve == nil || man.Serve.Dropped[tc.want] != 2 {
				t.Errorf("manifest %+v", man.Serve)
			}
		})
	}
}

// TestLimit pins base.py's arithmetic of how many groups may run
// (add_train_workers) and when generation stops (env_manager).
func TestLimit(t *testing.T) {
	quarter := 0.25
	for _, tc := range []struct {
		name    string
		serve   config.Serve
		eval    bool
		batch   int
		st      atropos.Status
		want    int
		stopped bool
	}{
		{"room", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 3}, false, 4, atropos.Status{QueueSize: 2, UnallocatedFraction: 1}, 4, false},
		{"max groups", config.Serve{MaxGroups: 2, MaxBatchesOffpolicy: 3}, false, 4, atropos.Status{QueueSize: 2, UnallocatedFraction: 1}, 2, false},
		{"full", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 3}, false, 4, atropos.Status{QueueSize: 6, UnallocatedFraction: 1}, 0, true},
		{"no off-policy limit", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: -1}, false, 4, atropos.Status{QueueSize: 600, UnallocatedFraction: 1}, 8, false},
		{"batch unknown", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 3}, false, -1, atropos.Status{UnallocatedFraction: 1}, 0, true},
		{"stop train", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 3, EvalHandling: config.EvalStopTrain}, true, 4, atropos.Status{UnallocatedFraction: 1}, 0, false},
		{"limit train", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 9, EvalHandling: config.EvalLimitTrain, EvalLimitRatio: 0.5}, true, 4, atropos.Status{UnallocatedFraction: 1}, 4, false},
		{"eval none", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 9, EvalHandling: config.EvalNone, EvalLimitRatio: 0.5}, true, 4, atropos.Status{UnallocatedFraction: 1}, 8, false},
		// Another environment's minimum leaves this one 3/4 of a batch of 8.
		{"unallocated", config.Serve{MaxGroups: 20, MaxBatchesOffpolicy: 3}, false, 8, atropos.Status{QueueSize: 1, UnallocatedFraction: 0.75}, 8, false},
		// queue 9 groups of 2 = 18 >= 2*8, but this environment's own
		// share, ceil(0.25*8*2/4)*(4//2) = 2 groups, holds only 1: not
		// stopped; room 2*8//2-9 = -1, and the minimum asks
		// ceil(((1+2)*4 - 4*1//(4/2))/2) = 5.
		{"min batch allocation", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 2, MinBatchAllocation: &quarter}, false, 8,
			atropos.Status{QueueSize: 9, SelfQueueSize: 1, MaxGroupSize: 4, UnallocatedFraction: 0.75}, 5, false},
		{"min batch allocation met", config.Serve{MaxGroups: 8, MaxBatchesOffpolicy: 2, MinBatchAllocation: &quarter}, false, 8,
			atropos.Status{QueueSize: 9, SelfQueueSize: 2, MaxGroupSize: 4, UnallocatedFraction: 0.75}, 0, true},
	} {
		c := &config.Config{Serve: tc.serve}
		c.Process.GroupSize = 2
		s := New(c, Options{})
		s.info.BatchSize = tc.batch
		if tc.eval {
			s.eval.begin()
		}
		if got := s.limit(tc.st); got != tc.want || s.throttled(tc.st) != tc.stopped {
			t.Errorf("%s: limit %d throttled %v, want %d %v", tc.name, got, s.throttled(tc.st), tc.want, tc.stopped)
		}
	}
}

// TestEvaluation: when the trainer's step passes a multiple of
// steps_per_eval, an evaluation runs as a run of its own in
// evals/step-N; with STOP_TRAIN no training rollout starts while it runs.
// Its metrics go to evals.jsonl and to Atropos' metrics.json.
func TestEvaluation(t *testing.T) {
	h := newHarness(t, 2, "steps_per_eval = 2\neval_handling = \"STOP_TRAIN\"\n[serve.eval]\nattempts = 2\n")
	evalAgent := &tokenAgent{}
	h.opts.EvalParts = &run.Parts{Backend: &schedulertest.Backend{}, Env: fakeEnv{tasks: []scheduler.Task{{ID: "e0"}, {ID: "e1"}, {ID: "e2"}}},
		Agent: slowAgent{evalAgent, 100 * time.Millisecond}, EnvInfo: rundir.PluginInfo{Name: "fake", SHA256: "00"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 4}, 10*time.Millisecond)
	if _, err := h.serve(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	tw.Wait()
	evals := readEvals(h.dir)
	if len(evals) == 0 {
		t.Fatalf("no evaluation finished; notes %v", h.notes)
	}
	e := evals[0]
	if e.Step < 2 || e.Metrics["eval/rollouts"] != 6 || e.Metrics["eval/pass_rate"] != 0.5 || e.Dir != fmt.Sprintf("evals/step-%d", e.Step) {
		t.Fatalf("evaluation %+v", e)
	}
	recs, err := rundir.Read(filepath.Join(h.dir, e.Dir))
	if err != nil || len(recs) != 6 {
		t.Fatalf("the evaluation's run: %d records, %v", len(recs), err)
	}
	var m struct {
		Config  map[string]any            `json:"config_general"`
		Results map[string]map[string]any `json:"results"`
	}
	b, _ := os.ReadFile(filepath.Join(h.dir, e.Dir, "metrics.json"))
	if err := json.Unmarshal(b, &m); err != nil || m.Results["atropos|rl_eval|0"]["eval/pass_rate"] != 0.5 || m.Results["all"] == nil || m.Config["total_evaluation_time_seconds"] == nil {
		t.Fatalf("metrics.json: %v %s", err, b)
	}
	train, _ := rundir.Read(h.dir)
	for _, r := range train {
		if r.StartedAt.After(e.StartedAt) && r.StartedAt.Before(e.FinishedAt) {
			t.Errorf("training rollout %s started at %s, during the evaluation (%s to %s)", r.RolloutID, r.StartedAt, e.StartedAt, e.FinishedAt)
		}
	}
	man, _, _ := rundir.ReadManifest(h.dir)
	if man.Serve == nil || man.Serve.Evals != len(evals) {
		t.Errorf("manifest %+v", man.Serve)
	}
}

// slowAgent takes its time, then is its agent.
type slowAgent struct {
	scheduler.Agent
	d time.Duration
}

func (a slowAgent) Run(ctx context.Context, in scheduler.AgentInput) (scheduler.AgentOutput, error) {
	time.Sleep(a.d)
	return a.Agent.Run(ctx, in)
}

// TestLatestExampleAsks: the look a restart takes at /latest_example asks
// again while the API fails (5xx) or is away, until ctx ends; a refusal
// (4xx) is warned of and taken as no group.
func TestLatestExampleAsks(t *testing.T) {
	h := newHarness(t, 1, "")
	var notes []string
	var mu sync.Mutex
	s := New(h.config(), Options{Backoff: 5 * time.Millisecond, Notify: func(n run.Notice) { mu.Lock(); notes = append(notes, n.Text); mu.Unlock() }})
	ctx := context.Background()

	h.api.Inject(atropostest.Fault{Path: "/latest_example", Status: 502, Times: 3})
	if g, err := s.latestExample(ctx); err != nil || g != nil {
		t.Fatalf("after three 502s: %v %v, want no group and no error", g, err)
	}
	if n := len(h.api.Requests()); n != 4 {
		t.Errorf("%d requests, want 3 failed and 1 answered", n)
	}

	h.api.Inject(atropostest.Fault{Path: "/latest_example", Status: 404, Body: `{"detail": "Not Found"}`})
	if g, err := s.latestExample(ctx); err != nil || g != nil {
		t.Fatalf("after a 404: %v %v", g, err)
	}
	mu.Lock()
	warned := slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "HTTP 404") && strings.Contains(n, "sent again") })
	mu.Unlock()
	if !warned {
		t.Errorf("a 404 was not warned of: %q", notes)
	}

	h.api.Down()
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.latestExample(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the API away: %v, want to ask until ctx ends", err)
	}
}
