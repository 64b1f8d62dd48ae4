package atropostest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Trainer is a trainer's side of the API, over HTTP as Atropos' trainers
// speak it (example_trainer: POST /register, then GET /batch in a loop).
type Trainer struct {
	url  string
	http *http.Client
}

// TrainerConfig is what a trainer registers with (server.py
// Registration).
type TrainerConfig struct {
	BatchSize     int
	MaxTokenLen   int
	NumSteps      int
	StartingStep  int
	CheckpointDir string
	SaveEvery     int
}

// Trainer returns a trainer of the API.
func (s *Server) Trainer() *Trainer {
	// Its own connections, as a trainer's process has: none left open
	// to an API that restarted since.
	return &Trainer{url: s.URL(), http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}
}

// Register registers the trainer (POST /register) and returns its uuid,
// a number larger than an int64.
func (t *Trainer) Register(c TrainerConfig) (json.Number, error) {
	body := map[string]any{"wandb_group": "test", "wandb_project": "proctor", "batch_size": c.BatchSize,
		"max_token_len": c.MaxTokenLen, "checkpoint_dir": c.CheckpointDir, "save_checkpoint_interval": c.SaveEvery,
		"starting_step": c.StartingStep, "num_steps": c.NumSteps}
	var out struct {
		UUID json.Number `json:"uuid"`
	}
	if err := t.call("POST", "/register", body, &out); err != nil {
		return "", err
	}
	return out.UUID, nil
}

// Batch takes one batch (GET /batch): nil while the queue cannot fill
// one. The first call marks the trainer started. The API's answer to a
// trainer it does not know (after a restart) is an error.
func (t *Trainer) Batch() ([]map[string]json.RawMessage, error) {
	var out struct {
		Status  string                       `json:"status"`
		Message string                       `json:"message"`
		Batch   []map[string]json.RawMessage `json:"batch"`
	}
	if err := t.call("GET", "/batch", nil, &out); err != nil {
		return nil, err
	}
	if out.Status == "error" {
		return nil, fmt.Errorf("GET /batch: %s", out.Message)
	}
	return out.Batch, nil
}

// Consume takes a batch every interval until ctx ends, calling got with
// each one taken; errors (a restarting API) are skipped.
func (t *Trainer) Consume(ctx context.Context, every time.Duration, got func([]map[string]json.RawMessage)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if b, err := t.Batch(); err == nil && b != nil && got != nil {
			got(b)
		}
	}
}

func (t *Trainer) call(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, t.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(out)
}
