package shell

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

// hostShell starts the controller as a host bash process in a temp folder.
func hostShell(t testing.TB) *Shell {
	t.Helper()
	return hostShellEnv(t, nil)
}

// hostShellEnv is hostShell with env added to the controller's environment.
func hostShellEnv(t testing.TB, env []string) *Shell {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", Bootstrap(), "proctor-shell", dir+"/state")
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sh := New(Transport{
		Stdin:  stdin,
		Stdout: stdout,
		Kill:   func(_ context.Context, pgid int) error { return syscall.Kill(-pgid, syscall.SIGKILL) },
		Close:  func() error { return cmd.Process.Kill() },
	}, dir+"/state")
	t.Cleanup(func() {
		for _, g := range sh.Groups() {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
		sh.Close()
		cmd.Wait()
	})
	return sh
}

func run(t testing.TB, sh *Shell, cmd string, o sandbox.ExecOptions) sandbox.ExecResult {
	t.Helper()
	r, err := sh.Exec(context.Background(), cmd, o)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return r
}

// A command that breaks its own PATH must not break the controller, which
// needs cat, head and stat to send the next command's output back.
func TestBrokenPathDoesNotBreakController(t *testing.T) {
	sh := hostShell(t)
	run(t, sh, "export PATH=/nonexistent", sandbox.ExecOptions{})
	r := run(t, sh, "echo $PATH; echo err >&2", sandbox.ExecOptions{})
	if r.Stdout != "/nonexistent\n" || r.Stderr != "err\n" {
		t.Fatalf("got %+v", r)
	}
	r = run(t, sh, "ls", sandbox.ExecOptions{})
	if r.ExitCode != 127 {
		t.Fatalf("ls with a broken PATH: %+v", r)
	}
}

func TestUnsetPersists(t *testing.T) {
	sh := hostShell(t)
	run(t, sh, "export A=1 B=2", sandbox.ExecOptions{})
	run(t, sh, "unset A; unset HOME", sandbox.ExecOptions{})
	r := run(t, sh, `echo "[${A-unset}] [${B-unset}] [${HOME-unset}]"`, sandbox.ExecOptions{})
	if r.Stdout != "[unset] [2] [unset]\n" {
		t.Fatalf("got %q", r.Stdout)
	}
}

// A background child of an earlier command that keeps printing must not
// write into a later command's output.
func TestBackgroundWriterDoesNotLeak(t *testing.T) {
	sh := hostShell(t)
	run(t, sh, "(while :; do echo LEAK; sleep 0.01; done) &", sandbox.ExecOptions{})
	for i := 0; i < 5; i++ {
		r := run(t, sh, "sleep 0.05; echo mine", sandbox.ExecOptions{})
		if r.Stdout != "mine\n" {
			t.Fatalf("call %d: output %q", i, r.Stdout)
		}
	}
}

func TestBinaryStdin(t *testing.T) {
	sh := hostShell(t)
	in := []byte("a\x00b\xff\n'\"$(x)\x00")
	r := run(t, sh, "od -An -tx1 | tr -d ' \\n'", sandbox.ExecOptions{Stdin: in})
	want := "610062ff0a27222428782900"
	if r.Stdout != want {
		t.Fatalf("stdin bytes seen %q, want %q", r.Stdout, want)
	}
}

func TestLongScript(t *testing.T) {
	sh := hostShell(t)
	var b strings.Builder
	for i := 0; i < 20000; i++ {
		b.WriteString("x=$((x+1))\n")
	}
	b.WriteString("echo $x\n")
	r := run(t, sh, b.String(), sandbox.ExecOptions{Stdin: bytes.Repeat([]byte{0}, 300000)})
	if r.Stdout != "20000\n" {
		t.Fatalf("got %+v", r)
	}
	if r := run(t, sh, "echo next", sandbox.ExecOptions{}); r.Stdout != "next\n" {
		t.Fatalf("protocol out of step after a long script: %+v", r)
	}
}

func TestNulInCommandRefused(t *testing.T) {
	sh := hostShell(t)
	if _, err := sh.Exec(context.Background(), "echo a\x00b", sandbox.ExecOptions{}); err == nil {
		t.Fatal("command with NUL accepted")
	}
	if _, err := sh.Exec(context.Background(), "true", sandbox.ExecOptions{Env: map[string]string{"1X": "y"}}); err == nil {
		t.Fatal("invalid variable name accepted")
	}
	if r := run(t, sh, "echo ok", sandbox.ExecOptions{}); r.Stdout != "ok\n" {
		t.Fatalf("shell unusable after refused calls: %+v", r)
	}
}

func TestTruncationMarker(t *testing.T) {
	sh := hostShell(t)
	r := run(t, sh, "seq 1 100000", sandbox.ExecOptions{MaxOutput: 1000})
	if !r.Truncated || !strings.HasPrefix(r.Stdout, "1\n2\n") || !strings.HasSuffix(r.Stdout, "99999\n100000\n") {
		t.Fatalf("head/tail not kept: %q", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "…[587895 bytes cut]…") {
		t.Fatalf("marker missing or wrong count: %q", r.Stdout)
	}
	// The cap is per call: the next call without MaxOutput keeps it all.
	r = run(t, sh, "seq 1 1000", sandbox.ExecOptions{})
	if r.Truncated || len(r.Stdout) != 3893 {
		t.Fatalf("default cap not restored: %d bytes truncated=%v", len(r.Stdout), r.Truncated)
	}
}

func TestTimeoutThenStatePersists(t *testing.T) {
	sh := hostShell(t)
	run(t, sh, "mkdir -p d && cd d && export K=v", sandbox.ExecOptions{})
	r := run(t, sh, "sleep 5", sandbox.ExecOptions{Timeout: 100 * time.Millisecond})
	if !r.TimedOut {
		t.Fatalf("no timeout: %+v", r)
	}
	r = run(t, sh, `echo "${PWD##*/} $K"`, sandbox.ExecOptions{Timeout: time.Hour}) // armed, never reached
	if r.Stdout != "d v\n" || r.TimedOut {
		t.Fatalf("state lost after a timeout: %+v", r)
	}
}

func TestControllerDeathIsGone(t *testing.T) {
	sh := hostShell(t)
	_, err := sh.Exec(context.Background(), "kill -KILL $$; sleep 5", sandbox.ExecOptions{})
	if !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("want ErrGone, got %v", err)
	}
	if _, err := sh.Exec(context.Background(), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("later call: want ErrGone, got %v", err)
	}
	sh.Close()
	if _, err := sh.Exec(context.Background(), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("after Close: want ErrClosed, got %v", err)
	}
}

func BenchmarkExecTrue(b *testing.B) {
	sh := hostShell(b)
	for b.Loop() {
		if _, err := sh.Exec(context.Background(), "true", sandbox.ExecOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseDone(t *testing.T) {
	ok := strings.Fields("@@PROCTOR DONE 3 1 0 1 5000 7 100 7")
	d, err := parseDone(ok, 100)
	if err != nil || d.exit != 1 || !d.oom || d.timedOut || d.outSize != 5000 || d.outSent != 100 || d.errSent != 7 {
		t.Fatalf("parseDone(%q) = %+v, %v", ok, d, err)
	}
	for _, bad := range []string{
		"@@PROCTOR DONE 3 0 0 0 5000 0 101 0",                      // more than the cap
		"@@PROCTOR DONE 3 0 0 0 10 0 11 0",                         // more sent than written
		"@@PROCTOR DONE 3 0 0 0 99999999999999 0 99999999999999 0", // forged huge size
		"@@PROCTOR DONE 3 -1 0 0 0 0 0 0",
		"@@PROCTOR DONE 3 256 0 0 0 0 0 0",
		"@@PROCTOR DONE 3 0 2 0 0 0 0 0",
		"@@PROCTOR DONE 3 0 0 0 x 0 0 0",
		"@@PROCTOR DONE 3 0 0 0 0 0 0",
	} {
		if d, err := parseDone(strings.Fields(bad), 100); err == nil {
			t.Errorf("parseDone(%q) accepted: %+v", bad, d)
		}
	}
}

// A process in the sandbox can write to the controller's stdout. Forged or
// oversized frames must fail the call, never make the host allocate the
// forged size or kill group 0 or -1.
func TestForgedFramesRefused(t *testing.T) {
	for _, forged := range []string{
		`printf '@@PROCTOR DONE %s 0 0 0 99999999999 0 99999999999 0\n' "$__proctor_id"`,
		`printf '@@PROCTOR START %s 1\n' "$__proctor_id"`,
		`head -c 200000 /dev/zero | tr '\0' x`,
	} {
		sh := hostShell(t)
		// The controller's pid is $$ in the command's subshell.
		_, err := sh.Exec(context.Background(), "__proctor_id=1; { "+forged+"; } > /proc/$$/fd/1", sandbox.ExecOptions{})
		if !errors.Is(err, sandbox.ErrGone) {
			t.Errorf("%s: want ErrGone, got %v", forged, err)
		}
	}
}

func FuzzParseDone(f *testing.F) {
	f.Add("@@PROCTOR DONE 3 1 0 1 5000 7 100 7", 100)
	f.Add("@@PROCTOR DONE 1 0 0 0 0 0 0 0", 1<<20)
	f.Fuzz(func(t *testing.T, line string, cap int) {
		d, err := parseDone(strings.Fields(line), cap)
		if err != nil {
			return
		}
		if d.outSent < 0 || d.errSent < 0 || d.outSent > int64(cap) || d.errSent > int64(cap) || d.outSent > d.outSize || d.errSent > d.errSize {
			t.Fatalf("accepted out-of-range frame %q: %+v", line, d)
		}
	})
}

// TestOutputExact: every way a command's output can come back (the
// builtin path for small text, stat and cat for NUL bytes, large output,
// or a file the command reopened) gives exactly what it wrote.
func TestOutputExact(t *testing.T) {
	sh := hostShell(t)
	big := strings.Repeat("0123456789abcdef", 70000/16) + "\n"
	for _, c := range []struct{ name, cmd, out, err string }{
		{"empty", "true", "", ""},
		{"text", "echo hello; echo oops >&2", "hello\n", "oops\n"},
		{"no newline", "printf 'a  b\\n\\n  '", "a  b\n\n  ", ""},
		{"backslashes", `printf '%s' 'a\nb\\'`, `a\nb\\`, ""},
		{"nul", `printf 'a\0b\n'`, "a\x00b\n", ""},
		{"large", "head -c 70000 /dev/zero | tr '\\0' x", strings.Repeat("x", 70000), ""},
		{"large text", "for i in $(seq 4375); do printf 0123456789abcdef; done; echo", big, ""},
		{"reopened", "echo a; echo b >> /dev/stdout", "a\nb\n", ""},
		{"only reopened", "echo b >> /dev/stdout", "b\n", ""},
		{"invalid utf-8", `printf '\xff\xfe\n'`, "\xff\xfe\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, sh, c.cmd, sandbox.ExecOptions{})
			if r.Stdout != c.out || r.Stderr != c.err {
				t.Errorf("stdout %d bytes %.60q, stderr %q; want %d bytes %.60q, %q", len(r.Stdout), r.Stdout, r.Stderr, len(c.out), c.out, c.err)
			}
		})
	}
	// A small output over a small cap is cut to its head and tail.
	r := run(t, sh, "seq 1 300", sandbox.ExecOptions{MaxOutput: 100})
	if !r.Truncated || !strings.HasPrefix(r.Stdout, "1\n2\n") || !strings.HasSuffix(r.Stdout, "299\n300\n") {
		t.Errorf("small output over a small cap: %q", r.Stdout)
	}
	// The stream is still in step after all of them.
	if r := run(t, sh, "echo after", sandbox.ExecOptions{}); r.Stdout != "after\n" {
		t.Fatalf("after: %q", r.Stdout)
	}
}

// TestSmallOutputSpawnsNothing: a command's small output comes back
// without a process of the controller's (stat, cat, head, tail, rm), which
// cost most of a short call; NUL bytes take the slow path, which proves
// the wrappers see it.
func TestSmallOutputSpawnsNothing(t *testing.T) {
	dir := t.TempDir()
	log := dir + "/spawned"
	for _, name := range []string{"stat", "cat", "head", "tail", "rm"} {
		real, err := exec.LookPath(name)
		if err != nil {
			t.Skip(name, err)
		}
		script := "#!/bin/sh\necho " + name + " >> " + log + "\nexec " + real + " \"$@\"\n"
		if err := os.WriteFile(dir+"/"+name, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sh := hostShellEnv(t, []string{"PATH=" + dir + ":" + os.Getenv("PATH")})
	for i := 0; i < 5; i++ {
		if r := run(t, sh, "echo hello; echo err >&2", sandbox.ExecOptions{}); r.Stdout != "hello\n" || r.Stderr != "err\n" {
			t.Fatalf("%+v", r)
		}
	}
	if b, _ := os.ReadFile(log); len(b) > 0 {
		t.Errorf("small outputs spawned: %q", b)
	}
	if r := run(t, sh, `printf 'a\0b'`, sandbox.ExecOptions{}); r.Stdout != "a\x00b" {
		t.Fatalf("nul: %q", r.Stdout)
	}
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "cat") {
		t.Errorf("NUL output did not take stat and cat: %q", b)
	}
}

// TestControllerLogStaysQuiet: the controller's error log holds its own
// errors only. Job control used to append a "Done" notice with the whole
// subshell's text to it on every call: megabytes of the sandbox's disk in
// a long rollout.
func TestControllerLogStaysQuiet(t *testing.T) {
	sh := hostShell(t)
	for i := 0; i < 10; i++ {
		run(t, sh, "true", sandbox.ExecOptions{})
		run(t, sh, "exit 3", sandbox.ExecOptions{Timeout: time.Minute})
		run(t, sh, "echo out; echo err >&2; kill -TERM $BASHPID", sandbox.ExecOptions{Fresh: true})
	}
	if r := run(t, sh, "sleep 5", sandbox.ExecOptions{Timeout: 100 * time.Millisecond}); !r.TimedOut {
		t.Fatalf("no timeout: %+v", r)
	}
	b, err := os.ReadFile(sh.state + "/controller.err")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 {
		t.Errorf("controller.err after 31 calls: %d bytes, starting %q", len(b), b[:min(len(b), 200)])
	}
}

// TestInputFreed: a call's standard input is staged in the state folder
// and freed when the call ends, as its output is, not when the batch of
// files goes: 4 MiB uploads through stdin would otherwise hold up to
// 128 MiB of the sandbox's disk.
func TestInputFreed(t *testing.T) {
	sh := hostShell(t)
	in := bytes.Repeat([]byte("x"), 1<<20)
	for range 3 {
		if r := run(t, sh, "wc -c", sandbox.ExecOptions{Stdin: in}); strings.TrimSpace(r.Stdout) != "1048576" {
			t.Fatalf("wc -c: %q", r.Stdout)
		}
	}
	// The controller frees a call's files after it answers: one more
	// call has them all freed.
	run(t, sh, "true", sandbox.ExecOptions{})
	files, _ := filepath.Glob(sh.state + "/in.*")
	if len(files) == 0 {
		t.Fatal("no input staged: the test no longer sees what it checks")
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Size() != 0 {
			t.Errorf("%s: %v after its call, %v", f, fi.Size(), err)
		}
	}
}
