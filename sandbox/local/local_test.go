package local

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
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

func TestCloseKillsEveryProcess(t *testing.T) {
	ctx := context.Background()
	b, err := Backend{}.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	sb := b.(*Sandbox)
	// One child leaves the command's group with setsid.
	if _, err := sb.Exec(ctx, "sleep 321 & setsid sleep 322 & echo ok", sandbox.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := sb.groups(); len(g) < 2 {
		t.Fatalf("want the shell's and the commands' groups, found %v", g)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sb.groups()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := sb.groups(); len(g) > 0 {
		t.Fatalf("processes left after Close in groups %v", g)
	}
	if _, err := os.Stat(sb.Root()); !os.IsNotExist(err) {
		t.Fatalf("sandbox folder left: %v", err)
	}
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

// After a SIGKILL of proctor, a resume prunes the run's folders and every
// process started in them, also those that left their group.
func TestPruneLeftovers(t *testing.T) {
	ctx := context.Background()
	run := "prune-test-" + strings.ReplaceAll(t.Name(), "/", "_")
	sb, err := Backend{}.Start(ctx, sandbox.Spec{Labels: map[string]string{sandbox.LabelRun: run}})
	if err != nil {
		t.Fatal(err)
	}
	root := sb.(*Sandbox).Root()
	r, err := sb.Exec(ctx, "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!", sandbox.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(r.Stdout)
	// As if proctor died: nothing closes the sandbox.
	n, err := Backend{}.Prune(ctx, run)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	if _, err := os.Stat(root); err == nil {
		t.Errorf("%s survived the prune", root)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the setsid sleep %s survived the prune", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sb.Close(ctx)
}
