package serve

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestOutageSendsOneList: groups that become whole while the API is
// unreachable go, when it answers again, in one POST /scored_data_list,
// as docs/training.md says (and base.py posts what its workers return
// together). At 1ae3d96 the first group went alone to /scored_data, taken
// before the others were whole and tried again by itself.
func TestOutageSendsOneList(t *testing.T) {
	h := newHarness(t, 3, "epochs = 1\nmax_groups = 3\n")
	h.agent.hold = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := h.trainer(ctx, batchOf4, 10*time.Millisecond)
	done := h.background(ctx)
	waitFor(t, "the 6 rollouts to start", func() bool { return h.agent.started.Load() == 6 })
	h.api.Down()
	close(h.agent.hold)
	waitFor(t, "the 3 groups to be whole and handed to the sender", func() bool {
		s := h.running()
		if s == nil || s.send == nil {
			return false
		}
		s.send.mu.Lock()
		defer s.send.mu.Unlock()
		return s.send.handed == 3
	})
	if err := h.api.Up(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel()
	tw.Wait()
	var posts []string
	for _, r := range h.api.Requests() {
		if strings.HasPrefix(r.Path, "/scored_data") {
			n := 1
			if r.Path == "/scored_data_list" {
				var list []json.RawMessage
				json.Unmarshal(r.Body, &list)
				n = len(list)
			}
			posts = append(posts, r.Path+" "+strings.Repeat("g", n))
		}
	}
	if len(h.noDuplicates()) != 3 || len(posts) == 0 || posts[0] != "/scored_data_list ggg" {
		t.Fatalf("posts after the outage %q, want the 3 groups in one /scored_data_list", posts)
	}
}

// TestNoModelTurnSaidOnce: rollouts with no turn a model generated (the
// oracle and nop agents) make groups that cannot be sent: serve says so
// once, naming the agent and what to set, as it does for groups without
// token ids. At 1ae3d96 it said nothing during the run.
func TestNoModelTurnSaidOnce(t *testing.T) {
	h := newHarness(t, 3, "epochs = 1\n")
	h.agent.noModel = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := h.trainer(ctx, batchOf4, 10*time.Millisecond)
	if _, err := h.serve(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	tw.Wait()
	n := 0
	for _, note := range h.notes {
		if strings.Contains(note, `has no rollout a model generated (agent.kind = "nop"; 2 no_model_turn): no group of this run can be sent`) &&
			strings.Contains(note, `serve with agent.kind = "llm"`) {
			n++
		}
	}
	if n != 1 || len(h.api.Taken()) != 0 {
		t.Fatalf("said %d times, %d groups sent; notes %q", n, len(h.api.Taken()), h.notes)
	}
	for k, e := range h.index() {
		if e.State != stateDropped || e.Dropped != "empty" {
			t.Errorf("%s: %+v", k, e)
		}
	}
}
