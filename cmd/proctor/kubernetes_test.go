package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// kubernetesRun writes a replay run on the kubernetes backend (the
// cluster KUBECONFIG names) and returns a function that lists the pods of
// a run.
func kubernetesRun(t *testing.T, dir string, tasks int, command, runKeys string) func(runID string) int {
	t.Helper()
	if !kubernetesAvailable() {
		sandboxtest.RequireKubernetes(t, errors.New("no cluster answers at the KUBECONFIG given"))
	}
	path := replayRun(t, dir, tasks, command, runKeys, "[sandbox]\nbackend = \"kubernetes\"\n[sandbox.kubernetes]\nrequest_fraction = 0.01")
	c, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := assemble.Kubernetes(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return func(runID string) int {
		names, err := b.List(context.Background(), runID)
		if err != nil {
			t.Fatal(err)
		}
		return len(names)
	}
}

// TestKubernetesKillAndResume kills proctor with SIGKILL mid-run on the
// kubernetes backend: the resume records every rollout once and deletes
// the pods the killed run left.
func TestKubernetesKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	dir := t.TempDir()
	pods := kubernetesRun(t, dir, 4, "sleep 3; printf x > answer.txt", "name = \"kill-k8s\"\nconcurrency = 2")
	bin := buildProctor(t)
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "eval", filepath.Join(dir, "run.toml"), "--out", out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a rollout recorded", func() bool { return countLines(filepath.Join(out, "results.jsonl")) >= 1 || ended(cmd) })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	before := countLines(filepath.Join(out, "results.jsonl"))
	if before == 0 || before >= 4 {
		t.Fatalf("killed with %d of 4 rollouts recorded; want some but not all", before)
	}
	runID := runIDOf(out)
	if n := pods(runID); n == 0 {
		t.Log("no pods in flight at the kill")
	}

	resumeOnce(t, bin, dir, out, 4)
	if n := pods(runID); n != 0 {
		t.Errorf("%d pods of the run left after the resume", n)
	}
}
