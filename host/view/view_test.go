package view

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/report"
)

// newRunDir writes a run directory with n rollouts, finished or not.
func newRunDir(t *testing.T, n int, finished bool) string {
	t.Helper()
	dir := t.TempDir()
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for i := range n {
		addRollout(t, store, i)
	}
	writeManifest(t, dir, finished)
	return dir
}

func addRollout(t *testing.T, store *rundir.Store, attempt int) {
	t.Helper()
	if err := store.Append(rundir.Record{RolloutID: "hello#" + string(rune('0'+attempt)), TaskID: "hello", Attempt: attempt,
		Outcome: rundir.OutcomePassed, Reward: 1, Phases: map[string]float64{"agent": 1}}); err != nil {
		t.Fatal(err)
	}
}

func writeManifest(t *testing.T, dir string, finished bool) {
	t.Helper()
	m := rundir.Manifest{RunID: "r-1", Name: "view-test", StartedAt: time.Now().UTC()}
	if finished {
		now := time.Now().UTC()
		m.FinishedAt = &now
	}
	if err := rundir.WriteJSONAtomic(filepath.Join(dir, rundir.ManifestFile), m); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func status(t *testing.T, url string) report.Status {
	t.Helper()
	code, body := get(t, url+"/status")
	var st report.Status
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("GET /status: %d %s", code, body)
	}
	return st
}

func TestViewFollowsARunInProgress(t *testing.T) {
	dir := newRunDir(t, 1, false)
	srv := httptest.NewServer(Handler(dir, false))
	defer srv.Close()

	code, page := get(t, srv.URL+"/")
	if code != 200 || !strings.Contains(page, `data-live="1"`) || !strings.Contains(page, `id="n-rollouts">1<`) {
		t.Fatalf("GET / of a run in progress: %d, live or count missing", code)
	}
	if st := status(t, srv.URL); st != (report.Status{Rollouts: 1}) {
		t.Fatalf("status %+v", st)
	}

	// The run goes on: the next request sees the new rollout.
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	addRollout(t, store, 1)
	store.Close()
	if st := status(t, srv.URL); st.Rollouts != 2 {
		t.Fatalf("status after a rollout: %+v", st)
	}
	if _, page := get(t, srv.URL+"/"); !strings.Contains(page, `id="n-rollouts">2<`) {
		t.Error("the page was not written anew")
	}

	// The run ends: the page stops reloading.
	writeManifest(t, dir, true)
	if _, page := get(t, srv.URL+"/"); strings.Contains(page, "data-live") {
		t.Error("the page of a finished run still reloads")
	}
	if st := status(t, srv.URL); !st.Finished {
		t.Errorf("status of a finished run: %+v", st)
	}
	if code, _ := get(t, srv.URL+"/secret"); code != http.StatusNotFound {
		t.Errorf("GET /secret: %d", code)
	}
}

func TestViewAnswersOnlyLoopbackNames(t *testing.T) {
	srv := httptest.NewServer(Handler(newRunDir(t, 1, true), false))
	defer srv.Close()
	for host, want := range map[string]int{
		// A DNS name rebound to 127.0.0.1, with or without a port.
		"attacker.example:80": http.StatusForbidden, "attacker.example": http.StatusForbidden, "localhost.attacker.example": http.StatusForbidden,
		// Loopback names, with or without a port (a browser sends none for port 80).
		"127.0.0.1:8080": http.StatusOK, "127.0.0.1": http.StatusOK, "localhost": http.StatusOK, "LocalHost:80": http.StatusOK,
		"[::1]:8080": http.StatusOK, "[::1]": http.StatusOK, "127.0.0.2": http.StatusOK,
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request for Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

func TestListenRefusesNonLoopbackAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:80", "example.com:80"} {
		ln, err := Listen(addr, false)
		if err == nil {
			ln.Close()
		}
		if !fault.IsUsage(err) || !strings.Contains(fault.Hint(err), "--allow-remote") {
			t.Errorf("listen on %s: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		ln, err := Listen(addr, false)
		if err != nil {
			if strings.Contains(addr, "::1") { // a machine without IPv6
				continue
			}
			t.Errorf("listen on %s: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

func TestViewServesUntilCancelled(t *testing.T) {
	dir := newRunDir(t, 2, true)
	ln, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Serve(ctx, ln, Handler(dir, false)) }()
	code, page := get(t, "http://"+ln.Addr().String()+"/")
	if code != 200 || !strings.HasPrefix(page, "<!DOCTYPE html>") {
		t.Fatalf("GET /: %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve after cancel: %v", err)
	}
}

// TestViewServesVerifierLogs: the verifier logs report.html links are
// served as plain text from the run's verifier/ folder, and nothing
// outside it (issue 32: the page named the whole log but gave no way to
// open it).
func TestViewServesVerifierLogs(t *testing.T) {
	dir := newRunDir(t, 1, true)
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := rundir.VerifierLogName("a/b#0", 0) // a name with an escaped slash
	if err := store.WriteVerifierLog(name, "the whole log\n"); err != nil {
		t.Fatal(err)
	}
	store.Close()
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("not a log"), 0o644)
	srv := httptest.NewServer(Handler(dir, false))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/verifier/"+strings.ReplaceAll(name, "%", "%25")); code != 200 || body != "the whole log\n" {
		t.Errorf("GET the log: %d %q", code, body)
	}
	for _, p := range []string{"/verifier/..%2Fsecret.txt", "/verifier/nope.txt", "/verifier/%2E%2E/secret.txt"} {
		if code, body := get(t, srv.URL+p); code == 200 || strings.Contains(body, "not a log") {
			t.Errorf("GET %s: %d %q", p, code, body)
		}
	}
}
