package terminus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/local"
)

// TestRealTmux drives a real tmux (this machine's) through a local
// sandbox: the screens the model is shown come from tmux itself. Nothing
// here depends on how fast the machine is: the file is waited for after
// the run, and only what tmux shows at once (the typed command) is
// asserted in the observations.
func TestRealTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("no tmux on this machine")
	}
	ctx := context.Background()
	sb, err := local.Backend{}.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	root := sb.(interface{ Root() string }).Root()
	b := make([]byte, 6)
	rand.Read(b)
	socket := "proctor-test-" + hex.EncodeToString(b)
	defer sb.Exec(context.WithoutCancel(ctx), "tmux -L "+socket+" kill-server", sandbox.ExecOptions{Fresh: true})

	model := &agent.Replay{Script: &agent.Script{Turns: []agent.ScriptTurn{
		{Content: `{"analysis": "Nothing yet.", "plan": "Write it.", "commands": [{"keystrokes": "echo hello > hello.txt\n", "duration": 0.2}]}`},
		{Content: `{"analysis": "Done.", "plan": "", "commands": [], "task_complete": true}`},
		{Content: `{"analysis": "Sure.", "plan": "", "commands": [], "task_complete": true}`},
	}}}
	a := &Agent{Model: model, Name: "scripted", Opts: Options{Socket: socket, LogDir: filepath.Join(root, "logs", "agent")}}
	tr, err := a.Run(ctx, sb, "Write hello to hello.txt.")
	if err != nil {
		t.Fatalf("%v (%s)", err, tr.StopReason)
	}
	if tr.StopReason != agent.StopDone || len(tr.Turns) != 3 || len(tr.Messages) != 6 {
		t.Fatalf("stop %s after %d turns, %d messages", tr.StopReason, len(tr.Turns), len(tr.Messages))
	}
	first, second := tr.Messages[0].Content, tr.Messages[2].Content
	if !strings.Contains(first, "Task Description:\nWrite hello to hello.txt.\n\nCurrent terminal state:\nCurrent Terminal Screen:\n") {
		t.Errorf("first prompt:\n%s", first)
	}
	if !strings.HasPrefix(second, "New Terminal Output:\n") || !strings.Contains(second, "echo hello > hello.txt") {
		t.Errorf("after the command:\n%q", second)
	}
	if !strings.Contains(tr.Messages[4].Content, "Are you sure you want to mark the task as complete?") {
		t.Errorf("no confirmation asked:\n%s", tr.Messages[4].Content)
	}
	if testing.Verbose() {
		for _, m := range tr.Messages {
			t.Logf("%s: %q", m.Role, m.Content[max(0, len(m.Content)-300):])
		}
	}
	file := filepath.Join(root, "hello.txt")
	if wd, err := sb.Exec(ctx, "pwd", sandbox.ExecOptions{Fresh: true}); err == nil {
		file = filepath.Join(strings.TrimSpace(wd.Stdout), "hello.txt")
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && string(b) == "hello\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: %q %v", file, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(root, "logs", "agent", "terminus_2.pane")); err != nil || st.Size() == 0 {
		t.Errorf("the pane's log: %v", err)
	}
}
