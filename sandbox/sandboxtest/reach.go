package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

// Attacker is a script (python3, as root or not) the suite runs on the
// agent's side: for every thread of every process it can see, it compares
// CapEff, CapPrm, CapBnd, the uids and the gids with its own, and tries
// PTRACE_SEIZE and opening /proc/TID/mem for writing from a child of its
// own, as an agent that wants to write code into a process holding more
// than itself would. It prints "MORE pid tid what" for a thread holding
// what the attacker lacks, "GAIN pid tid how" for a way into a process
// that has such a thread (its threads share one memory), "SAW pid" for
// every process, and "DONE" at the end.
const Attacker = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_SEIZE = 0x4206
CAPS = ("CapEff", "CapPrm", "CapBnd")

def status(path):
    st = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.split()
    return st

me = status("/proc/self/status")
mine = {k: int(me[k][0], 16) for k in CAPS}

def more(st):
    out = [k + "=" + st[k][0] for k in CAPS if int(st[k][0], 16) & ~mine[k]]
    for k in ("Uid", "Gid"):
        if set(st[k]) - set(me[k]):
            out.append(k + "=" + ",".join(st[k]))
    return out

def attempt(tid):
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        got = []
        if libc.ptrace(PTRACE_SEIZE, tid, None, None) == 0:
            got.append("ptrace")
        try:
            os.close(os.open("/proc/%d/mem" % tid, os.O_RDWR))
            got.append("mem")
        except OSError:
            pass
        os.write(w, " ".join(got).encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode()
    os.close(r)
    os.waitpid(child, 0)
    return got

for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    if int(pid) == os.getpid():
        continue
    try:
        tids = sorted(os.listdir("/proc/%s/task" % pid), key=int)
    except OSError:
        continue
    print("SAW", pid, flush=True)
    holds = False
    for tid in tids:
        try:
            m = more(status("/proc/%s/task/%s/status" % (pid, tid)))
        except (OSError, KeyError):
            continue
        if m:
            holds = True
            print("MORE", pid, tid, " ".join(m), flush=True)
    if holds:
        for tid in tids:
            got = attempt(int(tid))
            if got:
                print("GAIN", pid, tid, got, flush=True)
print("DONE", flush=True)
`

// runAttacks is RunIsolated's part that tries, as the agent, to get more
// than the agent has, or to change what the verifier reads (the table of
// attacks in docs/security.md).
func runAttacks(t *testing.T, start func(t *testing.T, pidsMax int64) sandbox.Isolated) {
	ctx := context.Background()
	t.Run("NothingPrivilegedInReach", func(t *testing.T) {
		agent := start(t, 0).Agent()
		CheckNothingPrivileged(t, agent)
		// Every signal the agent may send its namespace's init is
		// ignored: the services the init keeps alive stay up.
		for _, cmd := range []string{`nohup setsid sleep 600 >/dev/null 2>&1 &
for s in $(seq 1 31) $(seq 34 64); do case $s in 9|19) continue ;; esac; kill -$s 1 2>/dev/null; done; true`, "sleep 0.2"} {
			if _, err := agent.Exec(ctx, cmd, sandbox.ExecOptions{Timeout: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		if r, err := agent.Exec(ctx, "pgrep -f '^sleep 600$' >/dev/null && echo alive", sandbox.ExecOptions{}); err != nil || r.Stdout != "alive\n" {
			t.Errorf("signals to the agent's init ended its namespace: %+v %v", r, err)
		}
	})
	t.Run("NoWayInFromVerifier", func(t *testing.T) { CheckNoWayIn(t, start(t, 0)) })
	t.Run("AgentTricks", func(t *testing.T) { CheckAgentTricks(t, start(t, 0).Agent()) })
	t.Run("ImageRunsUnprivileged", func(t *testing.T) { CheckImageRunsUnprivileged(t, start(t, 0)) })
	t.Run("WardenSealed", func(t *testing.T) {
		sb := start(t, 0)
		for _, side := range []sandbox.Sandbox{sb.Agent(), sb} {
			CheckWardenSealed(t, side)
		}
		if _, err := sb.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		CheckWardenSealed(t, sb)
	})
	t.Run("VerifierReadsItsOwn", func(t *testing.T) { checkVerifierReadsItsOwn(t, start) })
}

// CheckNothingPrivileged runs Attacker on the agent's side and fails the
// test for every process there that holds more than the agent's shell, and
// every way into one.
func CheckNothingPrivileged(t *testing.T, agent sandbox.Sandbox) {
	t.Helper()
	for _, line := range attack(t, agent) {
		if strings.HasPrefix(line, "MORE ") || strings.HasPrefix(line, "GAIN ") {
			t.Errorf("in the agent's reach: %s", line)
		}
	}
}

// CheckNoWayIn runs Attacker on side (the plugin's, whose processes are
// the image's programs, which the agent may have replaced) and fails the
// test for every way into a process holding more than side: processes
// that do (the sandbox's first process, the warden's mux) may be seen,
// never traced or written.
func CheckNoWayIn(t *testing.T, side sandbox.Sandbox) {
	t.Helper()
	for _, line := range attack(t, side) {
		if strings.HasPrefix(line, "GAIN ") {
			t.Errorf("a way into a process holding more: %s", line)
		}
	}
}

// attack runs Attacker on side and returns its lines.
func attack(t *testing.T, side sandbox.Sandbox) []string {
	t.Helper()
	r, err := side.Exec(context.Background(), "python3 -c \"$PROCTOR_ATTACKER\"", sandbox.ExecOptions{
		Timeout: 2 * time.Minute, Env: map[string]string{"PROCTOR_ATTACKER": Attacker}, MaxOutput: 1 << 20})
	if err != nil {
		t.Fatalf("the attacker: %v", err)
	}
	if !strings.Contains(r.Stdout, "DONE") || !strings.Contains(r.Stdout, "SAW 1\n") {
		t.Fatalf("the attacker did not finish, or did not see the namespace's init: %+v", r)
	}
	return strings.Split(r.Stdout, "\n")
}

// CheckImageRunsUnprivileged replaces the image's bash, from the agent's
// side, with one that logs the capabilities it runs with, then makes the
// sandbox run it every way it may after the agent's turn: a restart of
// the agent's shell, a plugin's command, a cancelled one, Seal, file
// operations in and out of the private folders, a large upload. No run of
// it may hold CAP_SYS_ADMIN (or anything the sandbox's shells lack): an
// agent that replaced bash would hold it then.
func CheckImageRunsUnprivileged(t *testing.T, sb sandbox.Isolated) {
	t.Helper()
	ctx := context.Background()
	agent := sb.Agent()
	r, err := agent.Exec(ctx, `set -e
cp /usr/bin/bash /usr/bin/bash.real
cat > /usr/bin/bash.wrap <<'EOF'
#!/usr/bin/bash.real
while read -r k v; do [ "$k" = CapEff: ] && echo "$v" >> /tmp/bash-caps.log; done < /proc/self/status
exec -a "$0" /usr/bin/bash.real "$@"
EOF
chmod 755 /usr/bin/bash.wrap; : > /tmp/bash-caps.log; chmod 666 /tmp/bash-caps.log
mv -f /usr/bin/bash.wrap /usr/bin/bash`, sandbox.ExecOptions{Timeout: time.Minute})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("replace bash: %+v %v", r, err)
	}
	agent.Exec(ctx, "kill -9 -1", sandbox.ExecOptions{})
	for _, side := range []sandbox.Sandbox{agent, sb} {
		if r, err := side.Exec(ctx, "bash -c 'echo ran'", sandbox.ExecOptions{Timeout: time.Minute}); err != nil || r.Stdout != "ran\n" {
			t.Fatalf("bash after the agent's: %+v %v", r, err)
		}
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		side.Exec(cctx, "sleep 60", sandbox.ExecOptions{})
		cancel()
		if err := side.WriteFile(ctx, "/opt/image-runs/small", []byte("x"), 0o644); err != nil {
			t.Errorf("write: %v", err)
		}
		if _, _, err := side.ReadFile(ctx, "/opt/image-runs/small", 0); err != nil {
			t.Errorf("read: %v", err)
		}
		big := testsArchive(strings.Repeat("x", 5<<20))
		if err := side.Upload(ctx, "/opt/image-runs/big/new", big); err != nil {
			t.Errorf("large upload: %v", err)
		}
	}
	if _, err := sb.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Upload(ctx, "/tests", testsArchive("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")); err != nil {
		t.Fatal(err)
	}
	if r, err := sb.Exec(ctx, "bash /tests/test.sh; /tests/test.sh", sandbox.ExecOptions{Timeout: time.Minute}); err != nil || r.ExitCode != 0 {
		t.Fatalf("the tests: %+v %v", r, err)
	}
	if _, _, err := sb.ReadFile(ctx, "/logs/verifier/reward.txt", 0); err != nil {
		t.Fatal(err)
	}
	log, _, err := sb.ReadFile(ctx, "/tmp/bash-caps.log", 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(log))
	if len(lines) < 4 {
		t.Fatalf("the replaced bash ran %d times: %q", len(lines), log)
	}
	for _, v := range lines {
		if c, err := strconv.ParseUint(v, 16, 64); err != nil || c&(1<<21) != 0 {
			t.Errorf("the image's bash ran with CapEff %s (CAP_SYS_ADMIN, or not a number)", v)
		}
	}
}

// CheckWardenSealed tries to make the warden's folder writable from side
// (either shell, as root where it runs as root) and fails the test where
// it is not read-only or a remount works. A remount that works is undone
// at once: the folder may be the host's.
func CheckWardenSealed(t *testing.T, side sandbox.Sandbox) {
	t.Helper()
	r, err := side.Exec(context.Background(), `
grep -E '^[0-9]+ [0-9]+ [^ ]+ [^ ]+ /\.proctor ' /proc/self/mountinfo | grep -qv ' ro[, ]' && echo NOT-READ-ONLY
for o in remount,rw remount,bind,rw; do
  if mount -o $o /.proctor 2>/dev/null; then echo "REMOUNTED $o"; mount -o remount,bind,ro /.proctor; fi
done
mount -t tmpfs x /mnt 2>/dev/null && { echo MOUNTED; umount /mnt; }
touch /.proctor/planted 2>/dev/null && echo WRITABLE
b=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status); (( 0x$b & (1 << 21) )) && echo HOLDS-SYS-ADMIN
true`, sandbox.ExecOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"NOT-READ-ONLY", "REMOUNTED", "MOUNTED", "WRITABLE", "HOLDS-SYS-ADMIN"} {
		if strings.Contains(r.Stdout, bad) {
			t.Errorf("the warden's folder from this side: %s (%q %q)", bad, r.Stdout, r.Stderr)
		}
	}
}

// forgers are processes an agent leaves running to change which files
// the verifier reads: they rename or unlink the verifier's folders (a
// mount point in another mount namespace only is detached by that), put
// a FIFO where the verifier writes, or wait for the verifier to start
// (inotify) and swap its folder then. Each forged folder holds
// reward.json {"reward": 1}, which the verifier reads first, and a
// test.sh that writes it.
var forgers = []struct{ name, cmd string }{
	{"RenameLoop", `cat > /tmp/forger.sh <<'EOF'
forge() { mkdir -p "$1" && echo '{"reward": 1}' > "$1/reward.json" && printf '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n' > "$1/test.sh" && chmod +x "$1/test.sh"; }
n=0
while :; do
  n=$((n+1))
  forge /logs/f$n; mv -T /logs/verifier /logs/old$n 2>/dev/null; mv -T /logs/f$n /logs/verifier 2>/dev/null
  forge /t$n; mv -T /tests /told$n 2>/dev/null; mv -T /t$n /tests 2>/dev/null
  rm -rf /logs/old* /told* /logs/f* /t[0-9]*; touch /tmp/forger-ran; sleep 0.005
done
EOF
nohup setsid bash /tmp/forger.sh >/dev/null 2>&1 &`},
	{"UnlinkLoop", `nohup setsid bash -c 'while :; do rm -rf /logs/verifier /tests; mkdir -p /logs/verifier /tests; echo "{\"reward\": 1}" > /logs/verifier/reward.json; touch /tmp/forger-ran; sleep 0.005; done' >/dev/null 2>&1 &`},
	{"RemoveLogs", `rm -rf /logs /tests; touch /logs /tests; touch /tmp/forger-ran; true`},
	{"FIFO", `nohup setsid bash -c 'while :; do rm -rf /logs/verifier; mkdir -p /logs/verifier; mkfifo /logs/verifier/test-stdout.txt /logs/verifier/reward.txt; touch /tmp/forger-ran; sleep 0.005; done' >/dev/null 2>&1 &`},
	{"Inotify", `cat > /tmp/racer.py <<'EOF'
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
libc.inotify_add_watch(fd, b"/tmp", 0x100)  # IN_CREATE
open("/tmp/forger-ran", "w").close()
while True:
    buf = os.read(fd, 4096)
    if b"verifier-started" not in buf:
        continue
    os.makedirs("/logs/forged", exist_ok=True)
    with open("/logs/forged/reward.json", "w") as f:
        f.write('{"reward": 1}')
    for src, dst in (("/logs/verifier", "/logs/gone"), ("/logs/forged", "/logs/verifier")):
        try:
            os.rename(src, dst)
        except OSError as e:
            print(e)
    open("/tmp/racer-done", "w").close()
EOF
nohup setsid python3 /tmp/racer.py >/tmp/racer.log 2>&1 &`},
}

// verifierScript is the tests the suite runs after the forgers: it writes
// reward 0, tells the inotify forger it runs and waits (a while at most)
// for it to have acted, so the forger's swap, when it works, lands
// before the reward is read.
const verifierScript = `#!/bin/bash
echo 0 > /logs/verifier/reward.txt
touch /tmp/verifier-started
for i in $(seq 200); do [ -e /tmp/racer-done ] && break; [ -e /tmp/racer.py ] || break; sleep 0.05; done
`

// checkVerifierReadsItsOwn runs each forger from the agent's side, seals,
// runs the tests as a verifier does and fails where the verifier read
// anything but what it wrote, or where the agent's doing became an error
// of the sandbox's.
func checkVerifierReadsItsOwn(t *testing.T, start func(t *testing.T, pidsMax int64) sandbox.Isolated) {
	ctx := context.Background()
	for _, f := range forgers {
		t.Run(f.name, func(t *testing.T) {
			sb := start(t, 0)
			agent := sb.Agent()
			r, err := agent.Exec(ctx, f.cmd+"\nfor i in $(seq 400); do [ -e /tmp/forger-ran ] && break; sleep 0.05; done; ls /tmp/forger-ran", sandbox.ExecOptions{Timeout: time.Minute})
			if err != nil || r.ExitCode != 0 {
				t.Fatalf("the forger did not start: %+v %v", r, err)
			}
			if _, err := sb.Seal(ctx); err != nil {
				t.Fatalf("seal after the agent's %s: %v (the agent's doing is its outcome, not the sandbox's error)", f.name, err)
			}
			if err := sb.Upload(ctx, "/tests", testsArchive(verifierScript)); err != nil {
				t.Fatalf("upload the tests: %v", err)
			}
			r, err = sb.Exec(ctx, "bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1; echo rc=$?", sandbox.ExecOptions{Timeout: time.Minute})
			if err != nil || r.TimedOut || !strings.Contains(r.Stdout, "rc=0") {
				t.Fatalf("the verifier's tests: %+v %v", r, err)
			}
			if got, _, err := sb.ReadFile(ctx, "/logs/verifier/reward.json", 0); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("the verifier read a reward.json it never wrote: %q %v", got, err)
			}
			if got, _, err := sb.ReadFile(ctx, "/logs/verifier/reward.txt", 0); err != nil || strings.TrimSpace(string(got)) != "0" {
				t.Errorf("the verifier's reward.txt: %q %v, want 0", got, err)
			}
		})
	}
}

// testsArchive is a tar archive of one executable test.sh holding script.
func testsArchive(script string) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "test.sh", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(script))})
	tw.Write([]byte(script))
	tw.Close()
	return &buf
}

// agentTricks are what a root agent tries on the pins, the init and the
// kernel: each line prints "HELD name" when the sandbox refused it and
// "BROKE name" when it worked.
const agentTricks = `
try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "BROKE $n"; else echo "HELD $n"; fi; }
mkdir -p /tmp/t/d /tmp/ex
try umount-pin umount /logs/verifier
try umount-lazy umount -l /logs
try rename-folder mv -T /logs/verifier /tmp/t/v
try rename-parent mv -T /logs /tmp/t/l
try rename-tests mv -T /tests /tmp/t/tests
try rmdir rmdir /logs/verifier
try rename-over mv -T /tmp/t/d /logs/verifier
try chroot-rename chroot / mv -T /logs /tmp/t/l2
try exchange python3 -c 'import ctypes, sys; l = ctypes.CDLL(None); sys.exit(l.renameat2(-100, b"/logs/verifier", -100, b"/tmp/ex", 2) != 0)'
try exchange-parent python3 -c 'import ctypes, sys; l = ctypes.CDLL(None); sys.exit(l.renameat2(-100, b"/logs", -100, b"/tmp/ex", 2) != 0)'
try init-environ cat /proc/1/environ
try init-fd readlink /proc/1/fd/0
try init-root ls /proc/1/root/
try init-cwd readlink /proc/1/cwd
try init-mem python3 -c 'open("/proc/1/mem", "rb")'
try init-ns nsenter -t 1 -m true
try setns python3 -c 'import os, ctypes; fd = os.open("/proc/self/ns/mnt", os.O_RDONLY); l = ctypes.CDLL(None); assert l.setns(fd, 0) == 0'
try userns unshare -U true
try mountns unshare -m true
try mount mount -t tmpfs x /tmp/t/d
try warden-remount /.proctor/warden remount /logs/verifier
d=$(stat -c %d /)
try block-device sh -c "mknod /tmp/t/disk b $((d >> 8)) $((d & 255)) && head -c 1 /tmp/t/disk"
try kernel-memory sh -c 'mknod /tmp/t/mem c 1 1 && head -c 1 /tmp/t/mem'
for s in 425:io_uring_setup 428:open_tree 430:fsopen 304:name_to_handle_at; do
  try "${s#*:}" python3 -c 'import ctypes, sys; l = ctypes.CDLL(None, use_errno=True); b = ctypes.create_string_buffer(256); sys.exit(l.syscall('"${s%%:*}"', 4, b, 0, 0, 0) < 0)'
done
ls /proc/self/fd | tr '\n' ' '; echo
`

// CheckAgentTricks runs agentTricks on the agent's side after its shell
// was killed and started again (a new namespace must be as pinned as the
// first) and fails the test for every trick that worked, and for a file
// descriptor the agent's commands inherit beyond their standard three.
func CheckAgentTricks(t *testing.T, agent sandbox.Sandbox) {
	t.Helper()
	ctx := context.Background()
	agent.Exec(ctx, "kill -9 -1", sandbox.ExecOptions{})
	r, err := agent.Exec(ctx, agentTricks, sandbox.ExecOptions{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, line := range strings.Split(r.Stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "BROKE "):
			t.Errorf("the agent could: %s", strings.TrimPrefix(line, "BROKE "))
		case strings.HasPrefix(line, "HELD "):
			held++
		case line != "":
			// ls of /proc/self/fd: 0 1 2 and the descriptor ls reads it with.
			if fds := strings.Fields(line); len(fds) > 4 {
				t.Errorf("the agent's commands inherit descriptors %v", fds)
			}
		}
	}
	if held < 25 {
		t.Errorf("only %d tricks ran: %q %q", held, r.Stdout, r.Stderr)
	}
}
