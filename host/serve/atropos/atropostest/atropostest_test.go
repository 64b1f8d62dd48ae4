package atropostest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
)

type answer struct {
	code int
	body string
}

// call sends a raw request and returns the status and body.
func call(t *testing.T, s *Server, method, path, body string, hdr ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, s.URL()+path, rd)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}

func mustJSON200(t *testing.T, a answer) map[string]any {
	t.Helper()
	code, body := a.code, a.body
	if code != 200 {
		t.Fatalf("HTTP %d: %s", a.code, a.body)
	}
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return m
}

const regEnv = `{"max_token_length": 64, "desired_name": "toy", "weight": 1.0, "min_batch_allocation": null, "group_size": 2}`

func groupJSON(tokens string) string {
	return `{"tokens": ` + tokens + `, "masks": ` + tokens + `, "scores": [` + strings.TrimSuffix(strings.Repeat("1.0,", strings.Count(tokens, "[")-1), ",") + `], "env_id": 0}`
}

// TestRegistrationOrder pins the order of atropos-api.md: the trainer's
// /register (every field required) gives a uuid wider than 64 bits;
// /register-env waits until the trainer's first /batch, not its
// /register; /info says -1 until a trainer registers.
func TestRegistrationOrder(t *testing.T) {
	s := New(t)
	if m := mustJSON200(t, call(t, s, "GET", "/info", "")); m["batch_size"] != json.Number("-1") || m["max_token_len"] != json.Number("-1") {
		t.Fatalf("info before the trainer: %v", m)
	}
	if a := call(t, s, "POST", "/register", `{"wandb_group": "g", "batch_size": 4}`); a.code != 422 || !strings.Contains(a.body, "wandb_project") {
		t.Fatalf("a registration without its fields: %d %s", a.code, a.body)
	}
	tr := s.Trainer()
	id, err := tr.Register(TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 100, SaveEvery: 10, CheckpointDir: "/ck"})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := new(big.Int).SetString(id.String(), 10); !ok || n.BitLen() <= 64 {
		t.Errorf("uuid %s: want a 128-bit uuid4 integer", id)
	}
	if m := mustJSON200(t, call(t, s, "POST", "/register-env", regEnv)); m["status"] != "wait for trainer to start" {
		t.Fatalf("register-env before the trainer's /batch: %v", m)
	}
	if b, err := tr.Batch(); err != nil || b != nil {
		t.Fatalf("first batch: %v %v", b, err)
	}
	m := mustJSON200(t, call(t, s, "POST", "/register-env", regEnv))
	if m["status"] != "success" || m["env_id"] != json.Number("0") || m["wandb_name"] != "toy_0" || m["checkpoint_dir"] != "/ck" ||
		m["starting_step"] != json.Number("0") || m["checkpoint_interval"] != json.Number("10") || m["num_steps"] != json.Number("100") {
		t.Fatalf("register-env: %v", m)
	}
	if m := mustJSON200(t, call(t, s, "POST", "/register-env", regEnv)); m["env_id"] != json.Number("1") || m["wandb_name"] != "toy_1" {
		t.Fatalf("second register-env: %v", m)
	}
	if m := mustJSON200(t, call(t, s, "GET", "/info", "")); m["batch_size"] != json.Number("4") || m["max_token_len"] != json.Number("64") {
		t.Fatalf("info: %v", m)
	}
	if a := call(t, s, "POST", "/register-env", `{"desired_name": "toy"}`); a.code != 422 {
		t.Errorf("register-env without its fields: %d", a.code)
	}
}

// started is a server with a trainer (batch 4) and one environment of
// group size 2 registered.
func started(t *testing.T) (*Server, *Trainer) {
	s := New(t)
	tr := s.Trainer()
	if _, err := tr.Register(TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 100}); err != nil {
		t.Fatal(err)
	}
	tr.Batch()
	mustJSON200(t, call(t, s, "POST", "/register-env", regEnv))
	return s, tr
}

// TestStatusEnv pins /status-env: env_id in a JSON body of the GET (a
// query string is 422), 500 for an unknown environment, and the queue
// counted in the environment's groups.
func TestStatusEnv(t *testing.T) {
	s, _ := started(t)
	if a := call(t, s, "GET", "/status-env?env_id=0", ""); a.code != 422 {
		t.Errorf("query string: HTTP %d, want 422", a.code)
	}
	if a := call(t, s, "GET", "/status-env", `{"env_id": 5}`); a.code != 500 || a.body != "Internal Server Error" {
		t.Errorf("unknown env: %d %q", a.code, a.body)
	}
	mustJSON200(t, call(t, s, "POST", "/scored_data", groupJSON("[[1,2],[3,4]]")))
	mustJSON200(t, call(t, s, "POST", "/scored_data", groupJSON("[[1,2],[3,4]]")))
	m := mustJSON200(t, call(t, s, "GET", "/status-env", `{"env_id": 0}`))
	want := map[string]any{"current_step": json.Number("0"), "queue_size": json.Number("2"), "unallocated_fraction": json.Number("1"),
		"self_queue_size": json.Number("2"), "max_group_size": json.Number("2"), "env_weight": json.Number("1")}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (%v)", k, m[k], v, m)
		}
	}
	empty := New(t)
	if a := call(t, empty, "GET", "/status-env", `{"env_id": 0}`); a.code != 500 {
		t.Errorf("no env registered: HTTP %d, want 500", a.code)
	}
}

// TestScoredDataValidation pins ScoredData's validation: a float token, a
// message without content, a missing field are 422; gzip bodies are
// read, a bad one is 400.
func TestScoredDataValidation(t *testing.T) {
	s, _ := started(t)
	for _, body := range []string{
		`{"tokens": [[1.5, 2]], "masks": [[1, 2]], "scores": [1]}`,
		`{"tokens": [[1, 2]], "masks": [[1, 2]], "scores": [1], "messages": [[{"role": "user"}]]}`,
		`{"tokens": [[1, 2]], "scores": [1]}`,
		`{"tokens": [[1, 2]], "masks": [[1, 2]], "scores": ["high"]}`,
	} {
		if a := call(t, s, "POST", "/scored_data", body); a.code != 422 || !strings.Contains(a.body, "detail") {
			t.Errorf("%s: HTTP %d %s, want 422", body, a.code, a.body)
		}
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte(groupJSON("[[1,2],[3,4]]")))
	zw.Close()
	if m := mustJSON200(t, call(t, s, "POST", "/scored_data", zipped.String(), "Content-Encoding", "gzip")); m["status"] != "received" {
		t.Errorf("gzip body: %v", m)
	}
	if a := call(t, s, "POST", "/scored_data", "not gzip", "Content-Encoding", "gzip"); a.code != 400 || a.body != "Invalid gzip payload" {
		t.Errorf("bad gzip: %d %q", a.code, a.body)
	}
	if a := call(t, s, "POST", "/scored_data_list", `[`+groupJSON("[[1,2],[3,4]]")+`, {"tokens": [[1.5]]}]`); a.code != 422 {
		t.Errorf("a list with one bad item: HTTP %d, want 422", a.code)
	}
	if n := len(s.Taken()); n != 1 {
		t.Errorf("%d groups taken, want only the gzipped one: a refused list took some", n)
	}
}

// TestBufferingAndBatches pins the queue: a group shorter than the
// environment's group size is buffered until buffered groups add up to
// it; /batch is null until exactly batch_size sequences are queued, and
// each batch taken advances the step.
func TestBufferingAndBatches(t *testing.T) {
	s, tr := started(t)
	if m := mustJSON200(t, call(t, s, "POST", "/scored_data", groupJSON("[[1,2]]"))); m["status"] != "buffered" || m["buffer_size"] != json.Number("1") {
		t.Fatalf("short group: %v", m)
	}
	if b, _ := tr.Batch(); b != nil {
		t.Fatal("a batch from a buffered group")
	}
	if m := mustJSON200(t, call(t, s, "POST", "/scored_data", groupJSON("[[3,4]]"))); m["status"] != "buffered" || m["buffer_size"] != json.Number("0") {
		t.Fatalf("second short group: %v", m)
	}
	if b, _ := tr.Batch(); b != nil {
		t.Fatal("a batch of 2 sequences with batch_size 4")
	}
	m := mustJSON200(t, call(t, s, "POST", "/scored_data_list", "["+groupJSON("[[5,6],[7,8]]")+","+groupJSON("[[9,1],[2,3]]")+"]"))
	if m["status"] != "received" || m["groups_processed"] != json.Number("2") {
		t.Fatalf("list: %v", m)
	}
	// The two buffered singles were queued together once they filled a
	// group; a batch of 4 is them and the first pair.
	b, err := tr.Batch()
	if err != nil || len(b) != 3 || string(b[2]["tokens"]) != "[[5,6],[7,8]]" {
		t.Fatalf("batch: %d items %v", len(b), err)
	}
	for _, k := range []string{"tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params",
		"inference_logprobs", "overrides", "group_overrides", "images", "env_id", "distill_token_ids", "distill_logprobs"} {
		if _, ok := b[0][k]; !ok {
			t.Errorf("batch item lacks %q", k)
		}
	}
	if s.Step() != 1 || s.QueuedSequences() != 2 {
		t.Errorf("step %d, %d sequences queued; want 1 and 2", s.Step(), s.QueuedSequences())
	}
}

// TestResetData pins /reset_data: plain text, and /batch answers 500
// until the trainer registers again.
func TestResetData(t *testing.T) {
	s, tr := started(t)
	if a := call(t, s, "GET", "/reset_data", ""); a.code != 200 || a.body != "Reset successful" {
		t.Fatalf("reset: %d %q", a.code, a.body)
	}
	if _, err := tr.Batch(); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("batch after reset: %v, want HTTP 500", err)
	}
	if m := mustJSON200(t, call(t, s, "GET", "/info", "")); m["batch_size"] != json.Number("-1") {
		t.Errorf("info after reset: %v", m)
	}
	tr.Register(TrainerConfig{BatchSize: 2, MaxTokenLen: 8, NumSteps: 3})
	if b, err := tr.Batch(); err != nil || b != nil {
		t.Errorf("batch after registering again: %v %v", b, err)
	}
}

// TestMinBatchAllocation pins the status arithmetic with two
// environments, one holding a minimum share: the other's queue counts
// only what is packed beyond that minimum.
func TestMinBatchAllocation(t *testing.T) {
	s, tr := started(t)
	_ = tr
	mustJSON200(t, call(t, s, "POST", "/register-env", `{"max_token_length": 64, "desired_name": "other", "weight": 3.0, "min_batch_allocation": 0.5, "group_size": 2}`))
	for i := 0; i < 3; i++ {
		mustJSON200(t, call(t, s, "POST", "/scored_data", strings.Replace(groupJSON("[[1,2],[3,4]]"), `"env_id": 0`, `"env_id": 1`, 1)))
	}
	m := mustJSON200(t, call(t, s, "GET", "/status-env", `{"env_id": 0}`))
	// other: 6 sequences packed in 2s = 6, minus its minimum int(4*0.5)=2:
	// 4 available = 2 groups of 2; env 0's weight 64*1/(64*1+64*3).
	if m["queue_size"] != json.Number("2") || m["self_queue_size"] != json.Number("0") || m["unallocated_fraction"] != json.Number("0.5") || m["env_weight"] != json.Number("0.25") {
		t.Fatalf("status: %v", m)
	}
}

func TestFaults(t *testing.T) {
	s, _ := started(t)
	s.Inject(Fault{Path: "/info", Status: 503})
	if a := call(t, s, "GET", "/info", ""); a.code != 503 || a.body != "Internal Server Error" {
		t.Errorf("fault: %d %s", a.code, a.body)
	}
	if a := call(t, s, "GET", "/info", ""); a.code != 200 {
		t.Errorf("the fault outlived its one time: %d", a.code)
	}
	s.Inject(Fault{Path: "/scored_data", Lost: true})
	req, _ := http.NewRequest("POST", s.URL()+"/scored_data", strings.NewReader(groupJSON("[[1,2],[3,4]]")))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Error("a lost answer arrived")
	}
	if n := len(s.Taken()); n != 1 {
		t.Errorf("%d groups taken, want the one whose answer was lost", n)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if m := mustJSON200(t, call(t, s, "GET", "/info", "")); m["batch_size"] != json.Number("-1") {
		t.Errorf("after a restart the trainer is still there: %v", m)
	}
}

// TestStrandedByMinimum pins what strands a trainer, answer by answer as
// Atropos' server gave them (atroposlib at 296a0bc5, run unchanged, the
// same calls): an environment with a min_batch_allocation that has
// nothing queued stops every batch (server.py get_batch lines 371-379,
// utils.py lines 207-210) until it is disconnected; /disconnect-env of
// an unknown env_id answers a failure with HTTP 200 (server.py 325-331);
// /status-env answers for a disconnected environment, and 500 for an
// unknown env_id (IndexError, line 480) or when none is connected
// (ZeroDivisionError, line 484).
func TestStrandedByMinimum(t *testing.T) {
	s := New(t)
	tr := s.Trainer()
	if _, err := tr.Register(TrainerConfig{BatchSize: 4, MaxTokenLen: 64, NumSteps: 100, SaveEvery: 10, CheckpointDir: "c"}); err != nil {
		t.Fatal(err)
	}
	const reg = `{"max_token_length": 64, "desired_name": "rl", "weight": 1, "group_size": 2, "min_batch_allocation": 0.5}`
	if m := mustJSON200(t, call(t, s, "POST", "/register-env", reg)); m["status"] != "wait for trainer to start" || len(m) != 1 {
		t.Fatalf("before the first batch: %v", m)
	}
	tr.Batch()
	for i, name := range []string{"rl_0", "rl_1"} {
		if m := mustJSON200(t, call(t, s, "POST", "/register-env", reg)); m["env_id"] != json.Number(fmt.Sprint(i)) || m["wandb_name"] != name {
			t.Fatalf("registration %d: %v", i, m)
		}
	}
	if a := call(t, s, "GET", "/status-env", `{"env_id": 5}`); a.code != 500 || a.body != "Internal Server Error" {
		t.Errorf("unknown env_id: %d %q", a.code, a.body)
	}
	for range 2 {
		if m := mustJSON200(t, call(t, s, "POST", "/scored_data", strings.Replace(groupJSON("[[1,2],[3,4]]"), `"env_id": 0`, `"env_id": 1`, 1))); m["status"] != "received" {
			t.Fatalf("scored_data: %v", m)
		}
	}
	if b, err := tr.Batch(); err != nil || b != nil {
		t.Fatalf("a batch while env 0, with a minimum, has nothing queued: %v %v", b, err)
	}
	number := func(m map[string]any, k string) float64 { f, _ := m[k].(json.Number).Float64(); return f }
	m := mustJSON200(t, call(t, s, "GET", "/status-env", `{"env_id": 1}`))
	if number(m, "queue_size") != 2 || number(m, "self_queue_size") != 2 || number(m, "unallocated_fraction") != 0 || number(m, "env_weight") != 0.5 || number(m, "current_step") != 0 {
		t.Errorf("status of env 1: %v", m)
	}
	if m := mustJSON200(t, call(t, s, "POST", "/disconnect-env", `{"env_id": 0}`)); m["status"] != "success" {
		t.Fatalf("disconnect: %v", m)
	}
	if b, err := tr.Batch(); err != nil || len(b) != 2 {
		t.Fatalf("after the disconnect: %v %v, want a batch of env 1's two groups", b, err)
	}
	if m := mustJSON200(t, call(t, s, "POST", "/disconnect-env", `{"env_id": 9}`)); m["status"] != "failure" || m["error"] != "list index out of range" {
		t.Errorf("disconnect of an unknown env_id: %v", m)
	}
	m = mustJSON200(t, call(t, s, "GET", "/status-env", `{"env_id": 0}`))
	if number(m, "current_step") != 1 || number(m, "unallocated_fraction") != 0.5 || number(m, "env_weight") != 1 {
		t.Errorf("status of disconnected env 0: %v", m)
	}
	mustJSON200(t, call(t, s, "POST", "/disconnect-env", `{"env_id": 1}`))
	for _, id := range []string{"1", "-1"} {
		if a := call(t, s, "GET", "/status-env", `{"env_id": `+id+`}`); a.code != 500 {
			t.Errorf("status of env %s with none connected: %d %q, want 500", id, a.code, a.body)
		}
	}
}
