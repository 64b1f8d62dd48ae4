package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// errHookTime is the cause of a hook call's context when its own time
// (Config.HookTimeout) ran out.
var errHookTime = errors.New("the plugin's own time ran out")

// hookClock is the time a hook call spends on its own work. It runs while
// the plugin's code runs and stands still while the host performs an
// operation that waits on the rollout's sandbox (a command, a file, a
// reset): those are bounded by the phase the hook runs in (the task's
// agent or verifier timeout, the run's setup timeout), not by the hook
// timeout, which bounds only what the plugin itself does. When the time
// is spent, expire runs once.
type hookClock struct {
	mu     sync.Mutex
	left   time.Duration
	since  time.Time
	timer  *time.Timer
	fired  bool
	expire func()
}

func startHookClock(d time.Duration, expire func()) *hookClock {
	c := &hookClock{left: d, since: time.Now()}
	c.expire = func() {
		c.mu.Lock()
		c.fired = true
		c.mu.Unlock()
		expire()
	}
	c.timer = time.AfterFunc(d, c.expire)
	return c
}

// pause stops the clock while the host works for the hook.
func (c *hookClock) pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer.Stop() {
		c.left -= time.Since(c.since)
	}
}

// resume starts the clock again with what is left of the hook's time.
func (c *hookClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fired {
		return
	}
	c.since = time.Now()
	c.timer = time.AfterFunc(max(c.left, 0), c.expire)
}

func (c *hookClock) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer.Stop()
}

// waitsOnSandbox reports whether a host operation waits on the rollout's
// sandbox, so that the hook's clock stands still while it runs.
func waitsOnSandbox(op string) bool {
	return strings.HasPrefix(op, "sandbox.") || op == abi.OpRepoCheckout
}

// outOfTime says that a hook's own time ran out, naming the limit.
func (r *Runtime) outOfTime() error {
	return fmt.Errorf("no answer within %s (%s, the plugin's own work; its sandbox operations are bounded by the phase's timeout instead): %w",
		r.cfg.HookTimeout, r.cfg.HookTimeoutName, context.DeadlineExceeded)
}
