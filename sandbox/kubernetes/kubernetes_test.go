package kubernetes

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/host/plugin/oci/ocitest"
	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// newBackend connects to the cluster KUBECONFIG names (the local one:
// `make k8s-up`), skipping without one unless PROCTOR_REQUIRE_KUBERNETES=1.
func newBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	if cfg.RequestFraction == 0 {
		// Requests of a hundredth of the limits: the local cluster has
		// two CPUs, and the tests hold several sandboxes at once.
		cfg.RequestFraction = 0.01
	}
	b, err := New(cfg)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = b.Ping(ctx)
		cancel()
	}
	sandboxtest.RequireKubernetes(t, err)
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

func exec(t testing.TB, sb sandbox.Sandbox, cmd string) sandbox.ExecResult {
	t.Helper()
	r, err := sb.Exec(context.Background(), cmd, sandbox.ExecOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return r
}

func TestConformance(t *testing.T) {
	b := newBackend(t, Config{})
	sandboxtest.Run(t, sandboxtest.Caps{Isolated: true}, func(t *testing.T) sandbox.Sandbox {
		return start(t, b, sandbox.Spec{Workdir: "/work"})
	})
}

func TestConformanceAgentView(t *testing.T) {
	b := newBackend(t, Config{})
	sandboxtest.Run(t, sandboxtest.Caps{Isolated: true}, func(t *testing.T) sandbox.Sandbox {
		return start(t, b, sandbox.Spec{Workdir: "/work"}).Agent()
	})
}

// The backend's contract (sandboxtest.RunBackend), with isolation and
// without.
func TestBackendContract(t *testing.T) {
	sandboxtest.RunBackend(t, newBackend(t, Config{}), sandbox.Spec{Image: sandboxtest.BaseImage()})
	t.Run("WithoutIsolation", func(t *testing.T) {
		sandboxtest.RunBackend(t, newBackend(t, Config{NoIsolation: true}), sandbox.Spec{Image: sandboxtest.BaseImage()})
	})
}

// Without isolation one shell serves the plugin and the agent, and the pod
// holds no CAP_SYS_ADMIN: for clusters that allow only Pod Security
// "baseline".
func TestConformanceWithoutIsolation(t *testing.T) {
	b := newBackend(t, Config{NoIsolation: true})
	sandboxtest.Run(t, sandboxtest.Caps{Isolated: true}, func(t *testing.T) sandbox.Sandbox {
		return start(t, b, sandbox.Spec{Workdir: "/work"})
	})
	sb := start(t, b, sandbox.Spec{})
	if sb.Agent() != sandbox.Sandbox(sb) {
		t.Error("a sandbox without isolation has an agent's view of its own")
	}
	if r := exec(t, sb, "grep CapBnd /proc/self/status"); !strings.Contains(r.Stdout, "CapBnd:\t00000000080405fb") {
		t.Errorf("capabilities of a pod without isolation: %q", r.Stdout)
	}
	for _, spec := range []sandbox.Spec{{Private: sandboxtest.Private}, {AgentUser: "nobody"}} {
		spec.Image = sandboxtest.BaseImage()
		if _, err := b.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "isolation = true") {
			t.Errorf("%+v: want a refusal naming [sandbox] isolation, got %v", spec, err)
		}
	}
}

func TestIsolation(t *testing.T) {
	b := newBackend(t, Config{})
	sandboxtest.RunIsolated(t, func(t *testing.T, pids int64) sandbox.Isolated {
		return start(t, b, sandbox.Spec{Workdir: "/app", PidsMax: pids, Private: sandboxtest.Private})
	})
}

// The users of an isolated sandbox (sandboxtest.RunUsers): Seal as a user
// that may not mount (a separate exec of the warden as root empties the
// private folders in the plugin's namespace), the agent's user apart from
// the plugin's.
func TestUsers(t *testing.T) {
	b := newBackend(t, Config{})
	sandboxtest.RunUsers(t, func(t *testing.T, spec sandbox.Spec) sandbox.Isolated {
		return start(t, b, spec)
	})
}

// What the agent writes is held to the sandbox's disk limit: the pod's
// ephemeral-storage limit, for which the kubelet evicts it. That is the
// agent's outcome (ErrLimit), for its next call and for Seal, never a
// failure of the cluster.
func TestDiskLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the kubelet's eviction (every 10 s)")
	}
	b := newBackend(t, Config{})
	ctx := context.Background()
	sb := start(t, b, sandbox.Spec{DiskMB: 64, Private: sandboxtest.Private})
	agent := sb.Agent()
	r, err := agent.Exec(ctx, "dd if=/dev/zero of=/fill bs=1M count=200 status=none; echo wrote", sandbox.ExecOptions{Timeout: time.Minute})
	if err == nil {
		poll.Until(t, "the disk limit to stop the agent", func() bool {
			r, err = agent.Exec(ctx, "true", sandbox.ExecOptions{})
			return err != nil
		})
	}
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("the agent went on past its disk limit: %+v, %v", r, err)
	}
	if _, err := sb.Seal(ctx); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("seal after the limit: %v", err)
	}
	if _, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("the plugin's call after the limit: %v", err)
	}
}

// The SPDY fallback carries the shell and the file streams as WebSocket
// does.
func TestSPDY(t *testing.T) {
	b := newBackend(t, Config{Protocol: ProtocolSPDY})
	sb := start(t, b, sandbox.Spec{Workdir: "/work"})
	exec(t, sb, "cd /tmp && export X=spdy")
	if r := exec(t, sb, `echo "$PWD $X"; echo err >&2; exit 3`); r.Stdout != "/tmp spdy\n" || r.Stderr != "err\n" || r.ExitCode != 3 {
		t.Errorf("got %+v", r)
	}
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "a/b.txt", []byte("over spdy"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err := sb.ReadFile(ctx, "a/b.txt", 0); err != nil || string(got) != "over spdy" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

func TestSecureDefaults(t *testing.T) {
	b := newBackend(t, Config{})
	sb := start(t, b, sandbox.Spec{})
	r := exec(t, sb, "ls /sys/class/net; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; ls /var/run/secrets/kubernetes.io 2>&1; env")
	out := r.Stdout
	if strings.Contains(out, "eth0") || !strings.Contains(out, "lo") {
		t.Errorf("network is not none: %s", out)
	}
	if !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Errorf("no-new-privileges not set: %s", out)
	}
	if !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("no seccomp filter: %s", out)
	}
	if strings.Contains(out, "CapEff:\t000001ffffffffff") || strings.Contains(out, "CapEff:\t0000003fffffffff") {
		t.Errorf("full capability set: %s", out)
	}
	if !strings.Contains(out, "No such file") {
		t.Errorf("a service account token is mounted: %s", out)
	}
	if strings.Contains(out, "KUBERNETES_SERVICE") {
		t.Errorf("service environment variables reached the sandbox: %s", out)
	}
	// Root can still install and chown as tasks expect.
	r = exec(t, sb, "useradd -m tester && chown tester /tmp && su tester -c 'id -un'")
	if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "tester" {
		t.Errorf("root lost a capability tasks need: %+v", r)
	}

	p, err := b.cs.CoreV1().Pods(b.ns).Get(context.Background(), sb.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Spec
	c := spec.Containers[0]
	switch {
	case spec.HostNetwork || spec.HostPID || spec.HostIPC:
		t.Error("a host namespace is shared")
	case spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken:
		t.Error("automountServiceAccountToken is not false")
	case spec.ActiveDeadlineSeconds == nil || *spec.ActiveDeadlineSeconds <= 0:
		t.Error("no activeDeadlineSeconds backstop")
	case c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation:
		t.Error("privilege escalation allowed")
	case c.Resources.Limits.Cpu().MilliValue() != 1000 || c.Resources.Limits.Memory().Value() != 2048<<20 || c.Resources.Requests.Cpu().MilliValue() != 10:
		t.Errorf("default limits: %v", c.Resources.Limits)
	case p.Labels[sandbox.LabelManaged] != "true" || p.Labels[LabelNetwork] != "none":
		t.Errorf("labels: %v", p.Labels)
	}
}

func TestResourcesAndEnv(t *testing.T) {
	b := newBackend(t, Config{RequestFraction: 0.5})
	sb := start(t, b, sandbox.Spec{CPUs: 0.5, MemoryMB: 300, Env: map[string]string{"TASK_VAR": "a b 'c'"}})
	r := exec(t, sb, `printf '%s\n' "$TASK_VAR"; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes`)
	if want := fmt.Sprintf("a b 'c'\n%d\n", 300<<20); r.Stdout != want {
		t.Errorf("got %q, want %q", r.Stdout, want)
	}
	p, err := b.cs.CoreV1().Pods(b.ns).Get(context.Background(), sb.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Spec.Containers[0].Resources
	if res.Limits.Cpu().MilliValue() != 500 || res.Requests.Cpu().MilliValue() != 250 || res.Requests.Memory().Value() != 150<<20 {
		t.Errorf("resources: %+v", res)
	}
}

// Orphans that commands leave behind are reaped, as under the docker
// backend's init: zombies would fill the process table.
func TestOrphansReaped(t *testing.T) {
	b := newBackend(t, Config{})
	sb := start(t, b, sandbox.Spec{})
	exec(t, sb, "for i in 1 2 3 4 5; do (sleep 0.2 &) ; done")
	// Until the orphans have ended and init has reaped them: a busy node
	// does either late, never not at all.
	poll.Until(t, "the orphans reaped", func() bool {
		r := exec(t, sb, "ps -eo stat,args | grep -c -e '^Z' -e 'sleep 0.2$' || true")
		return strings.TrimSpace(r.Stdout) == "0"
	})
}

// A process in the sandbox cannot end its pod by signalling PID 1.
func TestPID1IgnoresSignals(t *testing.T) {
	b := newBackend(t, Config{})
	sb := start(t, b, sandbox.Spec{})
	exec(t, sb, "for s in TERM INT HUP QUIT USR1 USR2; do kill -s $s 1; done; sleep 1")
	if r := exec(t, sb, "echo alive; ps -o pid= -p 1"); !strings.HasPrefix(r.Stdout, "alive\n") || strings.TrimSpace(strings.TrimPrefix(r.Stdout, "alive\n")) != "1" {
		t.Fatalf("after signals to PID 1: %+v", r)
	}
	start := time.Now()
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cs.CoreV1().Pods(b.ns).Get(context.Background(), sb.Name(), metav1.GetOptions{}); err == nil {
		t.Errorf("pod still there %s after Close", time.Since(start))
	}
}

func TestImagePullFailure(t *testing.T) {
	b := newBackend(t, Config{})
	// A registry on loopback that does not answer: the pull fails fast
	// without leaving the machine.
	_, err := b.Start(context.Background(), sandbox.Spec{Image: "127.0.0.1:9/proctor-no-such-image:1",
		Labels: map[string]string{sandbox.LabelRun: "test-pull-failure"}})
	var ie *sandbox.ImageError
	if !errors.As(err, &ie) || !errors.Is(err, sandbox.ErrImage) || !strings.Contains(err.Error(), "ErrImagePull") && !strings.Contains(err.Error(), "ImagePullBackOff") {
		t.Fatalf("want an ImageError with the kubelet's reason, got %v", err)
	}
	if n, _ := b.Prune(context.Background(), "test-pull-failure"); n != 0 {
		t.Errorf("the failed pod was left behind (%d pruned)", n)
	}
}

func TestUnschedulable(t *testing.T) {
	b := newBackend(t, Config{NodeSelector: map[string]string{"proctor.test/no-such-node": "x"}, ScheduleTimeout: time.Second})
	_, err := b.Start(context.Background(), sandbox.Spec{Image: sandboxtest.BaseImage(),
		Labels: map[string]string{sandbox.LabelRun: "test-unschedulable"}})
	if err == nil || !strings.Contains(err.Error(), "unschedulable") || !strings.Contains(err.Error(), "node") {
		t.Fatalf("want the scheduler's message, got %v", err)
	}
	if n, _ := b.Prune(context.Background(), "test-unschedulable"); n != 0 {
		t.Errorf("the unschedulable pod was left behind (%d pruned)", n)
	}
}

func TestPodDeletedMidExec(t *testing.T) {
	b := newBackend(t, Config{})
	sb := start(t, b, sandbox.Spec{})
	time.AfterFunc(500*time.Millisecond, func() { b.deletePod(context.Background(), sb.Name()) })
	_, err := sb.Exec(context.Background(), "sleep 60", sandbox.ExecOptions{})
	if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), sb.Name()) {
		t.Fatalf("want ErrGone naming the pod, got %v", err)
	}
	if _, err := sb.Exec(context.Background(), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("after the delete: want ErrGone, got %v", err)
	}
}

// An eviction (node pressure, a drain) ends the sandbox with an error
// that says so.
func TestEvicted(t *testing.T) {
	// Proctor's own Role may not evict: the cluster's admin does it, as a
	// drain would.
	admin := os.Getenv("PROCTOR_K8S_ADMIN_KUBECONFIG")
	if admin == "" {
		sandboxtest.RequireKubernetes(t, errors.New("PROCTOR_K8S_ADMIN_KUBECONFIG names no admin kubeconfig to evict with"))
	}
	b := newBackend(t, Config{})
	ab := newBackend(t, Config{Kubeconfig: admin, Namespace: b.ns})
	sb := start(t, b, sandbox.Spec{})
	err := ab.cs.CoreV1().Pods(b.ns).EvictV1(context.Background(), &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: sb.Name(), Namespace: b.ns},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb.Exec(context.Background(), "sleep 60", sandbox.ExecOptions{Timeout: 2 * time.Minute})
	if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), sb.Name()) {
		t.Fatalf("want ErrGone naming the pod, got %v", err)
	}
	t.Log(err)
}

func TestOOMKilled(t *testing.T) {
	b := newBackend(t, Config{})
	sb := start(t, b, sandbox.Spec{MemoryMB: 64})
	r, err := sb.Exec(context.Background(), "python3 -c 'x = bytearray(512 << 20); print(len(x))'", sandbox.ExecOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OOMKilled || r.TimedOut || r.ExitCode == 0 {
		t.Fatalf("want OOMKilled, got %+v", r)
	}
	if r := exec(t, sb, "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("shell died with the OOM-killed command: %+v", r)
	}
}

func TestPrune(t *testing.T) {
	b := newBackend(t, Config{})
	// A run id that is not a valid label value still finds its pods.
	run := "prune/" + time.Now().Format("150405.000000") + strings.Repeat("x", 70)
	for range 2 {
		if _, err := b.Start(context.Background(), sandbox.Spec{Image: sandboxtest.BaseImage(), Labels: map[string]string{sandbox.LabelRun: run}}); err != nil {
			t.Fatal(err)
		}
		// left running, as a killed run would
	}
	other := start(t, b, sandbox.Spec{})
	n, err := b.Prune(context.Background(), run)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	if n, _ := b.Prune(context.Background(), run); n != 0 {
		t.Fatalf("second prune found %d", n)
	}
	if r := exec(t, other, "echo still"); r.Stdout != "still\n" {
		t.Fatalf("prune of one run touched another's sandbox: %+v", r)
	}
}

// A user that may not create a folder still gets WriteFile to work, and
// the files belong to it.
func TestFilesAsUnprivilegedUser(t *testing.T) {
	b := newBackend(t, Config{})
	ctx := context.Background()
	for _, user := range []string{"nobody", "4242:4343"} {
		t.Run(strings.ReplaceAll(user, ":", "-"), func(t *testing.T) {
			sb := start(t, b, sandbox.Spec{User: user, Workdir: "/tmp/w"})
			r := exec(t, sb, "id -u; mkdir /opt/denied 2>/dev/null && echo may-write; grep CapEff /proc/self/status")
			if strings.Contains(r.Stdout, "may-write") || strings.HasPrefix(r.Stdout, "0\n") {
				t.Fatalf("the shell runs with root's powers: %q", r.Stdout)
			}
			if !strings.Contains(r.Stdout, "CapEff:\t0000000000000000") {
				t.Errorf("the user's shell has capabilities: %q", r.Stdout)
			}
			if err := sb.WriteFile(ctx, "/opt/made/by/root/f.txt", []byte("hi"), 0o600); err != nil {
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
			r = exec(t, sb, "stat -c '%u:%g' /opt/made/by/root/f.txt up/pkg up/pkg/a | sort -u; id -u; id -g; cat /opt/made/by/root/f.txt")
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			if len(lines) != 4 || lines[0] != lines[1]+":"+lines[2] || lines[3] != "hi" {
				t.Fatalf("ownership and content: %q (stderr %q)", r.Stdout, r.Stderr)
			}
			// Cancelling a call kills the command.
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if _, err := sb.Exec(cctx, "sleep 331", sandbox.ExecOptions{}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want DeadlineExceeded, got %v", err)
			}
			if r := exec(t, sb, "ps -eo args | grep -c '^sleep 331' || true"); strings.TrimSpace(r.Stdout) != "0" {
				t.Fatalf("cancelled command still runs: %q", r.Stdout)
			}
		})
	}
}

func TestUnknownUser(t *testing.T) {
	b := newBackend(t, Config{})
	_, err := b.Start(context.Background(), sandbox.Spec{Image: sandboxtest.BaseImage(), User: "no-such-user",
		Labels: map[string]string{sandbox.LabelRun: "test-unknown-user"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-user") {
		t.Fatalf("want an error naming the user, got %v", err)
	}
	if n, _ := b.Prune(context.Background(), "test-unknown-user"); n != 0 {
		t.Errorf("the pod was left behind (%d pruned)", n)
	}
}

// A task with only a build context is built by the local engine, pushed to
// the registry, and pulled from it by the cluster over plain HTTP.
func TestBuildContextThroughRegistry(t *testing.T) {
	sandboxtest.RequireDocker(t)
	reg := ocitest.Start(t)
	d, err := docker.New()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := newBackend(t, Config{Registry: reg.Addr + "/proctor-test", Builder: d})
	stamp := time.Now().Format(time.RFC3339Nano)
	dockerfile := "FROM " + sandboxtest.BaseImage() + "\nRUN echo " + stamp + " > /stamp\nWORKDIR /srv/app\n"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg})
	tw.Write([]byte(dockerfile))
	tw.Close()
	spec := sandbox.Spec{BuildContext: buf.Bytes()}
	var wg sync.WaitGroup
	out := make([]string, 3)
	for i := range out {
		wg.Go(func() {
			sb := start(t, b, spec)
			out[i] = exec(t, sb, "cat /stamp; pwd").Stdout
			if !strings.HasPrefix(sb.ImageDigest(), reg.Addr) || !strings.Contains(sb.ImageDigest(), "@sha256:") {
				t.Errorf("image id %q is not the pushed image", sb.ImageDigest())
			}
		})
	}
	wg.Wait()
	for _, o := range out {
		if o != stamp+"\n/srv/app\n" {
			t.Fatalf("sandbox saw %q, want the built image's stamp and workdir", out)
		}
	}

	// A named image the cluster cannot pull, with a context: built and
	// pushed instead, as the docker backend builds a missing image.
	sb := start(t, b, sandbox.Spec{Image: "127.0.0.1:9/proctor-missing:1", BuildContext: buf.Bytes()})
	if r := exec(t, sb, "cat /stamp"); r.Stdout != stamp+"\n" || !strings.HasPrefix(sb.ImageDigest(), reg.Addr) {
		t.Fatalf("fallback build: %q from %s", r.Stdout, sb.ImageDigest())
	}

	// Without a registry the error says what to set.
	nb := newBackend(t, Config{Builder: d})
	if _, err := nb.Start(context.Background(), spec); !errors.Is(err, sandbox.ErrImage) || !strings.Contains(err.Error(), "registry") {
		t.Fatalf("want an ImageError about the registry, got %v", err)
	}
}

func TestNoKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", t.TempDir()+"/missing")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := New(Config{})
	if !errors.Is(err, sandbox.ErrEngine) || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Fatalf("want ErrEngine with a hint, got %v", err)
	}
	_, err = New(Config{Kubeconfig: t.TempDir() + "/nope.yaml"})
	if !errors.Is(err, sandbox.ErrEngine) || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("want ErrEngine naming the file, got %v", err)
	}
}

// What `proctor doctor` reports: the permissions the Role grants, the
// deny-all policy, and whether a network-none sandbox reaches anything.
func TestDoctorChecks(t *testing.T) {
	b := newBackend(t, Config{})
	ctx := context.Background()
	missing, err := b.Access(ctx)
	if err != nil || len(missing) != 0 {
		t.Fatalf("missing %v, %v (the local cluster's Role grants them all)", missing, err)
	}
	iso, err := b.CheckNetwork(ctx, sandboxtest.BaseImage())
	if err != nil {
		t.Fatal(err)
	}
	if !iso.Isolated || iso.Interfaces != "lo" {
		t.Fatalf("network none: %+v", iso)
	}
	if _, err := b.cs.NetworkingV1().NetworkPolicies(b.ns).Get(ctx, PolicyName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the deny-all policy was not created: %v", err)
	}
}
