package scheduler

import (
	"context"
	"maps"
	"reflect"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/proctor-dev/proctor/sandbox"
)

// ahead starts the sandboxes of the rollouts next in line while others run,
// so that a rollout finds its sandbox started and the engine's start
// latency leaves the critical path. At most Prestart rollouts have a
// sandbox started ahead and not yet taken; a process run starts a group's
// sandboxes together.
//
// A member is made for one identity's first try, from the spec a plugin
// instance gives for its task, labelled with its run and rollout ids like
// any other sandbox. It is invisible to the
// isolation model: nothing of the rollout (setup, the agent,
// verification) runs in it before the rollout owns it, and the rollout
// takes it only when its own instance asks for the same spec. Members the
// run no longer needs (it was cancelled, or ended on an error, or the
// spec changed) are closed; those a killed process leaves carry the run's
// label for the resume's prune and `proctor sandbox prune`.
type ahead struct {
	r     *Runner
	slots *semaphore.Weighted // members started and not yet taken

	mu      sync.Mutex
	members map[string]*member // by rollout id, until taken
	claimed map[string]bool    // rollouts that started on their own
	started sync.WaitGroup     // members' start goroutines
	closing sync.WaitGroup     // members being closed
	done    chan struct{}      // closed when fill returns
}

// member is one rollout's sandbox, started ahead.
type member struct {
	ready chan struct{} // closed when the start ended

	spec sandbox.Spec
	sb   sandbox.Sandbox // nil when the start failed: the rollout starts its own
	dur  time.Duration   // how long the start took
}

// startAhead starts filling the pool with the members of jobs, in order,
// until stop ends or every job has had its turn. Members start on ctx: a
// member already taken by a rollout must not be cut when stop ends for
// another reason than ctx.
func (r *Runner) startAhead(ctx, stop context.Context, jobs []job) *ahead {
	a := &ahead{r: r, slots: semaphore.NewWeighted(int64(r.Config.Prestart)),
		members: map[string]*member{}, claimed: map[string]bool{}, done: make(chan struct{})}
	go a.fill(ctx, stop, jobs)
	return a
}

// fill starts members in the order the jobs run, a group's at once in a
// process run. It asks the specs itself, one plugin instance at a time,
// and once per task: the attempts of a task get the spec its first one
// got (a rollout whose own instance asks for another spec starts its own
// sandbox).
func (a *ahead) fill(ctx, stop context.Context, jobs []job) {
	defer close(a.done)
	specs := map[string]*sandbox.Spec{} // by task; nil: the task's spec failed
	for i := 0; i < len(jobs); {
		batch := a.batch(jobs[i:])
		i += len(batch)
		if err := a.slots.Acquire(stop, int64(len(batch))); err != nil {
			return
		}
		for _, j := range batch {
			id := RolloutID(j.task.ID, j.attempt)
			a.mu.Lock()
			claimed := a.claimed[id]
			a.mu.Unlock()
			spec, known := specs[j.task.ID]
			if !known && !claimed {
				spec = a.askSpec(ctx, j)
				specs[j.task.ID] = spec
			}
			a.mu.Lock()
			if a.claimed[id] || spec == nil {
				a.mu.Unlock()
				a.slots.Release(1) // its rollout got there first, or it has no spec
				continue
			}
			m := &member{ready: make(chan struct{})}
			a.members[id] = m
			a.started.Add(1)
			a.mu.Unlock()
			go func() {
				defer a.started.Done()
				a.start(ctx, *spec, id, m)
			}()
		}
	}
}

// askSpec asks a plugin instance of its own, closed at once (an instance
// weighs more than a sandbox's host side), for the spec of job j; nil when
// it has none: the rollout meets the failure again on its own start and
// records it there.
func (a *ahead) askSpec(ctx context.Context, j job) *sandbox.Spec {
	ro := a.r.newRollout(j, 0)
	env, err := a.r.Env.NewRollout(ctx, j.task, ro.info())
	if err != nil {
		return nil
	}
	ro.env = env
	err = within(ctx, "sandbox_start", a.r.sandboxStartLimit(), ro.askSpec)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	env.Close(cctx)
	cancel()
	if err != nil {
		return nil
	}
	return &ro.spec
}

// batch is the next jobs to start together: one, or in a process run the
// rest of its task's group (never more than the pool holds).
func (a *ahead) batch(jobs []job) []job {
	n := 1
	if g := a.r.Config.GroupSize; g > 1 {
		for n < len(jobs) && n < min(g, a.r.Config.Prestart) && jobs[n].task.ID == jobs[0].task.ID {
			n++
		}
	}
	return jobs[:n]
}

// start starts the member's sandbox from spec, labelled for rollout id.
// A failure leaves the member empty: the rollout starts its own.
func (a *ahead) start(ctx context.Context, spec sandbox.Spec, id string, m *member) {
	defer close(m.ready)
	spec.Labels = maps.Clone(spec.Labels)
	spec.Labels[sandbox.LabelRollout] = id
	t0 := time.Now()
	sb, err := a.r.startWithin(ctx, spec)
	if err != nil {
		return
	}
	m.spec, m.sb, m.dur = spec, sb, time.Since(t0)
}

// take hands the member of a rollout's first try to it, or nil when there
// is none: the rollout then starts its own, and the pool will not.
func (a *ahead) take(id string, try int) *member {
	if a == nil || try > 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.members[id]
	if !ok {
		a.claimed[id] = true
		return nil
	}
	delete(a.members, id)
	a.slots.Release(1)
	return m
}

// close waits for fill, then closes the members no rollout took, and
// waits for those being closed.
func (a *ahead) close(ctx context.Context) {
	<-a.done
	a.started.Wait()
	a.mu.Lock()
	left := a.members
	a.members = map[string]*member{}
	a.mu.Unlock()
	for id, m := range left {
		a.closing.Go(func() { a.discard(ctx, id, m) })
	}
	a.closing.Wait()
}

// discard closes a member's sandbox, once it started.
func (a *ahead) discard(ctx context.Context, id string, m *member) {
	<-m.ready
	if m.sb == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := m.sb.Close(cctx); err != nil {
		a.r.Log.Warn("close sandbox started ahead", "rollout", id, "err", err)
	}
}

// adopt gives the rollout its member's sandbox, waiting for it if it is
// still starting, when the rollout's spec (ro.spec, from its own plugin
// instance) is the one it was started from; otherwise the member is closed
// and adopt reports false.
func (ro *rollout) adopt(ctx context.Context, m *member) bool {
	select {
	case <-m.ready:
	case <-ctx.Done():
		ro.r.ahead.closing.Go(func() { ro.r.ahead.discard(ctx, ro.id, m) })
		return false
	}
	if m.sb == nil {
		return false
	}
	if !reflect.DeepEqual(m.spec, ro.spec) {
		ro.r.Log.Info("a sandbox started ahead is not the rollout's: its spec changed", "rollout", ro.id)
		ro.r.ahead.closing.Go(func() { ro.r.ahead.discard(ctx, ro.id, m) })
		return false
	}
	ro.sb = m.sb
	ro.rec.Phases["sandbox_start_ahead"] = m.dur.Seconds()
	return true
}
