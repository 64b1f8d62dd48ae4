package export

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/agent/openai/openaitest"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/local"
	"github.com/proctor-dev/proctor/trajectory"
)

// rollout runs the real loop against the scripted server in a local
// sandbox: write a file, run it, list the directory in two calls of one
// turn, answer.
func rollout(t testing.TB, cfg openai.Config, drop bool) *trajectory.Trajectory {
	t.Helper()
	srv := openaitest.New(
		openaitest.Step{Body: openaitest.Reply("I will write it.", openaitest.Call{Name: "write_file", Args: map[string]any{"path": "hello.py", "content": "print('hello world')\n"}})},
		openaitest.Step{Body: openaitest.Reply("", openaitest.Call{Name: "terminal", Args: map[string]any{"command": "python3 hello.py"}})},
		openaitest.Step{Body: openaitest.Reply("Check the files.", openaitest.Call{Name: "terminal", Args: map[string]any{"command": "ls"}}, openaitest.Call{Name: "read_file", Args: map[string]any{"path": "hello.py"}}), DropReasoning: drop},
		openaitest.Step{Body: openaitest.Reply("It prints hello world.")},
	)
	defer srv.Close()
	sb, err := local.Backend{}.Start(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	tools, err := agent.NewToolset([]string{"terminal", "file"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.BaseURL, cfg.Model, cfg.BaseBackoff = srv.URL(), "scripted", 5*time.Millisecond
	l := &agent.Loop{Model: openai.NewFactory(cfg, openai.NewLimiter(2)).New(), Tools: tools, MaxTurns: 8, System: "You are careful.", Name: "scripted"}
	tr, err := l.Run(context.Background(), sb, "write hello.py and run it")
	if err != nil {
		t.Fatal(err)
	}
	if tr.StopReason != trajectory.StopDone || len(tr.Turns) != 4 {
		t.Fatalf("stop %s after %d turns", tr.StopReason, len(tr.Turns))
	}
	return &tr
}

func chat(t testing.TB, msgs []trajectory.Message) ([]int, []bool) {
	t.Helper()
	b, _ := json.Marshal(msgs)
	var m []openaitest.Message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return openaitest.Chat(m)
}

// TestTokensThroughTheLoop: a multi-turn rollout with tool calls, recorded
// by the real loop from the endpoint's ids, is exactly the rendered
// conversation; the model's tokens (every turn's completion) are unmasked
// with their logprobs, everything else (system, user, tool results,
// template tokens) is -100 with logprob 1.0.
func TestTokensThroughTheLoop(t *testing.T) {
	tr := rollout(t, openai.Config{ReturnTokens: true}, false)
	s, err := Tokens(tr)
	if err != nil {
		t.Fatal(err)
	}
	want, gen := chat(t, tr.Messages)
	if !slices.Equal(s.Tokens, want) {
		t.Fatalf("tokens\n got %v\nwant %v", s.Tokens, want)
	}
	if len(s.Masks) != len(want) || len(s.Logprobs) != len(want) {
		t.Fatalf("lengths: %d tokens, %d masks, %d logprobs", len(want), len(s.Masks), len(s.Logprobs))
	}
	generated := 0
	for i, id := range want {
		wantMask, wantLP := MaskedToken, MaskedLogprob
		if gen[i] {
			wantMask, wantLP = id, openaitest.Logprob(id)
			generated++
		}
		if s.Masks[i] != wantMask || s.Logprobs[i] != wantLP {
			t.Fatalf("position %d (token %d, generated %v): mask %d logprob %v", i, id, gen[i], s.Masks[i], s.Logprobs[i])
		}
	}
	// Each turn's completion sits right after that turn's prompt.
	prompts, err := trajectory.FullPrompts(tr.Turns)
	if err != nil {
		t.Fatal(err)
	}
	for ti, turn := range tr.Turns {
		at := len(prompts[ti])
		if !slices.Equal(s.Masks[at:at+len(turn.CompletionTokenIDs)], turn.CompletionTokenIDs) {
			t.Errorf("turn %d's completion is not at %d", turn.Index, at)
		}
	}
	total := 0
	for _, turn := range tr.Turns {
		total += len(turn.CompletionTokenIDs)
	}
	if generated != total {
		t.Errorf("%d generated positions, %d completion tokens", generated, total)
	}

	g, info, err := Group([]rundir.Record{rec("t", 0, 1), rec("t", 1, 0)}, []*trajectory.Trajectory{tr, tr}, Filter{})
	if err != nil || !info.Kept || !info.Tokens || !info.Logprobs || info.NoTokens != "" {
		t.Fatalf("group: %v %+v", err, info)
	}
	if !slices.Equal(g.Tokens[1], want) || !slices.Equal(g.InferenceLogprobs[0], s.Logprobs) || len(g.Messages[0]) != len(tr.Messages) {
		t.Fatal("group does not hold the sequences")
	}
	// Every field of Atropos's ScoredData is on the line, tokens and masks
	// included (they are required there).
	line, _ := json.Marshal(g)
	var fields map[string]any
	json.Unmarshal(line, &fields)
	for _, f := range []string{"tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params", "inference_logprobs", "overrides", "group_overrides", "images"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("line lacks %s", f)
		}
	}
}

// TestTemplateDropsReasoning: when a later prompt re-renders an earlier
// turn differently, no sequence is invented: the error names the turn and
// the group is written with messages only.
func TestTemplateDropsReasoning(t *testing.T) {
	tr := rollout(t, openai.Config{ReturnTokens: true}, true)
	_, err := Tokens(tr)
	var pe *PrefixError
	if !errors.As(err, &pe) || pe.Turn != 2 {
		t.Fatalf("want a prefix error at turn 2, got %v", err)
	}
	g, info, _ := Group([]rundir.Record{rec("t", 0, 1)}, []*trajectory.Trajectory{tr}, Filter{})
	if info.Tokens || g.Tokens != nil || g.Masks != nil || g.InferenceLogprobs != nil || !strings.Contains(info.NoTokens, "t#0: turn 2") {
		t.Fatalf("want messages only, got %+v", info)
	}
	line, _ := json.Marshal(g.MessagesOnly())
	for _, field := range []string{`"tokens"`, `"masks"`, `"inference_logprobs"`} {
		if strings.Contains(string(line), field) {
			t.Fatalf("messages-only line has %s: %s", field, line)
		}
	}
	for _, field := range []string{`"messages":[[`, `"scores":[1]`, `"group_overrides":{"group_size":1}`} {
		if !strings.Contains(string(line), field) {
			t.Fatalf("messages-only line lacks %s: %s", field, line)
		}
	}
}

func TestNoTokenIDs(t *testing.T) {
	tr := rollout(t, openai.Config{}, false)
	if _, err := Tokens(tr); !errors.Is(err, ErrNoTokens) {
		t.Fatalf("want ErrNoTokens, got %v", err)
	}
	_, info, _ := Group([]rundir.Record{rec("t", 0, 1)}, []*trajectory.Trajectory{tr}, Filter{})
	if info.Tokens || info.NoTokens != ErrNoTokens.Error() || !info.Kept {
		t.Fatalf("%+v", info)
	}
}

// TestMixedGroupNamesRollout: when one rollout of a group lacks token ids
// and the others have them, the reason names that rollout.
func TestMixedGroupNamesRollout(t *testing.T) {
	bare := synth(3, 4, 2)
	for i := range bare.Turns {
		bare.Turns[i].PromptTokenIDs, bare.Turns[i].CompletionTokenIDs, bare.Turns[i].CompletionLogprobs = nil, nil, nil
	}
	_, info, err := Group([]rundir.Record{rec("t", 0, 1), rec("t", 1, 0), rec("t", 2, 1)}, []*trajectory.Trajectory{synth(3, 4, 2), bare, synth(3, 4, 2)}, Filter{})
	if err != nil || info.Tokens {
		t.Fatalf("%v %+v", err, info)
	}
	if want := "rollout t#1: no token ids recorded"; !strings.HasPrefix(info.NoTokens, want) || info.NoTokensClass != NoTokensNoIDs {
		t.Errorf("reason %q (%s), want it to start with %q", info.NoTokens, info.NoTokensClass, want)
	}
	// No rollout with ids: the reason is the group's, with no rollout named.
	_, info, _ = Group([]rundir.Record{rec("t", 0, 1), rec("t", 1, 0)}, []*trajectory.Trajectory{bare, bare}, Filter{})
	if info.NoTokens != ErrNoTokens.Error() {
		t.Errorf("reason %q for a group without ids", info.NoTokens)
	}
}

// TestGroupSampling: each rollout's recorded temperature is its override,
// what all rollouts share is the group's generation_params, and
// group_overrides always says how many rollouts the group holds.
func TestGroupSampling(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	with := func(s *trajectory.Sampling) *trajectory.Trajectory {
		tr := synth(2, 2, 2)
		tr.Sampling = s
		return tr
	}
	infra := rec("t", 3, 0)
	infra.Outcome = rundir.OutcomeInfraError
	cases := []struct {
		name     string
		sampling []*trajectory.Sampling
		params   string
		override string
	}{
		{"temperatures differ", []*trajectory.Sampling{{Temperature: f(0.5), MaxTokens: 100}, {Temperature: f(1), MaxTokens: 100}, {Temperature: f(0.5), MaxTokens: 100}},
			`{"max_tokens":100}`, `[{"temperature":0.5},{"temperature":1},{"temperature":0.5}]`},
		{"shared", []*trajectory.Sampling{{Temperature: f(0.7), MaxTokens: 64}, {Temperature: f(0.7), MaxTokens: 64}, {Temperature: f(0.7), MaxTokens: 64}},
			`{"max_tokens":64,"temperature":0.7}`, `[{"temperature":0.7},{"temperature":0.7},{"temperature":0.7}]`},
		{"one unknown", []*trajectory.Sampling{{Temperature: f(0.7)}, nil, {Temperature: f(0.7)}},
			`null`, `[{"temperature":0.7},{},{"temperature":0.7}]`},
		{"endpoint default", []*trajectory.Sampling{{MaxTokens: 8}, {MaxTokens: 8}, {MaxTokens: 8}}, `{"max_tokens":8}`, `null`},
		{"older transcripts", []*trajectory.Sampling{nil, nil, nil}, `null`, `null`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs := []rundir.Record{rec("t", 0, 1), rec("t", 1, 0), rec("t", 2, 1), infra}
			trajs := []*trajectory.Trajectory{with(tc.sampling[0]), with(tc.sampling[1]), with(tc.sampling[2]), synth(2, 2, 2)}
			g, _, err := Group(recs, trajs, Filter{})
			if err != nil {
				t.Fatal(err)
			}
			line, _ := json.Marshal(g)
			var got struct {
				GenerationParams json.RawMessage `json:"generation_params"`
				Overrides        json.RawMessage `json:"overrides"`
				GroupOverrides   json.RawMessage `json:"group_overrides"`
			}
			json.Unmarshal(line, &got)
			if string(got.GenerationParams) != tc.params || string(got.Overrides) != tc.override {
				t.Errorf("generation_params %s, overrides %s; want %s, %s", got.GenerationParams, got.Overrides, tc.params, tc.override)
			}
			// Three of four rollouts: the infra_error one is left out.
			if string(got.GroupOverrides) != `{"group_size":3}` {
				t.Errorf("group_overrides %s", got.GroupOverrides)
			}
		})
	}
}

func rec(task string, attempt int, reward float64) rundir.Record {
	return rundir.Record{RolloutID: task + "#" + string(rune('0'+attempt)), TaskID: task, Attempt: attempt, Outcome: rundir.OutcomePassed, Reward: reward}
}

// synth is a trajectory of n turns whose ids line up: each prompt is the
// sequence so far plus p new tokens, each completion c tokens.
func synth(n, p, c int) *trajectory.Trajectory {
	tr := &trajectory.Trajectory{Agent: "llm", Model: "m", Tools: []string{"terminal"}, StopReason: trajectory.StopDone}
	tr.Messages = append(tr.Messages, trajectory.Message{Role: "user", Content: "do it"})
	var seq []int
	next := 1
	for i := range n {
		for range p {
			seq = append(seq, next)
			next++
		}
		prompt := slices.Clone(seq)
		var comp []int
		var lp []float64
		for range c {
			comp = append(comp, next)
			lp = append(lp, -float64(next%7)/10)
			next++
		}
		seq = append(seq, comp...)
		tr.Turns = append(tr.Turns, trajectory.Turn{Index: i, PromptTokenIDs: prompt, CompletionTokenIDs: comp, CompletionLogprobs: lp,
			Usage: trajectory.Usage{PromptTokens: int64(len(prompt)), CompletionTokens: int64(c)}})
		if i < n-1 {
			id := "call_" + string(rune('a'+i%26))
			tr.Messages = append(tr.Messages,
				trajectory.Message{Role: "assistant", Content: "step", ToolCalls: []trajectory.ToolCall{{ID: id, Type: "function", Function: trajectory.FunctionCall{Name: "terminal", Arguments: `{"command": "ls"}`}}}},
				trajectory.Message{Role: "tool", ToolCallID: id, Name: "terminal", Content: "a.txt"})
		} else {
			tr.Messages = append(tr.Messages, trajectory.Message{Role: "assistant", Content: "done"})
		}
	}
	return tr
}

func TestGroupFilters(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	oracle := &trajectory.Trajectory{Agent: "oracle", StopReason: trajectory.StopOracle}
	infra := rec("t", 2, 0)
	infra.Outcome = rundir.OutcomeInfraError
	cases := []struct {
		name    string
		rewards []float64
		filter  Filter
		dropped string
		n       int
	}{
		{"kept", []float64{1, 0}, Filter{}, "", 2},
		{"below min reward", []float64{0.2, 0.4}, Filter{MinReward: f(0.5)}, DropMinReward, 2},
		{"best reaches min reward", []float64{0, 0.5}, Filter{MinReward: f(0.5)}, "", 2},
		{"equal scores", []float64{1, 1}, Filter{DropEqualScores: true}, DropEqualScores, 2},
		{"equal scores kept when not asked", []float64{1, 1}, Filter{}, "", 2},
		{"too long", []float64{1, 0}, Filter{MaxTokens: 10}, DropMaxTokens, 2},
		{"at the limit", []float64{1, 0}, Filter{MaxTokens: 3 * (4 + 2)}, DropMaxTokens, 2}, // Atropos: len >= max_token_len
		{"fits", []float64{1, 0}, Filter{MaxTokens: 3*(4+2) + 1}, "", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs := []rundir.Record{rec("t", 0, tc.rewards[0]), rec("t", 1, tc.rewards[1]), infra, rec("t", 3, 1)}
			trajs := []*trajectory.Trajectory{synth(3, 4, 2), synth(3, 4, 2), synth(1, 1, 1), oracle}
			g, info, err := Group(recs, trajs, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if info.Dropped != tc.dropped || info.Kept != (tc.dropped == "") || info.Rollouts != tc.n || len(g.Scores) != tc.n {
				t.Fatalf("%+v", info)
			}
			if info.Skipped[SkipInfraError] != 1 || info.Skipped[SkipNoModelTurn] != 1 {
				t.Errorf("skipped %v", info.Skipped)
			}
		})
	}
	_, info, _ := Group([]rundir.Record{rec("t", 0, 1)}, []*trajectory.Trajectory{nil}, Filter{})
	if info.Dropped != DropEmpty || info.Skipped[SkipNoTranscript] != 1 {
		t.Errorf("%+v", info)
	}
	if _, _, err := Group([]rundir.Record{rec("t", 0, 1), rec("u", 0, 1)}, []*trajectory.Trajectory{nil, nil}, Filter{}); err == nil {
		t.Error("two tasks in one group")
	}
	// Without ids, the length is the last turn's usage.
	tr := synth(3, 4, 2)
	for i := range tr.Turns {
		tr.Turns[i].PromptTokenIDs, tr.Turns[i].CompletionTokenIDs = nil, nil
	}
	if _, info, _ := Group([]rundir.Record{rec("t", 0, 1)}, []*trajectory.Trajectory{tr}, Filter{MaxTokens: 18}); info.Dropped != DropMaxTokens || info.Tokens {
		t.Errorf("usage length: %+v", info)
	}
	if _, info, _ := Group([]rundir.Record{rec("t", 0, 1)}, []*trajectory.Trajectory{tr}, Filter{MaxTokens: 19}); !info.Kept {
		t.Errorf("usage length below the limit: %+v", info)
	}
}

func TestTokensEdgeCases(t *testing.T) {
	tr := synth(3, 2, 2)
	tr.Turns[1].CompletionLogprobs = tr.Turns[1].CompletionLogprobs[:1]
	s, err := Tokens(tr)
	if err != nil || s.Logprobs != nil || len(s.Tokens) != 12 {
		t.Fatalf("misaligned logprobs must drop logprobs only: %v %+v", err, s)
	}
	tr = synth(3, 2, 2)
	tr.Turns = append(tr.Turns, trajectory.Turn{Index: 3, Errors: []string{"context length exceeded"}})
	if s, err := Tokens(tr); err != nil || len(s.Tokens) != 12 {
		t.Fatalf("a failed last call is not a turn: %v", err)
	}
	tr = synth(3, 2, 2)
	tr.Turns[1].CompletionTokenIDs = nil
	if _, err := Tokens(tr); err == nil || !strings.Contains(err.Error(), "turn 1") || NoTokensClass(err) != NoTokensTurnWithoutIDs {
		t.Fatalf("a turn without ids: %v (%s)", err, NoTokensClass(err))
	}
	tr = synth(3, 2, 2)
	tr.Turns[2].PromptTokenIDs = tr.Turns[2].PromptTokenIDs[:3]
	var pe *PrefixError
	if _, err := Tokens(tr); !errors.As(err, &pe) || pe.Turn != 2 || NoTokensClass(err) != NoTokensPrefixMismatch {
		t.Fatalf("a short prompt: %v", err)
	}
	tr = synth(1, 2, 2)
	tr.Turns[0].CompletionTokenIDs[0] = -100
	if _, err := Tokens(tr); err == nil || NoTokensClass(err) != NoTokensInvalidIDs {
		t.Fatalf("a negative id would read as a mask: %v", err)
	}
	tr = synth(2, 2, 2)
	tr.Turns[1].PromptPrefix = 99
	if _, err := Tokens(tr); err == nil || NoTokensClass(err) != NoTokensInvalidIDs {
		t.Fatalf("a corrupt prompt_prefix: %v", err)
	}
	if _, err := Tokens(&trajectory.Trajectory{}); NoTokensClass(err) != NoTokensNoIDs {
		t.Fatalf("no ids: %v", err)
	}
}

// TestRewardErrorIsNoTrainingSignal: a rollout on which a stacked reward
// plugin failed is left out of groups and SFT (its reward lacks that
// score) and counted, but still has its ATIF document.
func TestRewardErrorIsNoTrainingSignal(t *testing.T) {
	broken := rec("t", 1, 0.7)
	broken.Rewards = []rundir.RewardScore{{Name: "style", Weight: 0.5, Reward: 1}, {Name: "judge", Weight: 0.5, Error: "reward plugin judge: trap"}}
	fine := rec("t", 0, 1)
	fine.Rewards = []rundir.RewardScore{{Name: "style", Weight: 0.5, Reward: 1}}
	g, info, err := Group([]rundir.Record{fine, broken}, []*trajectory.Trajectory{synth(2, 2, 2), synth(2, 2, 2)}, Filter{})
	if err != nil || info.Rollouts != 1 || len(g.Scores) != 1 || g.Scores[0] != 1 || info.Skipped[SkipRewardError] != 1 {
		t.Fatalf("group: %v %+v scores %v", err, info, g.Scores)
	}
	if _, ok := SFT(broken, synth(2, 2, 2), Filter{}); ok {
		t.Error("an SFT line for a rollout whose reward plugin failed")
	}
	if _, ok := SFT(fine, synth(2, 2, 2), Filter{}); !ok {
		t.Error("no SFT line for a rollout whose rewards all scored")
	}
	if Skip(broken, synth(2, 2, 2)) != "" || SkipTraining(broken, synth(2, 2, 2)) != SkipRewardError {
		t.Error("a failed reward must keep the rollout out of training data only")
	}
}

func TestSFT(t *testing.T) {
	tr := synth(2, 2, 2)
	min := 0.5
	line, ok := SFT(rec("t", 0, 1), tr, Filter{MinReward: &min})
	if !ok || len(line.Messages) != 4 || len(line.Tools) != 1 || line.Tools[0].Function.Name != "terminal" {
		t.Fatalf("%v %+v", ok, line)
	}
	b, _ := json.Marshal(line)
	for _, want := range []string{`"tool_calls":[{"id":"call_a"`, `"role":"tool"`, `"reward":1`, `"task_id":"t"`, `"parameters":{`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("line lacks %s: %s", want, b)
		}
	}
	if _, ok := SFT(rec("t", 0, 0.4), tr, Filter{MinReward: &min}); ok {
		t.Error("below min reward")
	}
	if _, ok := SFT(rec("t", 0, 1), &trajectory.Trajectory{Agent: "nop"}, Filter{}); ok {
		t.Error("no model turn")
	}
}

func TestMessagesPath(t *testing.T) {
	for in, want := range map[string]string{
		"groups.jsonl":          "groups.messages.jsonl",
		"out/data.json":         "out/data.messages.jsonl",
		"batch":                 "batch.messages.jsonl",
		"/tmp/x.y/groups.jsonl": "/tmp/x.y/groups.messages.jsonl",
	} {
		if got := MessagesPath(in); got != want {
			t.Errorf("MessagesPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseTranscript(t *testing.T) {
	wrapped := `{"rollout_id":"a#0","task_id":"a","seed":7,"prompt":"p","system":"","trajectory":{"agent":"llm","messages":[{"role":"user","content":"p"}],"turns":[],"stop_reason":"done","usage":{"prompt_tokens":0,"completion_tokens":0}}}`
	bare := `{"agent":"llm","messages":[{"role":"user","content":"p"}],"turns":null,"stop_reason":"done","usage":{"prompt_tokens":0,"completion_tokens":0}}`
	for _, in := range []string{wrapped, bare} {
		tr, err := ParseTranscript([]byte(in))
		if err != nil || tr.Trajectory == nil || len(tr.Trajectory.Messages) != 1 {
			t.Fatalf("%s: %v", in, err)
		}
	}
	for _, in := range []string{`[]`, `{}`, `{"trajectory": 3}`, `nul`, `{"messages": "x"}`} {
		if _, err := ParseTranscript([]byte(in)); err == nil {
			t.Errorf("%s: want an error", in)
		}
	}
}

// TestRecordedToolSchemas: a trajectory that recorded the tools its
// model was offered (an installed agent's own, from the gateway) exports
// them to SFT and ATIF, not proctor's tools of the same names.
func TestRecordedToolSchemas(t *testing.T) {
	tr := synth(2, 2, 2)
	tr.ToolSchemas = []trajectory.Schema{{Type: "function", Function: trajectory.SchemaFunction{Name: "exec_command", Description: "the CLI's shell", Parameters: json.RawMessage(`{"type":"object"}`)}}}
	line, ok := SFT(rec("t", 0, 1), tr, Filter{})
	if !ok || len(line.Tools) != 1 || line.Tools[0].Function.Name != "exec_command" {
		t.Fatalf("sft tools %+v", line.Tools)
	}
	a := ATIF(rec("t", 0, 1), tr, ATIFMeta{RunID: "run-1"})
	if b, _ := json.Marshal(a.Agent.ToolDefinitions); !strings.Contains(string(b), `"exec_command"`) || strings.Contains(string(b), `"terminal"`) {
		t.Fatalf("atif tools %s", b)
	}
}

// TestVerifierFailedIsTrainingData: a rollout whose verifier reached no
// reward (Harbor's outcome, reward 0) stays in its group with its score,
// in SFT and in ATIF, as a failed one does: leaving it out, as an
// infra_error is, would drop the rollouts whose code made the tests hang
// from the training data (issue 32).
func TestVerifierFailedIsTrainingData(t *testing.T) {
	hung := rec("t", 1, 0)
	hung.Outcome, hung.Error = rundir.OutcomeVerifierFailed, "test.sh ran past the verifier timeout of 600s"
	g, info, err := Group([]rundir.Record{rec("t", 0, 1), hung}, []*trajectory.Trajectory{synth(2, 2, 2), synth(2, 2, 2)}, Filter{})
	if err != nil || info.Rollouts != 2 || !slices.Equal(g.Scores, []float64{1, 0}) || len(info.Skipped) != 0 {
		t.Fatalf("group: %v %+v scores %v", err, info, g.Scores)
	}
	line, ok := SFT(hung, synth(2, 2, 2), Filter{})
	if !ok || line.Outcome != rundir.OutcomeVerifierFailed || line.Reward != 0 {
		t.Errorf("SFT: %v %+v", ok, line)
	}
	a := ATIF(hung, synth(2, 2, 2), ATIFMeta{RunID: "r"})
	if a.Extra["outcome"] != rundir.OutcomeVerifierFailed || a.Extra["reward"] != 0.0 {
		t.Errorf("ATIF extra %v", a.Extra)
	}
}
