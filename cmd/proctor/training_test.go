package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir/export"
	"github.com/proctor-dev/proctor/host/rundir/rundirtest"
)

// TestExportAtroposSplitsMessagesOnly: `export --format atropos` writes
// only groups with exact tokens to its output; groups without them go to
// -o's .messages.jsonl sibling (or --messages), and standard output never
// mixes them in: stderr says how many were left out and how to get them.
func TestExportAtroposSplitsMessagesOnly(t *testing.T) {
	dir := t.TempDir()
	rundirtest.Write(t, dir,
		rundirtest.Rollout{Task: "a", Attempt: 0, Reward: 1, IDs: true}, rundirtest.Rollout{Task: "a", Attempt: 1, Reward: 0, IDs: true},
		rundirtest.Rollout{Task: "b", Attempt: 0, Reward: 1}, rundirtest.Rollout{Task: "b", Attempt: 1, Reward: 0, IDs: true})
	valid := func(path string) {
		t.Helper()
		for _, l := range lines(t, path) {
			var g export.ScoredDataGroup
			if err := json.Unmarshal([]byte(l), &g); err != nil || len(g.Tokens) != 2 || len(g.Masks) != 2 || g.Messages[0][0].Content != "solve a" {
				t.Fatalf("%s: not the valid group of task a: %v %s", path, err, l)
			}
		}
	}
	messagesOnly := func(path string) {
		t.Helper()
		l := lines(t, path)
		if len(l) != 1 || strings.Contains(l[0], `"tokens"`) || strings.Contains(l[0], `"masks"`) || !strings.Contains(l[0], `"content":"solve b"`) {
			t.Fatalf("%s: want the messages-only group of task b, got %q", path, l)
		}
	}

	out := filepath.Join(t.TempDir(), "groups.jsonl")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"export", dir, "--format", "atropos", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	valid(out)
	messagesOnly(filepath.Join(filepath.Dir(out), "groups.messages.jsonl"))
	for _, f := range []string{out, filepath.Join(filepath.Dir(out), "groups.messages.jsonl")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644 as process writes", f, fi.Mode().Perm(), err)
		}
	}
	if !strings.Contains(stderr.String(), "1 of 2 groups written to "+out) || !strings.Contains(stderr.String(), "1 group without exact token ids written with messages only to "+filepath.Join(filepath.Dir(out), "groups.messages.jsonl")) {
		t.Errorf("stderr:\n%s", stderr.String())
	}

	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"export", dir, "--format", "atropos"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if l := strings.Split(strings.TrimSpace(stdout.String()), "\n"); len(l) != 1 || !strings.Contains(l[0], `"tokens":[[`) || !strings.Contains(l[0], "solve a") {
		t.Fatalf("standard output mixes in groups without tokens:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "1 group without exact token ids left out of standard output") || !strings.Contains(stderr.String(), "hint: --messages FILE writes them") {
		t.Errorf("stderr:\n%s", stderr.String())
	}

	msgs := filepath.Join(t.TempDir(), "rest.jsonl")
	stdout.Reset()
	if code := run([]string{"export", dir, "--format", "atropos", "--messages", msgs}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	messagesOnly(msgs)
}
