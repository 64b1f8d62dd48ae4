// Package isolate is the isolation policy of every backend that keeps the
// agent apart from the plugin (sandbox.Isolated): what Seal does before
// verification, and how the agent's shell comes back when one of its
// commands killed it. A backend provides the primitives (Sealer, Agent:
// its shells, the warden run as root, what it knows of its sandbox) and
// calls Seal and Exec; docs/security.md says what they guarantee.
package isolate

import (
	"context"
	"errors"
	"fmt"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Sealer is what Seal needs of an isolated sandbox.
type Sealer interface {
	// Stat is the sandbox's process count and limit (max < 0: none
	// known), asked of the plugin's shell without a fork, so that it
	// answers when the sandbox has no process slot left.
	Stat(ctx context.Context) (pids, max int64, err error)
	// StopAgent kills every process of the agent's namespace.
	StopAgent(ctx context.Context) error
	// Warden runs the warden with args as root, with the sandbox's
	// capabilities, from outside both shells (nothing of the image
	// runs).
	Warden(ctx context.Context, args ...string) error
	// Explain says why a call of the sandbox failed, as the backend
	// knows it (gone, over its disk limit).
	Explain(ctx context.Context, err error) error
}

// Sandbox is an isolated sandbox's policy: what Seal keeps.
type Sandbox struct {
	// Agent: the sandbox keeps an agent apart. Without one, Seal only
	// checks that the sandbox answers.
	Agent bool
	// PidsMax is the spec's process limit, which Seal holds when the
	// sandbox's own says more or nothing (a pod's is the node's).
	PidsMax int64
	// Private are the plugin's private folders, emptied by Seal: tmpfs
	// mounts of TmpfsMiB in the plugin's mount namespace, held by the
	// process PluginNS, owned by User ("uid:gid", or "" for root).
	Private  []string
	TmpfsMiB int64
	User     string
	PluginNS int
}

// Seal ends the agent's turn (sandbox.Isolated's Seal): it asks the
// sandbox for its process slots first, so a sandbox that died fails here
// with the backend's explanation; stops the agent's processes when they
// leave verification fewer than shell.ReservedPids slots under the
// stricter of the sandbox's limit and the spec's, saying so in the note;
// and replaces the private folders with empty ones.
func Seal(ctx context.Context, sb Sealer, p Sandbox) (note string, err error) {
	pids, max, err := sb.Stat(ctx)
	if err != nil {
		return "", sb.Explain(ctx, err)
	}
	if !p.Agent {
		return "", nil
	}
	if p.PidsMax > 0 && (max < 0 || max > p.PidsMax) {
		max = p.PidsMax
	}
	if max >= 0 && max-pids < shell.ReservedPids {
		if err := sb.StopAgent(ctx); err != nil {
			return "", err
		}
		note = shell.StoppedNote(pids, max)
	}
	if len(p.Private) == 0 {
		return note, nil
	}
	// The plugin's shell runs without the capability to mount: the
	// warden, as root, joins its namespace.
	if err := sb.Warden(ctx, shell.Remount(p.TmpfsMiB, p.User, p.PluginNS, p.Private)...); err != nil {
		return note, fmt.Errorf("empty the private folders: %w", err)
	}
	return note, nil
}

// Shell is an agent's shell.
type Shell interface {
	Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error)
	Close() error
}

// Agent is what Exec needs of an isolated sandbox's agent's side.
type Agent interface {
	// Shell is the agent's shell now.
	Shell() Shell
	// Restart starts a new shell for the agent, which Shell then returns.
	Restart(ctx context.Context) error
	// Live fails with sandbox.ErrClosed once the sandbox or the agent's
	// view is closed, or with the reason the backend stopped the agent
	// (sandbox.ErrLimit).
	Live() error
	// Closed reports whether the sandbox was closed.
	Closed() bool
	// Running reports whether the sandbox still runs.
	Running(ctx context.Context) bool
	// Explain says why a call of the sandbox failed, as the backend
	// knows it.
	Explain(ctx context.Context, err error) error
}

// Exec runs cmd in the agent's shell. When a command (the agent's own
// `kill -9 -1`, say) killed the shell while the sandbox still runs, a new
// shell is started and the call reports exit 137 with a note: what the
// agent does to its own sandbox is its outcome, not a failure of proctor.
func Exec(ctx context.Context, a Agent, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if err := a.Live(); err != nil {
		return sandbox.ExecResult{}, err
	}
	sh := a.Shell()
	r, err := sh.Exec(ctx, cmd, o)
	if err != nil {
		// A backend that stopped the agent's shell (over a limit): the
		// call fails for that reason, whatever the shell said.
		if lerr := a.Live(); lerr != nil && !errors.Is(lerr, sandbox.ErrClosed) {
			return r, lerr
		}
	}
	if err == nil || !errors.Is(err, sandbox.ErrGone) || a.Closed() || ctx.Err() != nil {
		return r, err
	}
	if !a.Running(ctx) {
		return r, a.Explain(ctx, err)
	}
	if a.Shell() == sh {
		if serr := a.Restart(ctx); serr != nil {
			return r, a.Explain(ctx, fmt.Errorf("%w; starting a new shell: %v", err, serr))
		}
		sh.Close()
	}
	return sandbox.ExecResult{ExitCode: 137, Stderr: shell.Restarted + "\n", Duration: r.Duration}, nil
}
