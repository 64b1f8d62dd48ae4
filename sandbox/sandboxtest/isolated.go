package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
)

// Private are the folders RunIsolated asks to be private, Terminal-Bench's.
var Private = []string{"/tests", "/logs/verifier"}

// RunIsolated is the suite of sandbox.Isolated: nothing the agent starts can
// reach what the plugin (the verifier) reads, runs or kills, while what the
// agent serves stays reachable. start makes a fresh sandbox whose spec has
// PidsMax pids and Private as its private folders.
// RunIsolated is the suite of sandbox.Isolated: nothing the agent starts can
// reach what the plugin (the verifier) reads, runs or kills, while what the
// agent serves stays reachable. start makes a fresh sandbox whose spec has
// PidsMax pids and Private as its private folders.
func RunIsolated(t *testing.T, start func(t *testing.T, pidsMax int64) sandbox.Isolated) {
	s := &isolatedSuite{ctx: context.Background(), start: start}
	t.Run("NoProcLinks", s.noProcLinks)
	runAttacks(t, start)
	for _, c := range []struct {
		name string
		test func(t *testing.T)
	}{
		{"LeftoverCannotForge", s.leftoverCannotForge},
		{"AgentCannotReachPlugin", s.agentCannotReachPlugin},
		{"KilledShellRestarts", s.killedShellRestarts},
		{"ServicesStayReachable", s.servicesStayReachable},
		{"ForkBombLeavesVerifierRoom", s.forkBombLeavesVerifierRoom},
	} {
		t.Run(c.name, c.test)
	}
}

// isolatedSuite is RunIsolated's: its sandboxes, and the helpers of its
// tests.
type isolatedSuite struct {
	ctx   context.Context
	start func(t *testing.T, pidsMax int64) sandbox.Isolated
}

// run runs cmd on side sb, failing the test when the sandbox fails.
func (s *isolatedSuite) run(t *testing.T, sb sandbox.Sandbox, cmd string) sandbox.ExecResult {
	t.Helper()
	r, err := sb.Exec(s.ctx, cmd, sandbox.ExecOptions{Timeout: time.Until(poll.Deadline(t))})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return r
}

// seal seals sb and returns its note.
func (s *isolatedSuite) seal(t *testing.T, sb sandbox.Isolated) string {
	t.Helper()
	note, err := sb.Seal(s.ctx)
	if err != nil {
		t.Fatalf("seal: %v", err)
	}
	return note
}

// noProcLinks: the host's file operations outside the private folders run
// as root in the sandbox's own view, where /proc/PID/root of the plugin's
// shell leads into its private folders. Neither a link the agent plants on
// a path the plugin reads, writes or downloads, nor a path the agent's
// side names, may reach them.
func (s *isolatedSuite) noProcLinks(t *testing.T) {
	sb := s.start(t, 0)
	agent := sb.Agent()
	if err := sb.WriteFile(s.ctx, "/logs/verifier/secret", []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// $$ in a command's subshell is the plugin shell's controller.
	pid := strings.TrimSpace(s.run(t, sb, "echo $$").Stdout)
	private := "/proc/" + pid + "/root/logs/verifier"
	if r := s.run(t, sb, "cat "+private+"/secret"); r.Stdout != "s3cret" {
		t.Fatalf("the premise: %s does not show the private folder (%q)", private, r.Stdout)
	}
	s.run(t, agent, "mkdir -p /tmp/plant && ln -s "+private+" /tmp/plant/out && ln -s "+private+"/secret /tmp/plant/secret-link && ln -s /logs/verifier/secret /tmp/plant/answer")
	for _, c := range []struct {
		name string
		side sandbox.Sandbox
		dir  string
	}{
		{"plugin, through a planted link", sb, "/tmp/plant/out"},
		{"agent, by name", agent, private},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, _, err := c.side.ReadFile(s.ctx, c.dir+"/secret", 0); err == nil || string(got) == "s3cret" {
				t.Errorf("read %s/secret: %q, %v; want an error", c.dir, got, err)
			}
			if rc, err := c.side.Download(s.ctx, c.dir+"/secret"); err == nil {
				b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
				rc.Close()
				if bytes.Contains(b, []byte("s3cret")) {
					t.Errorf("download %s/secret gave the private file", c.dir)
				}
			}
			werr := c.side.WriteFile(s.ctx, c.dir+"/planted", []byte("1"), 0o644)
			uerr := c.side.Upload(s.ctx, c.dir, testsArchive("echo planted"))
			if r := s.run(t, sb, "ls /logs/verifier"); strings.Contains(r.Stdout, "planted") || strings.Contains(r.Stdout, "test.sh") {
				t.Errorf("a write (%v) or upload (%v) to %s landed in the private folder: %s", werr, uerr, c.dir, r.Stdout)
			}
		})
	}
	// What /proc says of the plugin's processes is not the agent's
	// either: the engine's view of the container has an empty /proc.
	for _, side := range []sandbox.Sandbox{sb, agent} {
		if got, _, err := side.ReadFile(s.ctx, "/proc/"+pid+"/environ", 0); err == nil {
			t.Errorf("read the plugin shell's environment: %q", got)
		}
	}
	// A link as the path itself is followed in the sandbox's own
	// view, where the private folders are not mounted: not through
	// /proc, and not into the plugin's view (an answer file the
	// agent points at the verifier's expected answer).
	for _, side := range []sandbox.Sandbox{sb, agent} {
		for _, p := range []string{"/tmp/plant/secret-link", "/tmp/plant/answer"} {
			if got, _, err := side.ReadFile(s.ctx, p, 0); string(got) == "s3cret" {
				t.Errorf("%s read as the private file: %q, %v", p, got, err)
			}
		}
	}
}

// leftoverCannotForge: a process the agent left running, writing the
// verifier's files in a loop (Harbor's issue 2551, and its twin on the
// tests), changes nothing the verifier reads.
func (s *isolatedSuite) leftoverCannotForge(t *testing.T) {
	sb := s.start(t, 0)
	agent := sb.Agent()
	// The attack of Harbor's issue 2551, and its twin on the tests.
	// The forger counts its rounds in /tmp, which both sides see.
	s.run(t, agent, `mkdir -p /logs/verifier /tests; nohup setsid bash -c 'n=0; while :; do echo 1 > /logs/verifier/reward.txt; printf "echo 1 > /logs/verifier/reward.txt\n" > /tests/test.sh; chmod +x /tests/test.sh; n=$((n+1)); echo $n > /tmp/forged.new; mv /tmp/forged.new /tmp/forged; sleep 0.005; done' >/dev/null 2>&1 &`)
	s.run(t, agent, `until [ -s /tmp/forged ]; do sleep 0.01; done`)
	s.seal(t, sb)
	// The tests write their reward, then wait until the forger has gone
	// round twice more, however slowly the machine runs it.
	if err := sb.Upload(s.ctx, "/tests", testsArchive("#!/bin/bash\necho 0 > /logs/verifier/reward.txt; n=$(cat /tmp/forged); until [ \"$(cat /tmp/forged)\" -ge $((n+2)) ] 2>/dev/null; do sleep 0.01; done\n")); err != nil {
		t.Fatal(err)
	}
	r := s.run(t, sb, "bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1; cat /logs/verifier/reward.txt")
	if strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("the verifier read %q: a process the agent left running reached its files", r.Stdout)
	}
	got, _, err := sb.ReadFile(s.ctx, "/logs/verifier/reward.txt", 0)
	if err != nil || strings.TrimSpace(string(got)) != "0" {
		t.Errorf("plugin read of reward.txt: %q, %v", got, err)
	}
	got, _, _ = sb.ReadFile(s.ctx, "/tests/test.sh", 0)
	if !strings.Contains(string(got), "/tmp/forged") {
		t.Errorf("the uploaded tests were replaced: %q", got)
	}
	// A bounded read of a private file still says the whole size,
	// whatever the limit (the size line once shared it).
	head, size, err := sb.ReadFile(s.ctx, "/tests/test.sh", 2)
	if err != nil || string(head) != "#!" || size != int64(len(got)) {
		t.Errorf("2 bytes of the tests: %q, size %d, %v; want \"#!\" of %d", head, size, err, len(got))
	}
	// The agent's own view still has its forgeries, which nobody reads.
	// (The forger truncates before it writes: read until it has.)
	r = s.run(t, agent, `for i in $(seq 100); do [ "$(cat /logs/verifier/reward.txt)" = 1 ] && { echo 1; break; }; sleep 0.01; done`)
	if strings.TrimSpace(r.Stdout) != "1" {
		t.Errorf("the agent's view: %q", r.Stdout)
	}
}

// agentCannotReachPlugin: the agent cannot enter, see or signal the
// plugin's side, nor write the warden.
func (s *isolatedSuite) agentCannotReachPlugin(t *testing.T) {
	sb := s.start(t, 0)
	agent := sb.Agent()
	if err := sb.WriteFile(s.ctx, "/logs/verifier/secret", []byte("verifier only"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.run(t, sb, "nohup sleep 300 >/dev/null 2>&1 &")
	r := s.run(t, agent, `
unshare --mount true 2>/dev/null && echo UNSHARE-MOUNT
unshare --user true 2>/dev/null && echo UNSHARE-USER
mount -t tmpfs x /mnt 2>/dev/null && echo MOUNT
nsenter -t 1 -m true 2>/dev/null && echo NSENTER
cat /proc/*/root/logs/verifier/secret 2>/dev/null && echo PROCROOT
ps -eo args | grep -q '^sleep 300' && echo SEES-PLUGIN
echo x > `+"`"+`readlink -f /.proctor`+"`"+`/warden 2>/dev/null && echo WARDEN-WRITABLE
kill -9 -1 2>/dev/null; true`)
	for _, bad := range []string{"UNSHARE-MOUNT", "UNSHARE-USER", "MOUNT", "NSENTER", "PROCROOT", "verifier only", "SEES-PLUGIN", "WARDEN-WRITABLE"} {
		if strings.Contains(r.Stdout, bad) {
			t.Errorf("the agent could: %s (output %q)", bad, r.Stdout)
		}
	}
	if r := s.run(t, sb, "pgrep -c -f '^sleep 300$'"); strings.TrimSpace(r.Stdout) != "1" {
		t.Errorf("the agent's kill -9 -1 reached the plugin's processes: %+v", r)
	}
}

// killedShellRestarts: kill -9 -1 is the agent's outcome; its next command
// gets a new shell, and the plugin's shell lives on.
func (s *isolatedSuite) killedShellRestarts(t *testing.T) {
	sb := s.start(t, 0)
	agent := sb.Agent()
	s.run(t, agent, "cd /tmp && export KEPT=1")
	r, err := agent.Exec(s.ctx, "kill -9 -1", sandbox.ExecOptions{})
	if err != nil {
		t.Fatalf("kill -9 -1 made an error, not an outcome: %v", err)
	}
	if r.ExitCode == 0 {
		t.Errorf("kill -9 -1 reported exit 0: %+v", r)
	}
	r = s.run(t, agent, "echo alive $KEPT")
	if strings.TrimSpace(r.Stdout) != "alive" {
		t.Errorf("after kill -9 -1 the agent's shell: %+v", r)
	}
	if r := s.run(t, sb, "echo plugin"); r.Stdout != "plugin\n" {
		t.Errorf("the plugin's shell after the agent's kill -9 -1: %+v", r)
	}
}

// servicesStayReachable: a service the agent started is reachable from the
// verifier after Seal.
func (s *isolatedSuite) servicesStayReachable(t *testing.T) {
	sb := s.start(t, 0)
	agent := sb.Agent()
	s.run(t, agent, `nohup python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 8765)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"served by the agent\n"); c.close()
' >/dev/null 2>&1 &
until python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8765))' 2>/dev/null; do sleep 0.1; done`)
	s.seal(t, sb)
	r := s.run(t, sb, `python3 -c 'import socket; print(socket.create_connection(("127.0.0.1", 8765)).recv(100).decode().strip())'`)
	if strings.TrimSpace(r.Stdout) != "served by the agent" {
		t.Errorf("the verifier cannot reach the agent's service: %+v", r)
	}
}

// forkBombLeavesVerifierRoom: Seal stops a fork storm that left no process
// slot for verification, and says so.
func (s *isolatedSuite) forkBombLeavesVerifierRoom(t *testing.T) {
	sb := s.start(t, 200)
	agent := sb.Agent()
	// Leftovers in sessions of their own, until no slot is left.
	r, err := agent.Exec(s.ctx, `python3 -c '
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.setsid(); time.sleep(600); os._exit(0)
    n += 1
print(n)'`, sandbox.ExecOptions{Timeout: time.Until(poll.Deadline(t))})
	if err != nil {
		t.Fatalf("the agent's fork storm made an error, not an outcome: %v", err)
	}
	note := s.seal(t, sb)
	if !strings.Contains(note, "stopped") {
		t.Errorf("seal said nothing of the agent's processes: %q (agent saw %+v)", note, r)
	}
	if r := s.run(t, sb, "echo verifier runs"); r.Stdout != "verifier runs\n" {
		t.Errorf("verification could not start after the fork storm: %+v", r)
	}
}

// RunUsers is the suite of an isolated sandbox's users. start makes a
// fresh sandbox from spec (the base image filled in by start).
//
// SealAsUnprivilegedUser: a plugin shell that may not mount still gets
// fresh private folders from Seal, owned by its user. AgentUserApart: the
// agent's commands and files run as AgentUser, the plugin's as User
// (Harbor's [agent].user beside [verifier].user), also after the agent's
// shell restarts. CancelAsUnprivilegedUser: a cancelled call kills its
// command, in either shell, when the sandbox runs as another user than
// root, and the shell answers the next call. NothingPrivilegedInReachAsUser:
// no process the agent's user sees holds a uid or capability it lacks.
func RunUsers(t *testing.T, start func(t *testing.T, spec sandbox.Spec) sandbox.Isolated) {
	ctx := context.Background()
	t.Run("SealAsUnprivilegedUser", func(t *testing.T) {
		sb := start(t, sandbox.Spec{User: "nobody", Workdir: "/tmp", Private: Private})
		if err := sb.WriteFile(ctx, "/logs/verifier/old", []byte("stale"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := sb.ReadFile(ctx, "/logs/verifier/old", 0); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("a file from before Seal: %v", err)
		}
		r, err := sb.Exec(ctx, "id -un; echo new > /logs/verifier/reward.txt && stat -c %U /logs/verifier", sandbox.ExecOptions{})
		if err != nil || r.Stdout != "nobody\nnobody\n" {
			t.Errorf("the user's private folder after Seal: %+v, %v", r, err)
		}
	})
	t.Run("AgentUserApart", func(t *testing.T) {
		sb := start(t, sandbox.Spec{AgentUser: "nobody", Workdir: "/tmp", Private: Private})
		ag := sb.Agent()
		if err := ag.WriteFile(ctx, "/tmp/agent/f", []byte("a"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := sb.WriteFile(ctx, "/tmp/plugin/f", []byte("p"), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := ag.Exec(ctx, "id -un; stat -c %U /tmp/agent/f /tmp/plugin/f", sandbox.ExecOptions{})
		if err != nil || r.Stdout != "nobody\nnobody\nroot\n" {
			t.Fatalf("agent side: %+v %v", r, err)
		}
		r, err = sb.Exec(ctx, "id -un", sandbox.ExecOptions{})
		if err != nil || r.Stdout != "root\n" {
			t.Fatalf("plugin side: %+v %v", r, err)
		}
		ag.Exec(ctx, "kill -9 -1", sandbox.ExecOptions{})
		r, err = ag.Exec(ctx, "id -un", sandbox.ExecOptions{})
		if err != nil || !strings.HasSuffix(r.Stdout, "nobody\n") {
			t.Fatalf("after a restart: %+v %v", r, err)
		}
	})
	t.Run("NothingPrivilegedInReachAsUser", func(t *testing.T) {
		sb := start(t, sandbox.Spec{AgentUser: "nobody", Workdir: "/tmp", Private: Private})
		CheckNothingPrivileged(t, sb.Agent())
	})
	t.Run("CancelAsUnprivilegedUser", func(t *testing.T) {
		sb := start(t, sandbox.Spec{User: "nobody", Private: Private})
		for i, v := range []sandbox.Sandbox{sb, sb.Agent()} {
			other := []sandbox.Sandbox{sb.Agent(), sb}[i]
			mark := fmt.Sprintf("/tmp/cancel-started.%d", i)
			// Cancelled once the command runs, as the other side sees.
			cctx, cancel := context.WithCancel(ctx)
			go func() {
				defer cancel()
				for cctx.Err() == nil {
					if r, err := other.Exec(cctx, "test -e "+mark, sandbox.ExecOptions{}); err == nil && r.ExitCode == 0 {
						return
					}
				}
			}()
			r, err := v.Exec(cctx, "touch "+mark+"; exec sleep 60", sandbox.ExecOptions{})
			cancel()
			if !errors.Is(err, context.Canceled) || r.ExitCode != 137 {
				t.Errorf("cancelled call: %+v %v, want the command killed", r, err)
			}
			if r, err := v.Exec(ctx, "echo alive", sandbox.ExecOptions{}); err != nil || r.Stdout != "alive\n" {
				t.Errorf("after the cancel: %+v %v", r, err)
			}
		}
	})
}
