package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Caps{}, func(t *testing.T) sandbox.Sandbox {
		sb, err := Backend{}.Start(context.Background(), sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	})
}

// The backend's contract (sandboxtest.RunBackend). Its run ids share
// more than the folders' names keep of them: before the folder held the
// whole id, a prune of one run removed the other's sandboxes too.
func TestBackendContract(t *testing.T) {
	sandboxtest.RunBackend(t, Backend{}, sandbox.Spec{})
}

func TestWorkdirAndRelativePaths(t *testing.T) {
	ctx := context.Background()
	for _, wd := range []string{"", "/app", "proj/sub", "../../escape"} {
		sb, err := Backend{}.Start(ctx, sandbox.Spec{Workdir: wd})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(ctx)
		root := sb.(*Sandbox).Root()
		r, err := sb.Exec(ctx, "pwd", sandbox.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.Stdout, root+"/work") {
			t.Errorf("workdir %q: shell starts in %q, outside %s/work", wd, r.Stdout, root)
		}
		if err := sb.WriteFile(ctx, "f.txt", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if r, _ := sb.Exec(ctx, "cat f.txt", sandbox.ExecOptions{}); r.Stdout != "x" {
			t.Errorf("workdir %q: relative WriteFile not where the shell starts: %+v", wd, r)
		}
	}
}

func TestConformanceProcessGroups(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Caps{}, func(t *testing.T) sandbox.Sandbox {
		sb, err := Backend{ProcessGroups: true}.Start(context.Background(), sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	})
}

// pids runs cmd, which prints the ids of processes that live on, and
// returns those processes.
func pids(t *testing.T, sb sandbox.Sandbox, cmd string) []proc {
	t.Helper()
	r, err := sb.Exec(context.Background(), cmd, sandbox.ExecOptions{})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("%s: %+v %v", cmd, r, err)
	}
	return started(t, strings.Fields(r.Stdout)...)
}

// started names the live processes pids by id and start time, which a
// later process with a reused id does not share.
func started(t *testing.T, pids ...string) []proc {
	t.Helper()
	var out []proc
	for _, s := range pids {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("not a process id: %q", s)
		}
		st, err := readStat(pid)
		if err != nil {
			t.Fatalf("process %d: %v", pid, err)
		}
		out = append(out, st.proc)
	}
	return out
}

// alive says whether p still runs: neither gone nor a zombie.
func alive(p proc) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return "", false
	}
	st, err := readStat(p.pid)
	return string(b), err == nil && st.start == p.start && !st.dead()
}

// assertEnded fails for each process of procs still alive: a prune, and
// a Close with a cgroup, return once their processes have ended.
func assertEnded(t *testing.T, procs []proc) {
	t.Helper()
	for _, p := range procs {
		if stat, ok := alive(p); ok {
			t.Errorf("process %d survived: %s", p.pid, stat)
			signal(p, syscall.SIGKILL)
		}
	}
}

// awaitGone waits until every process of procs has ended: a Close
// without a cgroup kills process groups and returns while they die.
func awaitGone(t *testing.T, procs []proc) {
	t.Helper()
	for _, p := range procs {
		poll.Until(t, fmt.Sprintf("process %d to end", p.pid), func() bool {
			_, ok := alive(p)
			return !ok
		})
	}
}

// requireCgroups skips where this process cannot make cgroups; proctor's
// test machines can (root, a cgroup2 mount).
func requireCgroups(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	if sb.(*Sandbox).cg == nil {
		t.Skip("no writable cgroup2 here: the sandbox tracks process groups")
	}
}

// In its cgroup, Close finds what left the command's group (setsid), and
// what dropped the environment marker the old /proc scan looked for.
func TestCloseKillsEveryProcess(t *testing.T) {
	ctx := context.Background()
	sb, err := Backend{}.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	requireCgroups(t, sb)
	left := pids(t, sb, `sleep 321 & a=$!
setsid sleep 322 </dev/null >/dev/null 2>&1 & b=$!
env -i setsid sleep 323 </dev/null >/dev/null 2>&1 & c=$!
echo $a $b $c`)
	dir := sb.(*Sandbox).cg.dir
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	assertEnded(t, left)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left: %v", dir, err)
	}
	if _, err := os.Stat(sb.(*Sandbox).Root()); !os.IsNotExist(err) {
		t.Fatalf("sandbox folder left: %v", err)
	}
}

// Without a cgroup, Close kills the process groups of the shell and of
// its commands: also a group whose command ended and left a child behind
// without the environment marker, which the old /proc scan missed.
func TestCloseKillsProcessGroups(t *testing.T) {
	ctx := context.Background()
	sb, err := Backend{ProcessGroups: true}.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.(*Sandbox).cg != nil {
		t.Fatal("a cgroup although ProcessGroups is set")
	}
	left := pids(t, sb, "sleep 331 </dev/null >/dev/null 2>&1 & echo $!")
	left = append(left, pids(t, sb, "env -i sleep 332 </dev/null >/dev/null 2>&1 & echo $!")...)
	left = append(left, pids(t, sb, "echo $$")...) // the controller
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, left)
}

// A local sandbox inherits none of proctor's environment: the model's API
// key in it reached the agent's `env`, the transcript and the report.
func TestMinimalEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-secret-never-in-a-sandbox")
	ctx := context.Background()
	sb, err := Backend{}.Start(ctx, sandbox.Spec{Env: map[string]string{"TASK_VAR": "given"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	r, err := sb.Exec(ctx, "env", sandbox.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Stdout, "sk-secret") || strings.Contains(r.Stdout, "OPENAI_API_KEY") {
		t.Errorf("the sandbox sees proctor's environment:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "TASK_VAR=given") || !strings.Contains(r.Stdout, "PATH=") {
		t.Errorf("the sandbox lacks its own environment:\n%s", r.Stdout)
	}
}

// What the local backend cannot do safely, it refuses with a reason: it
// once ran Terminal-Bench's `rm -rf /logs/verifier /tests` on the host.
func TestRefusesWhatItCannotContain(t *testing.T) {
	ctx := context.Background()
	for name, spec := range map[string]sandbox.Spec{
		"image":   {Image: "proctor-base:bookworm"},
		"build":   {BuildContext: []byte("FROM x")},
		"private": {Private: []string{"/tests"}},
	} {
		if sb, err := (Backend{}).Start(ctx, spec); err == nil {
			sb.Close(ctx)
			t.Errorf("%s: started", name)
		} else if !strings.Contains(err.Error(), "docker") {
			t.Errorf("%s: the error does not say what to use: %v", name, err)
		}
	}
	sb, err := Backend{}.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	outside := t.TempDir() + "/host-file"
	if err := sb.WriteFile(ctx, outside, []byte("x"), 0o644); err == nil {
		t.Errorf("wrote %s on the host", outside)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("%s exists", outside)
	}
	if _, _, err := sb.ReadFile(ctx, "/etc/hostname", 0); err == nil {
		t.Error("read /etc/hostname of the host")
	}
	root := sb.(*Sandbox).Root()
	if err := sb.WriteFile(ctx, root+"/work/inside.txt", []byte("ok"), 0o644); err != nil {
		t.Errorf("an absolute path inside the sandbox: %v", err)
	}
}

// runLabel is a run id no other test process uses: a prune of a run ends
// every sandbox of that run on the host, also another test's.
func runLabel(t *testing.T) string {
	return fmt.Sprintf("prune-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
}

// eachBackend runs f with a sandbox of a run of its own, with a cgroup
// where this process can make one and with process groups.
func eachBackend(t *testing.T, f func(t *testing.T, sb *Sandbox, run string)) {
	for _, b := range []Backend{{}, {ProcessGroups: true}} {
		t.Run(fmt.Sprintf("ProcessGroups=%v", b.ProcessGroups), func(t *testing.T) {
			run := runLabel(t)
			sb, err := b.Start(context.Background(), sandbox.Spec{Labels: map[string]string{sandbox.LabelRun: run}})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close(context.Background())
			f(t, sb.(*Sandbox), run)
		})
	}
}

// prune prunes run as a resume does after a SIGKILL of proctor: nothing
// closed the sandbox. It must remove the one sandbox of the run.
func prune(t *testing.T, sb *Sandbox, run string) {
	t.Helper()
	n, err := Backend{}.Prune(context.Background(), run)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	if _, err := os.Stat(sb.Root()); err == nil {
		t.Errorf("%s survived the prune", sb.Root())
	}
}

// After a SIGKILL of proctor, a resume prunes the run's folders and every
// process started in them, also those that left their group, and their
// cgroups. The prune returns once they have ended.
func TestPruneLeftovers(t *testing.T) {
	eachBackend(t, func(t *testing.T, sb *Sandbox, run string) {
		left := pids(t, sb, "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!")
		var cg string
		if c := sb.cg; c != nil {
			cg = c.dir
			// Only the cgroup knows this one.
			left = append(left, pids(t, sb, "env -i setsid sleep 301 >/dev/null 2>&1 < /dev/null & echo $!")...)
		}
		prune(t, sb, run)
		assertEnded(t, left)
		if cg != "" {
			if _, err := os.Stat(cg); !os.IsNotExist(err) {
				t.Errorf("cgroup %s survived the prune: %v", cg, err)
			}
		}
	})
}

// A process's environment reads empty while it execs: from when its new
// image replaces the old one until the kernel has laid out the new
// environment (longer with many variables), and for a reader that opened
// the file before the exec. A prune that read /proc once missed such a
// process of the run (`setsid sleep` between its two execs, on a busy
// machine), and it ran on. These exec without end; without a cgroup only
// the prune's reading of /proc finds them. A prune that reads each once
// misses one in a few runs of this test, more on a busy machine.
func TestPruneEndsProcessesInExec(t *testing.T) {
	run := runLabel(t)
	sb, err := Backend{ProcessGroups: true}.Start(context.Background(), sandbox.Spec{Labels: map[string]string{sandbox.LabelRun: run}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	// Outside the sandbox's folder, which the prune removes: a loop that
	// lost its script would end by itself.
	loop := filepath.Join(t.TempDir(), "loop.sh")
	if err := os.WriteFile(loop, []byte(`exec /bin/sh "$0"`), 0o755); err != nil {
		t.Fatal(err)
	}
	left := pids(t, sb, `vars=$(printf 'V%d=x ' $(seq 4000))
for i in $(seq 24); do env $vars setsid /bin/sh `+loop+` </dev/null >/dev/null 2>&1 & echo $!; done`)
	prune(t, sb.(*Sandbox), run)
	assertEnded(t, left)
}

// A process that drops the marker (env -i) is still the sandbox's while
// its parent is: a prune stops the parent first, so that what it starts
// meanwhile keeps it as its parent, and ends them all. This one starts
// such children until it is stopped.
func TestPruneEndsChildrenWithoutMarker(t *testing.T) {
	eachBackend(t, func(t *testing.T, sb *Sandbox, run string) {
		tag := "PROCTOR_TEST_CHILD=" + run
		forker := `while :; do env -i ` + tag + ` sleep 309 </dev/null >/dev/null 2>&1 & sleep 0.01; done`
		left := pids(t, sb, "setsid bash -c "+shell.Quote(forker)+" </dev/null >/dev/null 2>&1 & echo $!")
		poll.Until(t, "a child without the marker", func() bool { return len(tagged(tag)) > 0 })
		prune(t, sb, run)
		assertEnded(t, left)
		if kids := tagged(tag); len(kids) > 0 {
			t.Errorf("children %v of the sandbox's process survived the prune", kids)
			for _, pid := range kids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// tagged lists the live processes whose environment holds tag.
func tagged(tag string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains("\x00"+string(env), "\x00"+tag+"\x00") {
			continue
		}
		if st, err := readStat(pid); err == nil && !st.dead() {
			out = append(out, pid)
		}
	}
	return out
}

// The file naming a sandbox's cgroup is in reach of the sandbox: a prune
// kills only a cgroup named as the sandbox's folder, never one the file
// was pointed at.
func TestPruneIgnoresForgedCgroup(t *testing.T) {
	ctx := context.Background()
	run := runLabel(t)
	sb, err := Backend{}.Start(ctx, sandbox.Spec{Labels: map[string]string{sandbox.LabelRun: run}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	requireCgroups(t, sb)
	victim, err := newCgroup(cgroupParent(), "proctor-test-victim-"+strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer victim.remove(ctx)
	cmd := exec.Command("sleep", "302")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(victim.fd.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	root := sb.(*Sandbox).Root()
	if _, err := sb.Exec(ctx, "printf %s "+shell.Quote(victim.dir)+" > "+shell.Quote(root+"/"+cgroupFile), sandbox.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (Backend{}).Prune(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the prune killed a process of a cgroup the sandbox named: %v", err)
	}
	if _, err := os.Stat(victim.dir); err != nil {
		t.Fatalf("the prune removed %s: %v", victim.dir, err)
	}
}

// Before Linux 5.14 there is no cgroup.kill: the cgroup is frozen and each
// process killed, the children a process forks included.
func TestKillEach(t *testing.T) {
	parent := cgroupParent()
	if parent == "" {
		t.Skip("no writable cgroup2 here")
	}
	cg, err := newCgroup(parent, "proctor-test-killeach-"+strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer cg.remove(context.Background())
	cmd := exec.Command("bash", "-c", "sleep 341 & sleep 342 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.fd.Fd())}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child string
	if _, err := fmt.Fscan(out, &child); err != nil {
		t.Fatal(err)
	}
	procs := started(t, child, strconv.Itoa(cmd.Process.Pid))
	if err := killEach(cg.dir); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	assertEnded(t, procs) // killEach returns once none is listed
	if err := awaitEmpty(context.Background(), cg.dir); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCloseAmong: starting, using and closing one sandbox while
// others live, as at many rollouts in flight. The cost of a Close must not
// grow with the processes on the host.
func BenchmarkCloseAmong(b *testing.B) {
	for _, others := range []int{0, 200} {
		for _, be := range []Backend{{}, {ProcessGroups: true}} {
			b.Run(fmt.Sprintf("others=%d/ProcessGroups=%v", others, be.ProcessGroups), func(b *testing.B) {
				ctx := context.Background()
				for range others {
					sb, err := be.Start(ctx, sandbox.Spec{})
					if err != nil {
						b.Fatal(err)
					}
					defer sb.Close(ctx)
				}
				var closing time.Duration
				for b.Loop() {
					sb, err := be.Start(ctx, sandbox.Spec{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := sb.Exec(ctx, "sleep 60 & true", sandbox.ExecOptions{}); err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if err := sb.Close(ctx); err != nil {
						b.Fatal(err)
					}
					closing += time.Since(t0)
				}
				b.ReportMetric(float64(closing.Microseconds())/1e3/float64(b.N), "close-ms")
			})
		}
	}
}

// Other processes of the host that exec without end (another run's, a
// build) are met in an exec now and then: a prune that has once read one
// outside an exec, without the marker, is not held up by it, and ends
// without an error. These loop until the test ends them.
func TestPruneEndsBesideOthersExecs(t *testing.T) {
	dir := t.TempDir()
	loop := dir + "/loop.sh"
	if err := os.WriteFile(loop, []byte(`exec /bin/sh "$0"`), 0o755); err != nil {
		t.Fatal(err)
	}
	env := os.Environ()
	for i := range 4000 {
		env = append(env, fmt.Sprintf("V%d=x", i))
	}
	for range 6 {
		cmd := exec.Command("/bin/sh", loop)
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	eachBackend(t, func(t *testing.T, sb *Sandbox, run string) {
		left := pids(t, sb, "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!")
		prune(t, sb, run)
		assertEnded(t, left)
	})
}
