package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// maxAttackRSS is the most memory proctor may hold in an attack on its
// reads (docs/security.md quotes the measured figures).
const maxAttackRSS = 300 << 20

// peakRSS runs the real binary with args in dir and returns its peak
// resident set size and what it printed. It starts the binary from a fresh
// copy of this test binary (rssOf): Linux starts an exec'd child's peak at
// the high water mark of the process it was forked from (Go forks with
// CLONE_VM, so that is this test process, which earlier tests of the
// package may have grown past any attack's figure), and a fresh process's
// mark is small.
func peakRSS(t *testing.T, dir string, args ...string) (int64, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "maxrss")
	cmd := exec.Command(os.Args[0], append([]string{buildProctor(t)}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), rssOfEnv+"="+file)
	out, _ := cmd.CombinedOutput()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("peak RSS of proctor %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var kib int64
	if _, err := fmt.Sscan(string(b), &kib); err != nil {
		t.Fatalf("peak RSS file %q: %v", b, err)
	}
	return kib << 10, string(out) // Maxrss is in KiB on Linux
}

// rssOfEnv names the file where this test binary, started by peakRSS,
// writes the peak RSS (KiB) of the command its arguments name.
const rssOfEnv = "PROCTOR_TEST_RSS_OF"

// rssOf runs args as a command, its output on this process's stdout, and
// writes its peak RSS to file; it returns the command's exit code.
func rssOf(file string, args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "rss:", err)
		return 2
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "rss: no rusage on this system")
		return 2
	}
	if werr := os.WriteFile(file, []byte(fmt.Sprint(ru.Maxrss)), 0o644); werr != nil {
		fmt.Fprintln(os.Stderr, "rss:", werr)
		return 2
	}
	return cmd.ProcessState.ExitCode()
}

// pluginMiB is the memory the hostile attacks give the plugin's instance
// ([env] memory_mb, its default): the instance's own linear memory, in
// which it builds what it sends, is the plugin's, bounded by that key.
const pluginMiB = 256

// checkRSS logs the peak RSS of an attack and fails it over maxAttackRSS
// plus extra, what the attack's plugin may hold of its own.
func checkRSS(t *testing.T, rss, extra int64) {
	t.Helper()
	t.Logf("peak RSS %d MiB", rss>>20)
	if rss > maxAttackRSS+extra {
		t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, (maxAttackRSS+extra)>>20)
	}
}

// TestAttackPeakRSS runs proctor against attacks on its reads: a model
// endpoint that answers with 1 GiB, a Terminal-Bench dataset row whose
// environment holds a 1 GiB sparse file (1.4 MB gzipped), and a plugin or
// a dataset that fills each buffer the host keeps (hostileAttacks). Each
// is refused or cut, and proctor's peak memory stays under maxAttackRSS:
// they took 5.9 GB, 5.5 GB, and up to 9.9 GB once.
func TestAttackPeakRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	t.Run("huge model answer", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`)
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			fmt.Fprint(w, `"}}]}`)
		}))
		defer srv.Close()
		rss, out, _ := modelAttack(t, srv.URL)
		if !strings.Contains(out, "model response too large") {
			t.Fatalf("the answer was not refused:\n%s", out)
		}
		checkRSS(t, rss, 0)
	})
	t.Run("model answers that add up", func(t *testing.T) {
		// 8 MiB answers, each with a tool call so the loop goes on: 60
		// turns of them were 480 MB held and sent again every turn.
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"`)
			for range 8 {
				w.Write(chunk)
			}
			fmt.Fprint(w, `","tool_calls":[{"id":"c","type":"function","function":{"name":"terminal","arguments":"{\"command\":\"true\"}"}}]}}]}`)
		}))
		defer srv.Close()
		rss, out, dir := modelAttack(t, srv.URL)
		if b, _ := os.ReadFile(filepath.Join(dir, "out", "results.jsonl")); !strings.Contains(string(b), `"stop_reason":"transcript_limit"`) {
			t.Fatalf("the loop was not stopped:\n%s\n%s", lastLines(out, 20), b)
		}
		checkRSS(t, rss, 0)
	})
	hostileAttacks(t)
	t.Run("sparse file in a dataset row", func(t *testing.T) {
		sandboxtest.RequireDocker(t)
		dir := t.TempDir()
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "huge.bin", Mode: 0o644, Size: 1 << 30, Typeflag: tar.TypeReg})
		zeros := make([]byte, 1<<20)
		for range 1024 {
			tw.Write(zeros)
		}
		tw.Close()
		zw.Close()
		row, _ := json.Marshal(map[string]any{"task_name": "sparse", "instruction": "x", "test_sh": "true",
			"environment_tar": base64.StdEncoding.EncodeToString(buf.Bytes()), "agent_timeout_sec": 60, "test_timeout_sec": 60})
		os.WriteFile(filepath.Join(dir, "rows.jsonl"), append(row, '\n'), 0o644)
		os.WriteFile(filepath.Join(dir, "run.toml"), []byte(fmt.Sprintf(`
[agent]
kind = "oracle"
[env]
plugin = %q
[env.config]
dataset = "rows.jsonl"
`, wasmtest.Build(t, "./plugins/tb2"))), 0o644)
		rss, out := peakRSS(t, dir, "eval", "run.toml", "--out", "out")
		if !strings.Contains(out, "environment_tar: archive holds over 64 MiB once decompressed") {
			t.Fatalf("the row was not refused:\n%s", out)
		}
		checkRSS(t, rss, 0)
	})
}

// modelAttack runs an llm agent of 60 turns at most against the endpoint
// at url, on the local backend, and returns its peak RSS, what it printed
// and its folder (the run is out/ in it).
func modelAttack(t *testing.T, url string) (int64, string, string) {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "run.toml"), []byte(fmt.Sprintf(`
[model]
base_url = %q
name = "m"
[agent]
kind = "llm"
max_turns = 60
[sandbox]
backend = "local"
[env]
plugin = %q
[env.config]
image = "none"
tasks = [{ id = "t", text = "x" }]
`, url+"/v1", wasmtest.Build(t, "./plugins/example"))), 0o644)
	rss, out := peakRSS(t, dir, "eval", "run.toml", "--out", "out")
	return rss, out, dir
}

// hostileAttacks are TestAttackPeakRSS's attacks by a plugin and a
// dataset on the host's buffers (docs/security.md, "Reads the host
// bounds"), on the local backend: each runs the real binary and checks
// what it printed or recorded, and its peak memory.
func hostileAttacks(t *testing.T) {
	hostile := wasmtest.Build(t, "./cmd/proctor/testdata/plugins/hostile")
	for _, a := range []struct {
		name, config, want string
		args               []string
	}{
		// Two 1 GiB outputs asked for whole took 9.9 GB.
		{"exec output", `exec = "head -c 1073741824 /dev/zero; head -c 1073741824 /dev/zero >&2"` + "\nexec_max = 1073741824",
			`exec: stdout [0-9]+ bytes, stderr [0-9]+ bytes, truncated true`, nil},
		// A 50 MB prompt took 568 MiB, and wrote a 52 MB transcript.
		{"prompt", "prompt_mb = 50", `the answer is 52428811 bytes, over the 12648448 a prompt.format answer may be`, nil},
		// 200,000 named scores wrote 13.8 MB a record.
		{"named scores", "score_count = 200000", `200000 named scores, over the 256 a verdict may hold`, nil},
		{"tests", "test_count = 200000", `200000 tests, over the 100000 a verdict may list`, nil},
		// 50,000,000 attempts took 3.3 GB before any rollout.
		{"attempts", "", `run.attempts: 50000000 is over 10000`, []string{"--set", "run.attempts=50000000"}},
		{"task list", "task_count = 100001", `over 100000 tasks, the most a run takes`, nil},
		{"plugin log", "log_lines = 100000", `plugin log over its budget`, nil},
	} {
		t.Run(a.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "run.toml"), []byte(fmt.Sprintf(`
[agent]
kind = "nop"
[sandbox]
backend = "local"
[env]
plugin = %q
hook_timeout = "30m"
memory_mb = %d
[env.config]
reward = 1
%s
`, hostile, pluginMiB, a.config)), 0o644)
			rss, out := peakRSS(t, dir, append([]string{"eval", "run.toml", "--out", "out"}, a.args...)...)
			b, _ := os.ReadFile(filepath.Join(dir, "out", "results.jsonl"))
			if !regexp.MustCompile(a.want).MatchString(out + string(b)) {
				t.Fatalf("no %q in what proctor printed or recorded:\n%s", a.want, lastLines(out, 20))
			}
			checkRSS(t, rss, pluginMiB<<20)
		})
	}
	t.Run("dataset rows", func(t *testing.T) {
		// A tb2 JSONL whose rows are 200 MB, 300 MB, not JSON, and
		// 2,000,000 tiny ones: each bad row is its own broken task, the
		// good one is listed.
		dir := t.TempDir()
		f, err := os.Create(filepath.Join(dir, "rows.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		good, _ := json.Marshal(map[string]any{"task_name": "good", "instruction": "x", "test_sh": "true", "docker_image": "proctor-base:bookworm"})
		f.Write(append(good, '\n'))
		x := bytes.Repeat([]byte("x"), 1<<20)
		for _, n := range []int{200, 300} {
			f.WriteString(`{"task_name":"huge","instruction":"`)
			for range n {
				f.Write(x)
			}
			f.WriteString("\"}\n")
		}
		f.WriteString("{\"task_name\": \"cut\n")
		tiny := bytes.Repeat([]byte("{}\n"), 1000)
		for range 2000 {
			f.Write(tiny)
		}
		f.Close()
		os.WriteFile(filepath.Join(dir, "run.toml"), []byte(fmt.Sprintf(`
[agent]
kind = "nop"
[env]
plugin = %q
hook_timeout = "30m"
[env.config]
dataset = "rows.jsonl"
`, wasmtest.Build(t, "./plugins/tb2"))), 0o644)
		rss, out := peakRSS(t, dir, "tasks", "run.toml")
		for _, want := range []string{"(?m)^good\t", "(?m)^row 1\t.*broken: dataset rows.jsonl: line 2 is over 32 MiB",
			"(?m)^row 2\t.*line 3 is over 32 MiB", "(?m)^row 3\t.*line 4 is not a JSON object"} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Fatalf("no %q in:\n%s", want, lastLines(out, 20))
			}
		}
		checkRSS(t, rss, 0)
	})
}
