package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

func newBackend(t testing.TB, opts ...Option) *Backend {
	t.Helper()
	sandboxtest.RequireDocker(t)
	b, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func start(t testing.TB, b *Backend, spec sandbox.Spec) *Sandbox {
	t.Helper()
	if spec.Image == "" && spec.BuildContext == nil {
		spec.Image = sandboxtest.BaseImage()
	}
	if spec.Labels == nil {
		spec.Labels = map[string]string{sandbox.LabelRun: "test-" + strings.ReplaceAll(t.Name(), "/", "-")}
	}
	sb, err := b.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb.(*Sandbox)
}

func TestConformance(t *testing.T) {
	b := newBackend(t)
	sandboxtest.Run(t, sandboxtest.Caps{Isolated: true}, func(t *testing.T) sandbox.Sandbox {
		return start(t, b, sandbox.Spec{Workdir: "/work"})
	})
}

// The backend's contract (sandboxtest.RunBackend), with isolation and
// without.
func TestBackendContract(t *testing.T) {
	sandboxtest.RunBackend(t, newBackend(t), sandbox.Spec{Image: sandboxtest.BaseImage()})
	plain := newBackend(t, WithIsolation(false))
	t.Run("WithoutIsolation", func(t *testing.T) {
		sandboxtest.RunBackend(t, plain, sandbox.Spec{Image: sandboxtest.BaseImage()})
	})
}

// Without isolation a root shell extracts and reads small files with the
// warden bound in; another user's goes through the engine's archive API.
func TestConformancePlain(t *testing.T) {
	sandboxtest.RequireDocker(t)
	plain, err := New(WithIsolation(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	sandboxtest.Run(t, sandboxtest.Caps{Isolated: true}, func(t *testing.T) sandbox.Sandbox {
		sb := start(t, plain, sandbox.Spec{Workdir: "/work"})
		if !sb.bound {
			t.Fatal("a root sandbox without isolation has no warden bound")
		}
		return sb
	})
}

func TestSecureDefaults(t *testing.T) {
	b := newBackend(t)
	sb := start(t, b, sandbox.Spec{})
	r, err := sb.Exec(context.Background(), "ls /sys/class/net; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max", sandbox.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := r.Stdout
	if strings.Contains(out, "eth0") || !strings.Contains(out, "lo") {
		t.Errorf("network is not none: %s", out)
	}
	if !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Errorf("no-new-privileges not set: %s", out)
	}
	if !strings.Contains(out, "1024") {
		t.Errorf("pids limit not the default 1024: %s", out)
	}
	if strings.Contains(out, "CapEff:\t000001ffffffffff") || strings.Contains(out, "CapEff:\t0000003fffffffff") {
		t.Errorf("full capability set: %s", out)
	}
	// Root can still install and chown as tasks expect.
	r, _ = sb.Exec(context.Background(), "useradd -m tester && chown tester /tmp && su tester -c 'id -un'", sandbox.ExecOptions{})
	if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "tester" {
		t.Errorf("root lost a capability tasks need: %+v", r)
	}
}

func TestEngineNotRunning(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Start(context.Background(), sandbox.Spec{Image: "x"})
	if !errors.Is(err, sandbox.ErrEngine) || !strings.Contains(err.Error(), "make engine") {
		t.Fatalf("want ErrEngine with a hint, got %v", err)
	}
	if _, err := b.Ping(context.Background()); !errors.Is(err, sandbox.ErrEngine) {
		t.Fatalf("ping: want ErrEngine, got %v", err)
	}
}

func buildContext(t testing.TB, dockerfile string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg})
	tw.Write([]byte(dockerfile))
	tw.Close()
	return buf.Bytes()
}

func TestImageMissingAndUnbuildable(t *testing.T) {
	b := newBackend(t)
	_, err := b.Start(context.Background(), sandbox.Spec{Image: "proctor-no-such-image:1"})
	var ie *sandbox.ImageError
	if !errors.As(err, &ie) || !errors.Is(err, sandbox.ErrImage) {
		t.Fatalf("missing image: want ImageError, got %v", err)
	}
	ctxTar := buildContext(t, "FROM "+sandboxtest.BaseImage()+"\nRUN echo building-step && echo the-reason-it-broke >&2 && exit 3\n")
	_, err = b.Start(context.Background(), sandbox.Spec{BuildContext: ctxTar})
	if !errors.As(err, &ie) || !strings.Contains(ie.LogTail, "building-step") {
		t.Fatalf("failed build: want the build log's tail, got %v", err)
	}
}

// TestImageMissingWithDockerfile: an image the engine lacks, for a task
// that has a Dockerfile it did not ask to build, says so and what builds
// it (issue 32: "not found locally and no build context" is untrue); a
// forced build records the local build that ran, not the image's name.
func TestImageMissingWithDockerfile(t *testing.T) {
	b := newBackend(t)
	const hint = "task t has environment/Dockerfile: set [env.config] force_build = true to build the image from it"
	_, err := b.Start(context.Background(), sandbox.Spec{Image: "proctor-no-such-image:1", BuildHint: hint})
	if err == nil || !strings.Contains(err.Error(), hint) || strings.Contains(err.Error(), "no build context") {
		t.Fatalf("missing image with a Dockerfile beside it: %v", err)
	}
	ctxTar := buildContext(t, "FROM "+sandboxtest.BaseImage()+"\nRUN echo forced > /forced\n")
	sb := start(t, b, sandbox.Spec{Image: "proctor-no-such-image:1", ForceBuild: true, BuildContext: ctxTar})
	if ref := sb.ImageRef(); !strings.HasPrefix(ref, "proctor-build:") {
		t.Errorf("a forced build ran %q, want the local build's tag", ref)
	}
}

func TestBuildSharedByConcurrentStarts(t *testing.T) {
	b := newBackend(t)
	stamp := time.Now().UnixNano()
	ctxTar := buildContext(t, "FROM "+sandboxtest.BaseImage()+"\nRUN echo "+strings.Repeat("x", 3)+" > /built && echo "+time.Unix(0, stamp).Format(time.RFC3339Nano)+" > /stamp\n")
	var wg sync.WaitGroup
	images := make([]string, 4)
	for i := range images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := start(t, b, sandbox.Spec{BuildContext: ctxTar})
			r, _ := sb.Exec(context.Background(), "cat /stamp", sandbox.ExecOptions{})
			images[i] = r.Stdout
		}()
	}
	wg.Wait()
	for _, s := range images[1:] {
		if s != images[0] || s == "" {
			t.Fatalf("starts saw different builds: %q", images)
		}
	}
	out, _ := exec.Command("docker", "images", "-q", "--filter", "label=proctor.managed=true").Output()
	_ = out
}

func TestContainerKilledMidExec(t *testing.T) {
	b := newBackend(t)
	sb := start(t, b, sandbox.Spec{})
	time.AfterFunc(500*time.Millisecond, func() {
		exec.Command("docker", "kill", sb.ID()).Run()
	})
	_, err := sb.Exec(context.Background(), "sleep 60", sandbox.ExecOptions{})
	if !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("want ErrGone, got %v", err)
	}
	if _, err := sb.Exec(context.Background(), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("after the kill: want ErrGone, got %v", err)
	}
}

// Seal asks a sandbox whether it still runs, with isolation or without
// (isolate.Seal): before, a sandbox without isolation was sealed without
// asking, so a dead one passed Seal.
func TestSealOfDeadSandbox(t *testing.T) {
	for name, b := range map[string]*Backend{"isolated": newBackend(t), "plain": newBackend(t, WithIsolation(false))} {
		t.Run(name, func(t *testing.T) {
			sb := start(t, b, sandbox.Spec{})
			if out, err := exec.Command("docker", "kill", sb.ID()).CombinedOutput(); err != nil {
				t.Fatalf("docker kill: %v: %s", err, out)
			}
			poll.Until(t, "the container to stop", func() bool { return !sb.running(context.Background()) })
			if note, err := sb.Seal(context.Background()); !errors.Is(err, sandbox.ErrGone) {
				t.Fatalf("seal of a dead sandbox: %q, %v; want ErrGone", note, err)
			}
		})
	}
}

func TestOOMKilled(t *testing.T) {
	b := newBackend(t)
	sb := start(t, b, sandbox.Spec{MemoryMB: 64})
	r, err := sb.Exec(context.Background(), "python3 -c 'x = bytearray(512 << 20); print(len(x))'", sandbox.ExecOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OOMKilled || r.TimedOut || r.ExitCode == 0 {
		t.Fatalf("want OOMKilled, got %+v", r)
	}
	if r, err := sb.Exec(context.Background(), "echo alive", sandbox.ExecOptions{}); err != nil || r.Stdout != "alive\n" {
		t.Fatalf("shell died with the OOM-killed command: %+v %v", r, err)
	}
}

func TestPrune(t *testing.T) {
	b := newBackend(t)
	run := "prune-" + time.Now().Format("150405.000000")
	for range 2 {
		sb, err := b.Start(context.Background(), sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: run}})
		if err != nil {
			t.Fatal(err)
		}
		_ = sb // left running, as a killed run would
	}
	n, err := b.Prune(context.Background(), run)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	if n, _ := b.Prune(context.Background(), run); n != 0 {
		t.Fatalf("second prune found %d", n)
	}
}

// A prune that meets a removal already under way (a run's Close still in
// flight when its process exited) waits for it instead of failing.
func TestPruneDuringClose(t *testing.T) {
	b := newBackend(t)
	for i := range 5 {
		run := fmt.Sprintf("prune-close-%s-%d", time.Now().Format("150405.000000"), i)
		sb, err := b.Start(context.Background(), sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: run}})
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- sb.Close(context.Background()) }()
		time.Sleep(time.Duration(i) * 5 * time.Millisecond)
		if _, err := b.Prune(context.Background(), run); err != nil {
			t.Errorf("prune during close: %v", err)
		}
		if err := <-closed; err != nil {
			t.Errorf("close during prune: %v", err)
		}
		if n, _ := b.Prune(context.Background(), run); n != 0 {
			t.Errorf("%d containers left", n)
		}
	}
}

// A user that may not create a folder still gets WriteFile to work: the
// folder is made by a separate exec as root.
func TestWriteFileAsUnprivilegedUser(t *testing.T) {
	b := newBackend(t)
	sb := start(t, b, sandbox.Spec{User: "nobody", Workdir: "/tmp"})
	ctx := context.Background()
	if r, _ := sb.Exec(ctx, "mkdir /opt/denied", sandbox.ExecOptions{}); r.ExitCode == 0 {
		t.Fatal("user nobody may write /opt; the test proves nothing")
	}
	if err := sb.WriteFile(ctx, "/opt/made/by/root/f.txt", []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, _, err := sb.ReadFile(ctx, "/opt/made/by/root/f.txt", 0)
	if err != nil || string(got) != "hi" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// The engine cannot resolve a numeric user for ownership; written and
// uploaded files must still belong to it.
func TestFilesOwnedByNumericUser(t *testing.T) {
	b := newBackend(t)
	sb := start(t, b, sandbox.Spec{User: "4242:4343", Workdir: "/tmp/w"})
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "/opt/numeric/f.txt", []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "./pkg/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 7})
	tw.WriteHeader(&tar.Header{Name: "./pkg/a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Uid: 7})
	tw.Write([]byte("a"))
	tw.Close()
	if err := sb.Upload(ctx, "up", &buf); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Exec(ctx, "stat -c '%u:%g %n' /opt/numeric/f.txt up/pkg up/pkg/a && cat /opt/numeric/f.txt", sandbox.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "4242:4343 /opt/numeric/f.txt\n4242:4343 up/pkg\n4242:4343 up/pkg/a\nhi"
	if r.Stdout != want {
		t.Fatalf("ownership:\n%s\nwant:\n%s\nstderr: %s", r.Stdout, want, r.Stderr)
	}
	// Cancelling a call kills the command though root has no CAP_KILL here.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := sb.Exec(cctx, "sleep 331", sandbox.ExecOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	r, err = sb.Exec(ctx, "ps -eo args | grep -c '^sleep 331' || true", sandbox.ExecOptions{})
	if err != nil || strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("cancelled command still runs: %q %v", r.Stdout, err)
	}
}

func TestConformanceAgentView(t *testing.T) {
	b := newBackend(t)
	sandboxtest.Run(t, sandboxtest.Caps{Isolated: true}, func(t *testing.T) sandbox.Sandbox {
		return start(t, b, sandbox.Spec{Workdir: "/work"}).Agent()
	})
}

func TestIsolation(t *testing.T) {
	b := newBackend(t)
	sandboxtest.RunIsolated(t, func(t *testing.T, pids int64) sandbox.Isolated {
		return start(t, b, sandbox.Spec{Workdir: "/app", PidsMax: pids, Private: sandboxtest.Private})
	})
}

// TestWardenDelivery: the warden reaches the container by a read-only bind
// of this machine's folder, which nothing in the sandbox can write, and
// by a copy where the engine cannot bind it (a remote engine); isolation
// holds either way.
func TestWardenDelivery(t *testing.T) {
	for _, bind := range []bool{true, false} {
		t.Run(fmt.Sprintf("bind=%v", bind), func(t *testing.T) {
			b := newBackend(t)
			if !bind {
				b.wardens.disable()
			}
			sb := start(t, b, sandbox.Spec{Workdir: "/app", Private: sandboxtest.Private})
			ctx := context.Background()
			r, err := sb.Agent().Exec(ctx, "grep ' /.proctor ' /proc/self/mounts | wc -l; echo x > /.proctor/warden; echo rc=$?", sandbox.ExecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			mounted, rest, _ := strings.Cut(r.Stdout, "\n")
			if strings.TrimSpace(mounted) == "0" || !strings.Contains(rest, "rc=1") {
				t.Errorf("the agent's view of the warden's folder: %q %q", r.Stdout, r.Stderr)
			}
			if _, err := sb.Seal(ctx); err != nil {
				t.Fatal(err)
			}
			if r, err := sb.Exec(ctx, "/.proctor/warden id root", sandbox.ExecOptions{}); err != nil || r.ExitCode != 0 {
				t.Errorf("the warden after Seal: %+v %v", r, err)
			}
			b.wardens.mu.Lock()
			n := len(b.wardens.dirs)
			b.wardens.mu.Unlock()
			if (n == 1) != bind {
				t.Errorf("warden folders %d, bind %v", n, bind)
			}
		})
	}
}

// The users of an isolated sandbox (sandboxtest.RunUsers): Seal as a user
// that may not mount (a separate exec as root empties the private folders
// in the plugin's namespace), the agent's user apart from the plugin's.
func TestUsers(t *testing.T) {
	b := newBackend(t)
	sandboxtest.RunUsers(t, func(t *testing.T, spec sandbox.Spec) sandbox.Isolated {
		return start(t, b, spec)
	})
}

// Without isolation the agent's user and the plugin's cannot be kept
// apart: refused.
func TestAgentUserWithoutIsolation(t *testing.T) {
	plain, err := New(WithIsolation(false))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Start(context.Background(), sandbox.Spec{Image: sandboxtest.BaseImage(), AgentUser: "nobody"}); err == nil || !strings.Contains(err.Error(), "only an isolated sandbox") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

// What the agent writes is held to the sandbox's disk limit: by the
// engine's quota where the storage driver has one, else by the watchdog,
// which stops the agent. Either way it is the agent's outcome (ErrLimit),
// never the host's disk filling up.
func TestDiskLimit(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	mode, err := b.DiskLimit(ctx, sandboxtest.BaseImage())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("disk limit: %s", mode)
	sb := start(t, b, sandbox.Spec{DiskMB: 64, Private: sandboxtest.Private})
	agent := sb.Agent()
	r, err := agent.Exec(ctx, "dd if=/dev/zero of=/fill bs=1M count=200 status=none; echo wrote", sandbox.ExecOptions{Timeout: time.Minute})
	if mode == DiskQuota {
		if err != nil || strings.Contains(r.Stdout, "wrote") && r.ExitCode == 0 && !strings.Contains(r.Stderr, "No space") {
			t.Errorf("the quota let 200 MiB through: %+v, %v", r, err)
		}
		return
	}
	if err == nil {
		poll.Until(t, "the watchdog to stop the agent", func() bool {
			_, err = agent.Exec(ctx, "true", sandbox.ExecOptions{})
			return err != nil
		})
	}
	if !errors.Is(err, sandbox.ErrLimit) {
		t.Fatalf("the agent went on past its disk limit: %v", err)
	}
	if _, err := sb.Seal(ctx); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("seal after the limit: %v", err)
	}
}

// waitLimit runs true as the agent until the sandbox says it went over a
// limit, for as long as the watchdog may need on a loaded machine.
func waitLimit(t *testing.T, agent sandbox.Sandbox) error {
	t.Helper()
	var err error
	for i := 0; err == nil && i < 600; i++ {
		time.Sleep(500 * time.Millisecond)
		_, err = agent.Exec(context.Background(), "true", sandbox.ExecOptions{})
	}
	return err
}

// TestDiskLimitDeepPaths: what the agent writes under a path longer than
// PATH_MAX counts toward its disk limit (the watchdog's walk by path
// skipped it: 601 MB went by under disk_mb = 100).
func TestDiskLimitDeepPaths(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	if mode, _ := b.DiskLimit(ctx, sandboxtest.BaseImage()); mode == DiskQuota {
		t.Skip("the engine's quota holds the disk limit")
	}
	sb := start(t, b, sandbox.Spec{DiskMB: 64, Private: sandboxtest.Private})
	agent := sb.Agent()
	_, err := agent.Exec(ctx, `n=$(printf 'd%.0s' $(seq 250)); mkdir /deep && cd /deep && for i in $(seq 20); do mkdir $n && cd $n || exit 1; done; `+
		`dd if=/dev/zero of=f bs=1M count=200 status=none; pwd | wc -c`, sandbox.ExecOptions{Timeout: 5 * time.Minute})
	if err == nil {
		err = waitLimit(t, agent)
	}
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "over its disk limit of 64 MiB") {
		t.Fatalf("the agent went on past its disk limit: %v", err)
	}
}

// TestInodeLimit: the files, folders and links the agent makes are held
// to DiskInodes, as its bytes are to DiskMB: over it, the agent's outcome.
func TestInodeLimit(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	sb := start(t, b, sandbox.Spec{DiskInodes: 5000, Private: sandboxtest.Private})
	agent := sb.Agent()
	_, err := agent.Exec(ctx, "mkdir /many && cd /many && seq 20000 | xargs touch", sandbox.ExecOptions{Timeout: 5 * time.Minute})
	if err == nil {
		err = waitLimit(t, agent)
	}
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "the sandbox made over 5000 files, folders and links, its limit") {
		t.Fatalf("the agent went on past its inode limit: %v", err)
	}
	if _, err := sb.Seal(ctx); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("seal after the limit: %v", err)
	}
}

// TestDefaultNetwork: NetworkDefault is the engine's own network, and
// NoDefaultNetwork says when that is nothing but loopback (an engine
// started with --bridge=none).
func TestDefaultNetwork(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	bridge := exec.Command("docker", "network", "inspect", "bridge").Run() == nil
	why := b.NoDefaultNetwork(ctx)
	if (why == "") != bridge {
		t.Fatalf("bridge network %v, NoDefaultNetwork %q", bridge, why)
	}
	sb := start(t, b, sandbox.Spec{Network: sandbox.NetworkDefault})
	r, err := sb.Exec(ctx, "ls /sys/class/net | grep -v '^lo$' | wc -l", sandbox.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(r.Stdout); (got != "0") != bridge {
		t.Fatalf("interfaces besides lo: %s, bridge network %v", got, bridge)
	}
}

func TestBuildNetwork(t *testing.T) {
	for _, tc := range []struct {
		run, build, want sandbox.Network
	}{
		{"", "", sandbox.NetworkNone},
		{sandbox.NetworkHost, "", sandbox.NetworkHost},
		{sandbox.NetworkDefault, "", sandbox.NetworkDefault},
		{sandbox.NetworkNone, sandbox.NetworkDefault, sandbox.NetworkDefault},
		{sandbox.NetworkHost, sandbox.NetworkNone, sandbox.NetworkNone},
		{"bridge", "", sandbox.NetworkNone},
	} {
		if got := buildNetwork(sandbox.Spec{Network: tc.run, BuildNetwork: tc.build}); got != tc.want {
			t.Errorf("%q/%q: %q", tc.run, tc.build, got)
		}
	}
}

// awaitWaiters returns once n callers wait for the one build b runs.
func awaitWaiters(b *Backend, n int) {
	for {
		b.mu.Lock()
		ok := false
		for _, bd := range b.builds {
			ok = bd.waiters == n
		}
		b.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// sleepyBuild is the spec of an image whose build sleeps that long, new to
// the engine's cache.
func sleepyBuild(t *testing.T, sleep string) sandbox.Spec {
	return sandbox.Spec{BuildContext: buildContext(t, "FROM "+sandboxtest.BaseImage()+"\nRUN sleep "+sleep+" && echo "+fmt.Sprint(time.Now().UnixNano())+" > /stamp\n")}
}

// removeBuilt removes the image a test built from ctxTar (its own, by the
// content-hash tag), so test runs do not pile images up.
func removeBuilt(t *testing.T, image string) {
	t.Cleanup(func() {
		if image != "" {
			exec.Command("docker", "rmi", "-f", image).Run()
		}
	})
}

// TestSharedBuildOutlivesFirstCaller: a build two starts share runs on
// until the last of them gives up: the first caller's cancellation (its
// rollout interrupted, its start timeout) no longer fails the second.
func TestSharedBuildOutlivesFirstCaller(t *testing.T) {
	b := newBackend(t)
	spec := sleepyBuild(t, "2")
	first, cancelFirst := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := b.buildOnce(first, spec)
		firstErr <- err
	}()
	second := make(chan error, 1)
	var image string
	go func() {
		awaitWaiters(b, 1)
		var err error
		image, err = b.buildOnce(context.Background(), spec)
		second <- err
	}()
	awaitWaiters(b, 2)
	cancelFirst()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("first caller: %v, want its own cancellation", err)
	}
	err := <-second
	removeBuilt(t, image)
	if err != nil {
		t.Fatalf("second caller: %v, want the shared build to finish", err)
	}
	if ok, err := b.imagePresent(context.Background(), image); !ok || err != nil {
		t.Fatalf("image %s present %v: %v", image, ok, err)
	}
}

// TestSharedBuildEndsWithLastCaller: once every caller waiting for a build
// has given up, the build is cancelled, and a later caller starts anew.
func TestSharedBuildEndsWithLastCaller(t *testing.T) {
	b := newBackend(t)
	spec := sleepyBuild(t, "60")
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := b.buildOnce(ctx, spec)
			errs <- err
		}()
	}
	awaitWaiters(b, 2)
	b.mu.Lock()
	var bd *buildJob
	for _, j := range b.builds {
		bd = j
	}
	b.mu.Unlock()
	cancel()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("caller: %v, want its cancellation", err)
		}
	}
	<-bd.done // the build itself ends, well before its 60 s sleep
	if bd.err == nil {
		removeBuilt(t, bd.image)
		t.Fatalf("the build ran to its end with no one waiting: %s", bd.image)
	}
	b.mu.Lock()
	n := len(b.builds)
	b.mu.Unlock()
	if n != 0 {
		t.Errorf("%d builds still listed, want none: a later caller must start anew", n)
	}
}

// TestNoExecs: an isolated sandbox's shells, a kill of a command whose call
// was cancelled, an agent shell's restart and the seal all go through the
// container's first process: the engine runs no exec for them.
func TestNoExecs(t *testing.T) {
	b := newBackend(t)
	run := "noexec-" + time.Now().Format("150405.000000")
	ctx := context.Background()
	t0 := time.Now()
	sb := start(t, b, sandbox.Spec{User: "nobody", Private: sandboxtest.Private, Labels: map[string]string{sandbox.LabelRun: run}})
	agent := sb.Agent()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	r, err := agent.Exec(cctx, "sleep 60", sandbox.ExecOptions{})
	cancel()
	if err == nil {
		t.Fatalf("a cancelled call returned %+v", r)
	}
	if r, err := agent.Exec(ctx, "kill -9 -1", sandbox.ExecOptions{}); err != nil || r.ExitCode != 137 {
		t.Fatalf("kill -9 -1: %+v %v", r, err)
	}
	if r, err := agent.Exec(ctx, "echo back", sandbox.ExecOptions{}); err != nil || r.Stdout != "back\n" {
		t.Fatalf("after the restart: %+v %v", r, err)
	}
	// Small files in and out of the private folders, from both sides.
	for _, v := range []sandbox.Sandbox{sb, agent} {
		for _, p := range []string{"/tmp/noexec/f", sandboxtest.Private[0] + "/f"} {
			if v == agent && strings.HasPrefix(p, sandboxtest.Private[0]) {
				continue
			}
			if err := v.WriteFile(ctx, p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := sb.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	actions := containerActions(t, b, run, t0)
	if !slices.Contains(actions, string(events.ActionCreate)) {
		t.Fatalf("the engine's log has no create of the sandbox: %v", actions)
	}
	for _, a := range actions {
		if strings.HasPrefix(a, "exec_") || a == string(events.ActionExtractToDir) {
			t.Errorf("the engine ran %s: %v", a, actions)
		}
	}
}

// containerActions reads back from the engine's log what happened to the
// containers of a run since t0. A subscription made before the work
// would miss its first events: the client subscribes in the background.
func containerActions(t *testing.T, b *Backend, run string, t0 time.Time) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, errs := b.cli.Events(ctx, events.ListOptions{
		Since:   strconv.FormatInt(t0.Add(-time.Second).Unix(), 10),
		Until:   strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10),
		Filters: filters.NewArgs(filters.Arg("type", "container"), filters.Arg("label", sandbox.LabelRun+"="+run))})
	var actions []string
	for {
		select {
		case m := <-msgs:
			actions = append(actions, string(m.Action))
		case err := <-errs:
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("engine events: %v", err)
			}
			return actions
		}
	}
}

// TestEndsWithItsConnection: a sandbox whose proctor is gone (killed, its
// connection to the engine dropped) stops on its own; only the stopped
// container is left for `proctor sandbox prune`.
func TestEndsWithItsConnection(t *testing.T) {
	for _, isolate := range []bool{true, false} {
		b, err := New(WithIsolation(isolate))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		sb := start(t, b, sandbox.Spec{})
		if _, err := sb.Agent().Exec(context.Background(), "nohup sleep 600 >/dev/null 2>&1 &", sandbox.ExecOptions{}); err != nil {
			t.Fatal(err)
		}
		sb.conn.Close()
		poll.Until(t, fmt.Sprintf("isolated %v: the container to stop once its connection dropped", isolate), func() bool {
			return !sb.running(context.Background())
		})
	}
}

// TestNetworkNone: a sandbox on network "none" has a network namespace of
// its own with nothing but a working loopback, and "localhost" resolves,
// whether the engine sets its network up (without isolation, as a user
// that is not root) or the engine leaves it off and the first process
// finishes it (the shell controller as root without isolation; the
// warden, bound or sent, in an isolated sandbox).
func TestNetworkNone(t *testing.T) {
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	check := `readlink /proc/self/ns/net
` + ListInterfaces + `
head -n 1 /etc/hosts
python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(("localhost", s.getsockname()[1]), timeout=5)
print("localhost ok")'
cat /proc/sys/net/ipv6/conf/lo/disable_ipv6`
	ipv6 := ""
	for _, tc := range []struct {
		name          string
		isolate, bind bool
		user          string
		offline       bool // the engine's network off
	}{
		// First: the engine's own none, the reference for IPv6.
		{"plain-nobody", false, false, "nobody", false},
		{"plain-root", false, false, "", true},
		{"isolated", true, true, "", true},
		{"isolated-sent", true, false, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			b.isolate = tc.isolate
			if !tc.bind {
				b.wardens.disable()
			}
			sb := start(t, b, sandbox.Spec{Network: sandbox.NetworkNone, User: tc.user})
			ctx := context.Background()
			for _, v := range []struct {
				name string
				sb   sandbox.Sandbox
			}{{"plugin", sb}, {"agent", sb.Agent()}} {
				r, err := v.sb.Exec(ctx, check, sandbox.ExecOptions{})
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
				if r.ExitCode != 0 || len(lines) != 5 {
					t.Fatalf("%s: %+v", v.name, r)
				}
				if lines[0] == host || !strings.HasPrefix(lines[0], "net:[") {
					t.Errorf("%s: network namespace %s, this machine's %s", v.name, lines[0], host)
				}
				if lines[1] != "lo" {
					t.Errorf("%s: interfaces %s, want only lo", v.name, lines[1])
				}
				if lines[2] != "127.0.0.1\tlocalhost" {
					t.Errorf("%s: /etc/hosts starts %q", v.name, lines[2])
				}
				if lines[3] != "localhost ok" {
					t.Errorf("%s: localhost: %q", v.name, lines[3])
				}
				// IPv6 as on the engine's own "none" (the plain case).
				if ipv6 == "" {
					ipv6 = lines[4]
				} else if lines[4] != ipv6 {
					t.Errorf("%s: the loopback's disable_ipv6 is %s, on the engine's none %s", v.name, lines[4], ipv6)
				}
			}
			ci, err := b.cli.ContainerInspect(ctx, sb.id)
			if err != nil {
				t.Fatal(err)
			}
			if ci.Config.NetworkDisabled != tc.offline {
				t.Errorf("the engine's network disabled %v, want %v", ci.Config.NetworkDisabled, tc.offline)
			}
		})
	}
}

// TestNetworkNotOff: an engine that does not run a container with its
// network off as proctor needs makes the backend start the sandbox, and
// every later one, on the engine's network "none" instead: one that gives
// the container a network anyway (faked with this machine's network: the
// warden refuses to start), and one that cannot set the IPv6 sysctl (a
// kernel without IPv6, faked with an interface that does not exist); with
// isolation or without.
func TestNetworkNotOff(t *testing.T) {
	fakes := map[string]func(*container.Config, *container.HostConfig){
		"networked": func(c *container.Config, h *container.HostConfig) {
			c.NetworkDisabled, h.NetworkMode, h.Sysctls = false, "host", nil
		},
		"sysctl": func(c *container.Config, h *container.HostConfig) {
			h.Sysctls = map[string]string{"net.ipv6.conf.proctor0.disable_ipv6": "1"}
		},
	}
	for _, name := range []string{"networked", "sysctl", "networked-plain"} {
		fake := fakes[strings.TrimSuffix(name, "-plain")]
		t.Run(name, func(t *testing.T) {
			b := newBackend(t)
			b.isolate = !strings.HasSuffix(name, "-plain")
			b.fakeOffline = fake
			for i := 0; i < 2; i++ {
				sb := start(t, b, sandbox.Spec{Network: sandbox.NetworkNone})
				r, err := sb.Agent().Exec(context.Background(), ListInterfaces, sandbox.ExecOptions{})
				if err != nil || strings.TrimSpace(r.Stdout) != "lo" {
					t.Fatalf("sandbox %d: interfaces %q %v", i, r.Stdout, err)
				}
				ci, err := b.cli.ContainerInspect(context.Background(), sb.id)
				if err != nil {
					t.Fatal(err)
				}
				if ci.Config.NetworkDisabled || ci.HostConfig.NetworkMode != "none" {
					t.Errorf("sandbox %d: network disabled %v, mode %q", i, ci.Config.NetworkDisabled, ci.HostConfig.NetworkMode)
				}
			}
			if !b.networked.Load() {
				t.Error("the backend did not fall back")
			}
		})
	}
}

// TestPutLikeTheEngine: an isolated sandbox extracts small archives
// outside the private folders with the warden (through the mux), not the
// engine's archive API; what it leaves (owners, modes, links, contents)
// must be what the engine leaves, for the plugin's side and the agent's,
// with a named, a numeric and the image's own user.
func TestPutLikeTheEngine(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []tar.Header{
		{Name: "./pkg/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 7},
		{Name: "./pkg/a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Uid: 7},
		{Name: "./pkg/run.sh", Typeflag: tar.TypeReg, Mode: 0o755, Size: 1},
		{Name: "./pkg/ro", Typeflag: tar.TypeReg, Mode: 0o444, Size: 1},
		{Name: "./pkg/secret", Typeflag: tar.TypeReg, Mode: 0o600, Size: 1},
		{Name: "./pkg/group", Typeflag: tar.TypeReg, Mode: 0o664, Size: 1},
		{Name: "./pkg/link", Typeflag: tar.TypeSymlink, Linkname: "a"},
		{Name: "./top", Typeflag: tar.TypeReg, Mode: 0o640, Size: 1},
	} {
		tw.WriteHeader(&h)
		if h.Size > 0 {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	b := newBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		spec        sandbox.Spec
		plugin      bool
		wantOwnerIn string // a line of the listing that names the owner
	}{
		{"image user", sandbox.Spec{}, true, "0:0 644 f ./pkg/a"},
		{"named", sandbox.Spec{User: "nobody"}, true, "65534:65534 644 f ./pkg/a"},
		{"numeric", sandbox.Spec{User: "4242:4343"}, true, "4242:4343 644 f ./pkg/a"},
		{"agent", sandbox.Spec{AgentUser: "nobody"}, false, "65534:65534 644 f ./pkg/a"},
		// What the agent left at the names is replaced: a FIFO (which
		// would hold the write), a link to a file elsewhere (which would
		// lead the write there), a hard link (whose other name would
		// change too).
		{"over what is there", sandbox.Spec{}, false, "0:0 644 f ./pkg/a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.spec.Workdir = "/tmp"
			sb := start(t, b, c.spec)
			if c.name == "over what is there" {
				for _, d := range []string{"/opt/mux/in", "/opt/engine/in"} {
					mustRun(t, sb, "mkdir -p "+d+"/pkg && mkfifo "+d+"/pkg/a && echo keep > /opt/keep && ln -s /opt/keep "+d+"/pkg/run.sh && ln /opt/keep "+d+"/pkg/ro")
				}
			}
			if err := muxPut(ctx, sb, "/opt/mux/in", buf.Bytes(), c.plugin); err != nil {
				t.Fatalf("through the mux: %v", err)
			}
			if err := sb.engineMkdir(ctx, "/opt/engine/in"); err != nil {
				t.Fatal(err)
			}
			if err := sb.copyTo(ctx, "/opt/engine/in", buf.Bytes(), c.plugin); err != nil {
				t.Fatal(err)
			}
			list := func(dir string) string {
				r, err := sb.Exec(ctx, "cd "+dir+" && find . -mindepth 1 -printf '%U:%G %m %y %p\\n' | sort && cat pkg/a", sandbox.ExecOptions{})
				if err != nil || r.ExitCode != 0 {
					t.Fatalf("list %s: %+v %v", dir, r, err)
				}
				return r.Stdout
			}
			mux, engine := list("/opt/mux/in"), list("/opt/engine/in")
			if r := mustRun(t, sb, "cat /opt/keep 2>/dev/null || true"); c.name == "over what is there" && r.Stdout != "keep\n" {
				t.Errorf("the file links pointed to became %q", r.Stdout)
			}
			if c.name == "over what is there" {
				// A file over a folder is refused by both, the folder kept.
				var file bytes.Buffer
				tw := tar.NewWriter(&file)
				tw.WriteHeader(&tar.Header{Name: "pkg", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
				tw.Write([]byte("x"))
				tw.Close()
				merr := muxPut(ctx, sb, "/opt/mux/in", file.Bytes(), c.plugin)
				eerr := sb.copyTo(ctx, "/opt/engine/in", file.Bytes(), c.plugin)
				if merr == nil || eerr == nil {
					t.Errorf("a file over a folder: through the mux %v, through the engine %v; want both refused", merr, eerr)
				}
				mustRun(t, sb, "test -d /opt/mux/in/pkg && test -d /opt/engine/in/pkg")
			}
			if mux != engine {
				t.Errorf("through the mux:\n%s\nthrough the engine:\n%s", mux, engine)
			}
			if !strings.Contains(mux, c.wantOwnerIn+"\n") {
				t.Errorf("owner: want a line %q in\n%s", c.wantOwnerIn, mux)
			}
			// The folders it had to make belong to the owner too.
			r, _ := sb.Exec(ctx, "stat -c %u:%g /opt/mux/in", sandbox.ExecOptions{})
			if want, _, _ := strings.Cut(c.wantOwnerIn, " "); strings.TrimSpace(r.Stdout) != want {
				t.Errorf("/opt/mux/in owned by %q, want %q", r.Stdout, want)
			}
		})
	}
	// An unsafe archive is refused before anything is written.
	sb := start(t, b, sandbox.Spec{Workdir: "/tmp"})
	var bad bytes.Buffer
	tw = tar.NewWriter(&bad)
	tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	if err := muxPut(ctx, sb, "/opt/bad", bad.Bytes(), true); !errors.Is(err, sandbox.ErrUnsafeArchive) {
		t.Fatalf("unsafe archive: %v", err)
	}
}

// muxPut extracts an archive with the warden through the mux, from the
// plugin's side or the agent's.
func muxPut(ctx context.Context, sb *Sandbox, dir string, data []byte, plugin bool) error {
	v := sb.view
	if !plugin {
		v = sb.agent.view
	}
	done, err := v.putAsRoot(ctx, dir, data)
	if !done {
		return errors.New("the warden did not run")
	}
	return err
}

// TestArchiveFallback: where the warden cannot do the host's root file
// operations (a warden bound in that cannot run), the
// backend says so once and uses the engine's archive API from then on.
func TestArchiveFallback(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	if b.archiveFallback(sandbox.ExecResult{ExitCode: 1}) || b.archiveOnly.Load() {
		t.Fatal("a plain failure turned the warden's file operations off")
	}
	if !b.archiveFallback(sandbox.ExecResult{ExitCode: 126}) || !b.archiveOnly.Load() {
		t.Fatal("a warden that cannot run left them on")
	}
	run := "fallback-" + time.Now().Format("150405.000000")
	t0 := time.Now()
	sb := start(t, b, sandbox.Spec{Workdir: "/tmp", Private: sandboxtest.Private, Labels: map[string]string{sandbox.LabelRun: run}})
	if err := sb.WriteFile(ctx, "/opt/x/hello", []byte("hi"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got, _, err := sb.ReadFile(ctx, "/opt/x/hello", 0); err != nil || string(got) != "hi" {
		t.Fatalf("read back %q, %v", got, err)
	}
	// Links are followed in the container's own view, by the engine: a
	// chain of them to the file, and none into a private folder.
	if err := sb.WriteFile(ctx, "/logs/verifier/secret", []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, sb.Agent(), "ln -s hello /opt/x/l1 && ln -s /opt/x/l1 /opt/x/l2 && ln -s /logs/verifier/secret /opt/x/answer && mkdir -p /opt/y && ln -s /opt/x /opt/y/x && ln -s ../z /opt/x/up && printf hi > /opt/z && printf wrong > /opt/y/z")
	for _, p := range []string{"/opt/x/l2", "/opt/y/x/up"} { // a relative link under a linked folder
		if got, _, err := sb.ReadFile(ctx, p, 0); err != nil || string(got) != "hi" {
			t.Errorf("read %s through links: %q, %v", p, got, err)
		}
	}
	if got, _, err := sb.ReadFile(ctx, "/opt/x/answer", 0); string(got) == "s3cret" {
		t.Errorf("a link led the read into the private folder: %q, %v", got, err)
	}
	if actions := containerActions(t, b, run, t0); !slices.Contains(actions, string(events.ActionExtractToDir)) {
		t.Errorf("the write did not go through the engine's archive API: %v", actions)
	}
}

// mustRun runs a command that must exit 0.
func mustRun(t *testing.T, sb sandbox.Sandbox, cmd string) sandbox.ExecResult {
	t.Helper()
	r, err := sb.Exec(context.Background(), cmd, sandbox.ExecOptions{})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("%s: %+v %v", cmd, r, err)
	}
	return r
}

// TestPrivateFolderUnderLink: a private folder whose path holds a link (an
// image with /logs a link to another folder) is refused at the start, with
// the folder and the link named: the agent could point the link elsewhere
// while the tests run, and the verifier would follow it.
func TestPrivateFolderUnderLink(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	tag, err := b.buildOnce(ctx, sandbox.Spec{BuildContext: buildContext(t, "FROM "+sandboxtest.BaseImage()+"\nRUN mkdir -p /var/tlogs && ln -s /var/tlogs /logs\n")})
	if err != nil {
		t.Fatal(err)
	}
	removeBuilt(t, tag)
	sb, err := b.Start(ctx, sandbox.Spec{Image: tag, Private: sandboxtest.Private, Labels: map[string]string{sandbox.LabelRun: "test-TestPrivateFolderUnderLink"}})
	if err == nil {
		sb.Close(ctx)
		t.Fatal("a sandbox started with a link on the path of a private folder")
	}
	if !strings.Contains(err.Error(), "private folder /logs/verifier: /logs is not a folder but a link") {
		t.Errorf("the error: %v", err)
	}
}

// TestReadOnlyDir: a folder given to the backend is in every container,
// the agent's view included, and nothing in the sandbox can write to it.
func TestReadOnlyDir(t *testing.T) {
	sandboxtest.RequireDocker(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := New(WithReadOnlyDir(dir, "/.proctor-tools"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sb := start(t, b, sandbox.Spec{Workdir: "/app"})
	r, err := sb.Agent().Exec(context.Background(), "/.proctor-tools/tool; echo x > /.proctor-tools/tool; echo rc=$?", sandbox.ExecOptions{})
	if err != nil || !strings.Contains(r.Stdout, "tool ran") || !strings.Contains(r.Stdout, "rc=1") {
		t.Fatalf("%+v %v", r, err)
	}
}
