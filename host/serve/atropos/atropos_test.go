package atropos_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/serve/atropos"
	"github.com/proctor-dev/proctor/host/serve/atropos/atropostest"
)

var reg = atropos.Registration{MaxTokenLength: 64, DesiredName: "toy", Weight: 1, GroupSize: 2}

func pair(score float64) atropos.Group {
	return atropos.Group{Tokens: [][]int{{1, 2}, {3, 4}}, Masks: [][]int{{-100, 2}, {-100, 4}}, Scores: []float64{score, 1 - score},
		GroupOverrides: map[string]any{"group_size": 2}}
}

// TestProtocol walks an environment's life against the test API, as
// base.py env_manager does: register (waiting for the trainer), info,
// status, send one group and a list, read the latest example, leave.
func TestProtocol(t *testing.T) {
	ctx := context.Background()
	s := atropostest.New(t)
	c := atropos.New(s.URL(), nil)
	tr := s.Trainer()
	if _, err := tr.Register(atropostest.TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 10, SaveEvery: 5}); err != nil {
		t.Fatal(err)
	}
	if _, waiting, ok, err := c.RegisterEnv(ctx, reg); err != nil || ok || waiting != "wait for trainer to start" {
		t.Fatalf("before the trainer's first batch: ok=%v %q %v", ok, waiting, err)
	}
	tr.Batch()
	env, _, ok, err := c.RegisterEnv(ctx, reg)
	if err != nil || !ok || env.ID != 0 || env.Name != "toy_0" || env.NumSteps != 10 || env.CheckpointInterval != 5 {
		t.Fatalf("register: %+v ok=%v %v", env, ok, err)
	}
	if in, err := c.Info(ctx); err != nil || in.BatchSize != 4 || in.MaxTokenLen != 64 {
		t.Fatalf("info: %+v %v", in, err)
	}
	ack, ep, err := c.Send(ctx, env.ID, []atropos.Group{pair(1)})
	if err != nil || ack.Status != "received" || ep != "POST /scored_data" {
		t.Fatalf("send: %+v %s %v", ack, ep, err)
	}
	ack, ep, err = c.Send(ctx, env.ID, []atropos.Group{pair(0), pair(0.5)})
	if err != nil || ack.Status != "received" || ack.GroupsProcessed != 2 || ep != "POST /scored_data_list" {
		t.Fatalf("send list: %+v %s %v", ack, ep, err)
	}
	st, err := c.Status(ctx, env.ID)
	if err != nil || st.QueueSize != 3 || st.SelfQueueSize != 3 || st.MaxGroupSize != 2 || st.CurrentStep != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
	latest, err := c.LatestExample(ctx)
	if err != nil || latest == nil || latest.Scores[0] != 0.5 || latest.EnvID == nil || *latest.EnvID != 0 {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	if known, msg, err := c.Disconnect(ctx, env.ID); err != nil || !known || msg != "" || s.Envs()[0].Connected {
		t.Fatalf("disconnect: %v %v %q", known, err, msg)
	}
	// An env_id the API never gave: server.py disconnect_env (lines
	// 325-331 at 296a0bc5) answers 200 with the IndexError's text.
	if known, msg, err := c.Disconnect(ctx, 7); err != nil || known || msg != "failure: list index out of range" {
		t.Fatalf("disconnect of an unknown env_id: %v %q %v", known, msg, err)
	}
	// A large body goes gzipped, as the Python client sends it.
	big := pair(1)
	big.Tokens = [][]int{make([]int, 600), make([]int, 600)}
	big.Masks = big.Tokens
	if _, _, err := c.Send(ctx, env.ID, []atropos.Group{big}); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if last := reqs[len(reqs)-1]; !last.Gzip || !strings.Contains(string(last.Body), `"env_id":0`) {
		t.Errorf("large body: gzip=%v", last.Gzip)
	}
	if first := reqs[len(reqs)-2]; first.Gzip {
		t.Error("a small body was gzipped")
	}
}

// TestErrors: each way an answer goes wrong is an error naming the
// endpoint; a refused connection is a transport error that was not sent,
// a lost answer one that was.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	s := atropostest.New(t)
	c := atropos.New(s.URL(), nil)
	var ae *atropos.Error
	if _, err := c.Status(ctx, 0); !errors.As(err, &ae) || !ae.ServerError() || !strings.Contains(err.Error(), "rollout API GET /status-env: HTTP 500") {
		t.Errorf("status of no env: %v", err)
	}
	cases := []struct {
		fault atropostest.Fault
		call  func() error
		want  string
	}{
		{atropostest.Fault{Path: "/register-env", Status: 422, Body: `{"detail": [{"loc": ["body", "group_size"]}]}`},
			func() error { _, _, _, err := c.RegisterEnv(ctx, reg); return err }, `rollout API POST /register-env: HTTP 422: {"detail": [{"loc": ["body", "group_size"]}]}`},
		{atropostest.Fault{Path: "/register-env", Status: 200, Body: `{"status": "success", "wandb_name": "toy_0"}`},
			func() error { _, _, _, err := c.RegisterEnv(ctx, reg); return err }, `rollout API POST /register-env: malformed answer: no "env_id" in the answer`},
		{atropostest.Fault{Path: "/info", Status: 200, Body: `<html>proxy error</html>`},
			func() error { _, err := c.Info(ctx); return err }, "rollout API GET /info: malformed answer: invalid character '<'"},
		{atropostest.Fault{Path: "/info", Status: 200, Body: `{"batch_size": "four", "max_token_len": 64}`},
			func() error { _, err := c.Info(ctx); return err }, `rollout API GET /info: malformed answer: "batch_size" is "four"`},
		{atropostest.Fault{Path: "/status-env", Status: 200, Body: `{"current_step": 3, "queue_size": -2}`},
			func() error { _, err := c.Status(ctx, 0); return err }, "rollout API GET /status-env: malformed answer: negative count"},
		{atropostest.Fault{Path: "/scored_data", Status: 422, Body: `{"detail": "bad"}`},
			func() error { _, _, err := c.Send(ctx, 0, []atropos.Group{pair(1)}); return err }, `rollout API POST /scored_data: HTTP 422`},
	}
	for _, tc := range cases {
		s.Inject(tc.fault)
		if err := tc.call(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %d: got %v, want %q", tc.fault.Path, tc.fault.Status, err, tc.want)
		}
	}
	// A 2xx whatever its body means the groups were taken.
	s.Inject(atropostest.Fault{Path: "/scored_data", Status: 200, Body: `ok`})
	if ack, _, err := c.Send(ctx, 0, []atropos.Group{pair(1)}); err != nil || !strings.HasPrefix(ack.Status, "unreadable answer") {
		t.Errorf("odd ack: %+v %v", ack, err)
	}

	s.Inject(atropostest.Fault{Path: "/scored_data", Lost: true})
	_, _, err := c.Send(ctx, 0, []atropos.Group{pair(1)})
	var te *atropos.TransportError
	if !errors.As(err, &te) || !te.Sent || !atropos.Unreachable(err) {
		t.Errorf("lost answer: %v, want a transport error that was sent", err)
	}
	s.Down()
	_, _, err = c.Send(ctx, 0, []atropos.Group{pair(1)})
	if !errors.As(err, &te) || te.Sent {
		t.Errorf("refused: %v, want a transport error that was not sent", err)
	}
}
