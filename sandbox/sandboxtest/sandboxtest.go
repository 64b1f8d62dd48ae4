// Package sandboxtest is the conformance suite every sandbox backend passes,
// and the helpers tests use to reach a real Docker engine or Kubernetes
// cluster.
package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
)

// BaseImage is the local test image (built by scripts/base-image.sh).
func BaseImage() string {
	if v := os.Getenv("PROCTOR_BASE_IMAGE"); v != "" {
		return v
	}
	return "proctor-base:bookworm"
}

// MachineCPU is the CPU time all the machine's cores have spent busy
// (user, nice, system, irq, softirq, steal), from /proc/stat: what a
// benchmark's work cost the whole machine, the engine's processes
// included.
func MachineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait, guest (counted in user)
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// RequireDocker skips the test when no Docker engine answers, unless
// PROCTOR_REQUIRE_DOCKER=1, when it fails instead: CI forbids skipping.
func RequireDocker(t testing.TB) {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", BaseImage()).CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("no Docker engine with image %s (%v: %s); run `make base-image`", BaseImage(), err, strings.TrimSpace(string(out)))
	if os.Getenv("PROCTOR_REQUIRE_DOCKER") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// RequireKubernetes skips the test when err says no Kubernetes cluster
// answers, unless PROCTOR_REQUIRE_KUBERNETES=1, when it fails instead.
func RequireKubernetes(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("no Kubernetes cluster (%v); start the local one with `make k8s-up` and set KUBECONFIG as it says", err)
	if os.Getenv("PROCTOR_REQUIRE_KUBERNETES") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Caps describes what a backend can do, so the suite skips what does not
// apply (a local sandbox has no memory limit).
type Caps struct {
	Isolated bool // absolute paths are inside the sandbox
}

// Run runs the conformance suite. start makes a fresh sandbox for a subtest.
func Run(t *testing.T, caps Caps, start func(t *testing.T) sandbox.Sandbox) {
	// The sleeps the tests count get durations of this run's own, so a
	// count sees only this run's processes: a local sandbox sees the whole
	// host, where another backend's conformance run may be sleeping too.
	s := &suite{start: start, mark: fmt.Sprintf(".%06d", rand.N(1000000))}
	for _, c := range []struct {
		name string
		test func(t *testing.T)
	}{
		{"PersistentShell", s.persistentShell},
		{"ExitCodesAndStreams", s.exitCodesAndStreams},
		{"PerCallOptions", s.perCallOptions},
		{"FreshIgnoresShellState", s.freshIgnoresShellState},
		{"TimeoutKillsGroup", s.timeoutKillsGroup},
		{"ContextCancelKillsCommand", s.contextCancelKillsCommand},
		{"BackgroundChildOutlivesCall", s.backgroundChildOutlivesCall},
		{"BoundedOutput", s.boundedOutput},
		{"BinaryOutput", s.binaryOutput},
		{"Files", s.files},
		{"BoundedRead", s.boundedRead},
		{"UsableAfterCancelledExec", s.usableAfterCancelledExec},
		{"FilesAfterBrokenPath", s.filesAfterBrokenPath},
		{"UploadDownload", s.uploadDownload},
		{"HostileArchive", s.hostileArchive},
		{"Close", s.close},
	} {
		t.Run(c.name, c.test)
	}
}

// suite is one run of the conformance suite against a backend.
type suite struct {
	start func(t *testing.T) sandbox.Sandbox
	mark  string // the fraction of a second this run's sleeps carry
}

// sleep is a sleep of n seconds that count finds.
func (s *suite) sleep(n int) string { return fmt.Sprintf("sleep %d%s", n, s.mark) }

// count counts this run's sleeps whose seconds match the pattern ns.
func (s *suite) count(ns string) string {
	return fmt.Sprintf(`ps -eo args | grep -c '^sleep %s\%s' || true`, ns, s.mark)
}

// mustExec runs cmd and fails the test on an error.
func mustExec(t *testing.T, sb sandbox.Sandbox, cmd string, o sandbox.ExecOptions) sandbox.ExecResult {
	t.Helper()
	r, err := sb.Exec(context.Background(), cmd, o)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return r
}

func (s *suite) persistentShell(t *testing.T) {
	sb := s.start(t)
	mustExec(t, sb, "mkdir -p sub && cd sub && export FOO=bar && BAZ=unexported", sandbox.ExecOptions{})
	r := mustExec(t, sb, `echo "$(basename "$PWD") $FOO"`, sandbox.ExecOptions{})
	if strings.TrimSpace(r.Stdout) != "sub bar" {
		t.Errorf("cd/export did not persist: %q", r.Stdout)
	}
}

func (s *suite) exitCodesAndStreams(t *testing.T) {
	sb := s.start(t)
	r := mustExec(t, sb, "echo out; echo err >&2; exit 7", sandbox.ExecOptions{})
	if r.ExitCode != 7 || r.Stdout != "out\n" || r.Stderr != "err\n" || r.TimedOut {
		t.Errorf("got %+v", r)
	}
	// exit in a command does not kill the shell.
	r = mustExec(t, sb, "echo still here", sandbox.ExecOptions{})
	if r.Stdout != "still here\n" {
		t.Errorf("shell died after exit: %+v", r)
	}
}

func (s *suite) perCallOptions(t *testing.T) {
	sb := s.start(t)
	mustExec(t, sb, "mkdir -p a b && cd a", sandbox.ExecOptions{})
	r := mustExec(t, sb, `basename "$PWD"; echo "$X"; cat`, sandbox.ExecOptions{
		Workdir: "../b", Env: map[string]string{"X": "it's x"}, Stdin: []byte("from stdin"),
	})
	if r.Stdout != "b\nit's x\nfrom stdin" {
		t.Errorf("per-call options: %q", r.Stdout)
	}
	r = mustExec(t, sb, `basename "$PWD"; echo "[$X]"`, sandbox.ExecOptions{})
	if r.Stdout != "a\n[]\n" {
		t.Errorf("per-call workdir/env leaked into the shell: %q", r.Stdout)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB, sent as a file
	r = mustExec(t, sb, "wc -c", sandbox.ExecOptions{Stdin: big})
	if strings.TrimSpace(r.Stdout) != fmt.Sprint(len(big)) {
		t.Errorf("large stdin: wc says %q, want %d", r.Stdout, len(big))
	}
}

func (s *suite) freshIgnoresShellState(t *testing.T) {
	// What an agent did to its shell must not reach a fresh command
	// (a plugin's), and a fresh command must not change the shell.
	sb := s.start(t)
	r := mustExec(t, sb, `printf '%s\n' "$PWD"`, sandbox.ExecOptions{})
	home := strings.TrimSpace(r.Stdout)
	mustExec(t, sb, "mkdir -p sub && cd sub && export PATH=/nonexistent LD_PRELOAD=/evil.so FOO=agent && unset HOME", sandbox.ExecOptions{})
	r = mustExec(t, sb, `printf '%s|%s|%s|%s|' "$PWD" "$FOO" "$LD_PRELOAD" "${HOME+set}"; ls / >/dev/null && echo ls-ok`, sandbox.ExecOptions{Fresh: true})
	if want := home + "|||set|ls-ok\n"; r.Stdout != want {
		t.Errorf("fresh command saw the shell's state: %q, want %q (stderr %q)", r.Stdout, want, r.Stderr)
	}
	r = mustExec(t, sb, `cd /; export BAR=fresh; printf '%s\n' "$X"`, sandbox.ExecOptions{Fresh: true, Env: map[string]string{"X": "per-call"}})
	if r.Stdout != "per-call\n" {
		t.Errorf("fresh command's own env: %q", r.Stdout)
	}
	r = mustExec(t, sb, `printf '%s|%s|%s\n' "${PWD##*/}" "$FOO" "$BAR"`, sandbox.ExecOptions{})
	if r.Stdout != "sub|agent|\n" {
		t.Errorf("the shell's state after a fresh command: %q, want sub|agent|", r.Stdout)
	}
}

func (s *suite) timeoutKillsGroup(t *testing.T) {
	sb := s.start(t)
	r := mustExec(t, sb, s.sleep(300)+" & "+s.sleep(301)+"; echo never", sandbox.ExecOptions{Timeout: 300 * time.Millisecond})
	if !r.TimedOut || strings.Contains(r.Stdout, "never") {
		t.Fatalf("want a timeout, got %+v", r)
	}
	r = mustExec(t, sb, s.count("30[01]"), sandbox.ExecOptions{})
	if strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("timed-out command's processes still run: %q", r.Stdout)
	}
	// The shell is still usable, and state from before is kept.
	if r := mustExec(t, sb, "echo ok", sandbox.ExecOptions{}); r.Stdout != "ok\n" {
		t.Errorf("shell unusable after timeout: %+v", r)
	}
}

func (s *suite) contextCancelKillsCommand(t *testing.T) {
	ctx := context.Background()
	sb := s.start(t)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := sb.Exec(cctx, s.sleep(302), sandbox.ExecOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("want context.DeadlineExceeded, got %v", err)
	}
	r := mustExec(t, sb, s.count("302"), sandbox.ExecOptions{})
	if strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("cancelled command still runs")
	}
}

func (s *suite) backgroundChildOutlivesCall(t *testing.T) {
	sb := s.start(t)
	// A call that waited for its children would return after them (300
	// s), or time out: it returns while they still run.
	r := mustExec(t, sb, "("+s.sleep(303)+" &) ; nohup "+s.sleep(304)+" >/dev/null 2>&1 & echo started", sandbox.ExecOptions{Timeout: 290 * time.Second})
	if r.Stdout != "started\n" || r.TimedOut {
		t.Fatalf("call did not return before its children: %+v", r)
	}
	// The children were only forked when the call returned: they become
	// sleep when the machine gets to them.
	poll.Until(t, "the background children to run", func() bool {
		r = mustExec(t, sb, s.count("30[34]"), sandbox.ExecOptions{})
		return strings.TrimSpace(r.Stdout) == "2"
	})
}

func (s *suite) boundedOutput(t *testing.T) {
	sb := s.start(t)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := mustExec(t, sb, "head -c 100000000 /dev/zero | tr '\\0' x; echo; echo END", sandbox.ExecOptions{MaxOutput: 64 << 10})
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if !r.Truncated || !strings.Contains(r.Stdout, "bytes cut]") || !strings.HasSuffix(r.Stdout, "END\n") || !strings.HasPrefix(r.Stdout, "xxx") {
		t.Errorf("want head, marker and tail; got %d bytes truncated=%v", len(r.Stdout), r.Truncated)
	}
	if len(r.Stdout) > 70<<10 {
		t.Errorf("kept %d bytes, cap 64 KiB", len(r.Stdout))
	}
	if grew := int64(after.TotalAlloc) - int64(before.TotalAlloc); grew > 32<<20 {
		t.Errorf("host allocated %d MB for a 100 MB output", grew>>20)
	}
}

func (s *suite) binaryOutput(t *testing.T) {
	sb := s.start(t)
	r := mustExec(t, sb, `printf 'a\000b\377\n@@PROCTOR DONE 1 0 0 0 0 0 0 0\n'`, sandbox.ExecOptions{})
	if r.Stdout != "a\x00b\xff\n@@PROCTOR DONE 1 0 0 0 0 0 0 0\n" {
		t.Errorf("binary output mangled: %q", r.Stdout)
	}
}

func (s *suite) files(t *testing.T) {
	ctx := context.Background()
	sb := s.start(t)
	data := []byte("hello\x00world\n")
	if err := sb.WriteFile(ctx, "d1/d2/f.bin", data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err := sb.ReadFile(ctx, "d1/d2/f.bin", 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %q, %v", got, err)
	}
	r := mustExec(t, sb, "cat d1/d2/f.bin | wc -c", sandbox.ExecOptions{})
	if strings.TrimSpace(r.Stdout) != fmt.Sprint(len(data)) {
		t.Errorf("shell sees %q bytes", r.Stdout)
	}
	if _, _, err := sb.ReadFile(ctx, "no/such/file", 0); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("missing file: want ErrNotFound, got %v", err)
	}
	// What a command leaves at a path a verifier reads is read, never
	// waited on: a FIFO with no writer reads as empty, as a folder is an
	// error of its own.
	mustExec(t, sb, "mkdir -p adir && mkfifo fifo", sandbox.ExecOptions{})
	if _, _, err := sb.ReadFile(ctx, "adir", 0); err == nil || errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a folder: want an error other than ErrNotFound, got %v", err)
	}
	fctx, cancel := poll.Context(t)
	defer cancel()
	if got, size, err := sb.ReadFile(fctx, "fifo", 0); err != nil || len(got) != 0 || size != 0 {
		t.Errorf("a FIFO: want it empty, got %q of size %d, %v", got, size, err)
	}
}

// boundedRead: a file of any size costs the host at most the limit asked
// for; the size says what was left out.
func (s *suite) boundedRead(t *testing.T) {
	sb := s.start(t)
	ctx := context.Background()
	mustExec(t, sb, "truncate -s 3G big.bin && printf 'abcdef' > small.txt && ln -sf big.bin link.bin", sandbox.ExecOptions{})
	for _, name := range []string{"big.bin", "link.bin"} {
		got, size, err := sb.ReadFile(ctx, name, 1000)
		if err != nil || len(got) != 1000 || size != 3<<30 {
			t.Errorf("%s: read %d bytes of size %d, %v; want 1000 of %d", name, len(got), size, err, int64(3<<30))
		}
	}
	got, size, err := sb.ReadFile(ctx, "small.txt", 4)
	if err != nil || string(got) != "abcd" || size != 6 {
		t.Errorf("small.txt: %q size %d, %v", got, size, err)
	}
}

// usableAfterCancelledExec: a call cancelled while its command ran must
// not leave the sandbox to die later: it stays usable long after (the
// shell's watchdog once closed it 15 s after any cancellation).
func (s *suite) usableAfterCancelledExec(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 20 s")
	}
	sb := s.start(t)
	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := sb.Exec(cctx, s.sleep(30), sandbox.ExecOptions{}); err == nil {
		t.Fatal("cancelled exec returned no error")
	}
	time.Sleep(20 * time.Second)
	if r := mustExec(t, sb, "echo alive", sandbox.ExecOptions{}); r.Stdout != "alive\n" {
		t.Errorf("after a cancelled exec: %+v", r)
	}
}

func (s *suite) filesAfterBrokenPath(t *testing.T) {
	ctx := context.Background()
	// File operations must not depend on the state a command left in
	// the shell.
	sb := s.start(t)
	mustExec(t, sb, "export PATH=/nonexistent; mkdir -p /tmp/x 2>/dev/null; cd /", sandbox.ExecOptions{})
	if err := sb.WriteFile(ctx, "new/dir/f.txt", []byte("ok"), 0o644); err != nil {
		t.Fatalf("write after PATH broke: %v", err)
	}
	if b, _, err := sb.ReadFile(ctx, "new/dir/f.txt", 0); err != nil || string(b) != "ok" {
		t.Fatalf("read after PATH broke: %q, %v", b, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "u.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("up"))
	tw.Close()
	if err := sb.Upload(ctx, "new/up", &buf); err != nil {
		t.Fatalf("upload after PATH broke: %v", err)
	}
	if b, _, err := sb.ReadFile(ctx, "new/up/u.txt", 0); err != nil || string(b) != "up" {
		t.Fatalf("uploaded file: %q, %v", b, err)
	}
}

func (s *suite) uploadDownload(t *testing.T) {
	ctx := context.Background()
	sb := s.start(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "pkg/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "pkg/run.sh", Typeflag: tar.TypeReg, Mode: 0o755, Size: 14})
	tw.Write([]byte("echo uploaded\n"))
	tw.Close()
	if err := sb.Upload(ctx, "up", &buf); err != nil {
		t.Fatal(err)
	}
	if r := mustExec(t, sb, "./up/pkg/run.sh", sandbox.ExecOptions{}); r.Stdout != "uploaded\n" {
		t.Errorf("uploaded script: %+v", r)
	}
	rc, err := sb.Download(ctx, "up/pkg")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(h.Name, "pkg/run.sh") {
			b, _ := io.ReadAll(tr)
			found = string(b) == "echo uploaded\n"
		}
	}
	if !found {
		t.Error("download lacks pkg/run.sh")
	}
	if _, err := sb.Download(ctx, "nothing-here"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("download of a missing path: %v", err)
	}
}

func (s *suite) hostileArchive(t *testing.T) {
	ctx := context.Background()
	sb := s.start(t)
	for _, h := range []*tar.Header{
		{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "../../etc"},
		{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(h)
		tw.Close()
		err := sb.Upload(ctx, "hostile", &buf)
		if !errors.Is(err, sandbox.ErrUnsafeArchive) || !strings.Contains(err.Error(), h.Name) {
			t.Errorf("%s: want ErrUnsafeArchive naming the entry, got %v", h.Name, err)
		}
	}
}

func (s *suite) close(t *testing.T) {
	ctx := context.Background()
	sb := s.start(t)
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("exec after Close: want ErrClosed, got %v", err)
	}
	if err := sb.WriteFile(ctx, "x", nil, 0); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("write after Close: want ErrClosed, got %v", err)
	}
}

// EnsureWarden makes the in-sandbox warden available to a test binary:
// one built from source now (named by PROCTOR_WARDEN for the rest of the
// process and its children), never one `make warden` embedded earlier,
// which may be older than the code under test. The build lands in the temp
// folder under its own hash, so test binaries of other checkouts on the
// machine, building other wardens at the same time, never swap it. Call
// it from TestMain.
func EnsureWarden() error {
	if os.Getenv("PROCTOR_WARDEN") != "" {
		return nil
	}
	dir := filepath.Join(os.TempDir(), "proctor-test-warden")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "build-")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp.Name(), "github.com/proctor-dev/proctor/sandbox/warden")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the warden: %v\n%s", err, b)
	}
	b, err := os.ReadFile(tmp.Name())
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	out := filepath.Join(dir, fmt.Sprintf("warden-%s-%x", runtime.GOARCH, sum[:8]))
	// A rename keeps a warden that another test binary is copying intact.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	return os.Setenv("PROCTOR_WARDEN", out)
}
