package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/rundirtest"
)

// finishedRun writes a finished run directory of two rollouts.
func finishedRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rundirtest.Write(t, dir, rundirtest.Rollout{Task: "hello", Reward: 1}, rundirtest.Rollout{Task: "hello", Attempt: 1, Reward: 1})
	now := time.Now().UTC()
	m := rundir.Manifest{RunID: "r-1", Name: "view-test", StartedAt: now, FinishedAt: &now}
	if err := rundir.WriteJSONAtomic(filepath.Join(dir, rundir.ManifestFile), m); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestViewRefusesNonLoopbackAddresses(t *testing.T) {
	dir := finishedRun(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:80", "example.com:80"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"view", dir, "--addr", addr}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "--allow-remote") {
			t.Errorf("view --addr %s: exit %d, stderr %q", addr, code, stderr.String())
		}
	}
}

func TestReportHTML(t *testing.T) {
	dir := finishedRun(t)
	out := filepath.Join(t.TempDir(), "r.html")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"report", dir, "--format", "html", "--out", out}, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
		t.Fatalf("report --out: exit %d, stdout %d bytes, stderr %s", code, stdout.Len(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) || !bytes.Contains(b, []byte(`id="n-rollouts">2<`)) {
		t.Fatalf("report.html: %v\n%.200s", err, b)
	}
	if code := run([]string{"report", dir, "--format", "html"}, &stdout, &stderr); code != 0 || !bytes.Equal(stdout.Bytes(), b) {
		t.Fatalf("report to stdout: exit %d, differs from --out", code)
	}
	stdout.Reset()
	if code := run([]string{"report", dir, "--format", "text"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "rollouts   2") {
		t.Fatalf("text report: exit %d\n%s", code, stdout.String())
	}
}
