package atropos

import (
	"errors"
	"testing"
)

// FuzzAnswers feeds the answer parsers whatever an API (or something
// posing as one) might send: they return a value or an *Error naming the
// endpoint, never panic, and never return a negative count or env_id.
func FuzzAnswers(f *testing.F) {
	for _, s := range []string{
		`{"status": "wait for trainer to start"}`,
		`{"status": "success", "env_id": 0, "wandb_name": "toy_0", "checkpoint_dir": "", "starting_step": 0, "checkpoint_interval": 10, "num_steps": 100}`,
		`{"status": "success", "env_id": -1, "wandb_name": "x", "starting_step": 0, "checkpoint_interval": 1, "num_steps": 1}`,
		`{"batch_size": 4, "max_token_len": 64}`,
		`{"batch_size": -1, "max_token_len": -1}`,
		`{"current_step": 0, "queue_size": 1, "unallocated_fraction": 1.0, "self_queue_size": 1, "max_group_size": 2, "env_weight": 1.0}`,
		`{"current_step": 0, "queue_size": 0, "unallocated_fraction": 1.0, "num_self_sequences_in_queue": 0, "env_weight": 0.5}`,
		`{"status": "received", "groups_processed": 2}`,
		`{"status": "buffered", "buffer_size": 1}`,
		`{"status": "success"}`, `{"status": "failure", "error": "list index out of range"}`,
		`{"current_step": 1e400}`, `[]`, `null`, `"x"`, ``, `{"status": 5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(err error) {
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Fatalf("%T %v: not an *Error", err, err)
			}
		}
		env, _, ok, err := parseRegisterEnv(b)
		check(err)
		if ok && env.ID < 0 {
			t.Fatalf("env_id %d taken", env.ID)
		}
		_, err = parseInfo(b)
		check(err)
		st, err := parseStatus(b)
		check(err)
		if err == nil && (st.QueueSize < 0 || st.SelfQueueSize < 0 || st.CurrentStep < 0) {
			t.Fatalf("negative status taken: %+v", st)
		}
		known, msg, err := parseDisconnect(b)
		check(err)
		if known && msg != "" {
			t.Fatalf("known with an error %q", msg)
		}
		if ack := parseAck(b); ack.Status == "" {
			t.Fatal("an ack without a status")
		}
	})
}
