package miniswe

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/local"
)

// TestRealCommands runs mini-swe-agent's commands in a local sandbox: each
// in a fresh bash (a cd does not last), stderr with stdout, a timeout that
// stops the command, the submission after its marker.
func TestRealCommands(t *testing.T) {
	ctx := context.Background()
	sb, err := local.Backend{}.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	bash := func(cmds ...string) agent.ScriptTurn {
		st := agent.ScriptTurn{Content: "THOUGHT: next."}
		for _, c := range cmds {
			args, _ := json.Marshal(map[string]string{"command": c})
			st.ToolCalls = append(st.ToolCalls, agent.ScriptCall{Name: "bash", Arguments: args})
		}
		return st
	}
	model := &agent.Replay{Script: &agent.Script{Turns: []agent.ScriptTurn{
		bash("cd /; echo out; echo err >&2", "pwd"),
		bash("sleep 600"),
		bash("printf 'x = 2\\n' > m.py && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat m.py"),
	}}}
	wd, _ := sb.Exec(ctx, "pwd", sandbox.ExecOptions{Fresh: true})
	cwd := strings.TrimSpace(wd.Stdout)
	// Not BASH_ENV=/root/.bashrc: this is the machine's own.
	env := Env[:len(Env)-1]
	a := &Agent{Model: model, Name: "scripted", Opts: Options{Cwd: cwd, Timeout: 15 * time.Second, Env: env}}
	tr, err := a.Run(ctx, sb, "Set x to 2.")
	if err != nil || tr.StopReason != StopSubmitted || tr.Submission == nil || *tr.Submission != "x = 2\n" {
		t.Fatalf("%v %s %v", err, tr.StopReason, tr.Submission)
	}
	obs := []string{tr.Messages[3].Content, tr.Messages[4].Content, tr.Messages[6].Content}
	if obs[0] != "<returncode>0</returncode>\n<output>\nout\nerr\n</output>" || obs[1] != "<returncode>0</returncode>\n<output>\n"+cwd+"\n</output>" {
		t.Errorf("observations: %q", obs[:2])
	}
	if !strings.HasPrefix(obs[2], "<exception>An error occurred while executing the command: Command '['docker', 'exec', '-w', '"+cwd+"', ") ||
		!strings.Contains(obs[2], "'bash', '-c', 'sleep 600']' timed out after 15 seconds</exception>\n<returncode>-1</returncode>") {
		t.Errorf("timeout: %q", obs[2])
	}
}
