package serve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// session is the environment's registration with the API: its env_id
// while the API knows it, and a signal for the sender to wait on while it
// does not.
type session struct {
	mu    sync.Mutex
	env   atropos.Env
	ok    bool // registered and answering
	ever  bool // registered at least once
	gen   int  // registrations so far: a new one means the API forgot the old
	ready chan struct{}
}

// up records a working registration; gen counts new ones.
func (s *session) up(env atropos.Env, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready == nil {
		s.ready = make(chan struct{})
	}
	s.env, s.ever = env, true
	if fresh {
		s.gen++
	}
	if !s.ok {
		s.ok = true
		close(s.ready)
	}
}

// down marks the API unusable until up.
func (s *session) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ok || s.ready == nil {
		s.ok = false
		s.ready = make(chan struct{})
	}
}

// wait returns the registration once the API answers, and its generation.
func (s *session) wait(ctx context.Context) (atropos.Env, int, error) {
	for {
		s.mu.Lock()
		if s.ready == nil {
			s.ready = make(chan struct{})
		}
		env, gen, ok, ready := s.env, s.gen, s.ok, s.ready
		s.mu.Unlock()
		if ok {
			return env, gen, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return atropos.Env{}, 0, ctx.Err()
		}
	}
}

// current is the registration while the API answers.
func (s *session) current() (atropos.Env, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env, s.ok
}

// last is the last registration, answering or not.
func (s *session) last() (atropos.Env, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env, s.ever
}

func (s *session) envID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env.ID
}

// registration is what the environment registers with.
func (s *Serve) registration() atropos.Registration {
	c := s.cfg.Serve
	return atropos.Registration{MaxTokenLength: c.MaxTokenLength, DesiredName: c.Name, Weight: *c.Weight,
		MinBatchAllocation: c.MinBatchAllocation, GroupSize: s.size}
}

// register registers the environment as base.py register_env does,
// records the env_id the API gave in serve-envs.jsonl before anything
// uses it, lets go of the run's earlier ones the API still holds, and
// reads /info. It waits (every second) while the API says the trainer has
// not started and, with backoff, while the API is unreachable or failing:
// a failed /info is asked again without registering again, which would
// leave an environment behind. A refusal or a malformed answer ends
// serving: waiting cannot mend it.
func (s *Serve) register(ctx context.Context) error {
	env, err := s.registerEnv(ctx)
	if err != nil {
		return err
	}
	s.registeredAs(ctx, env)
	r := s.retrier()
	for {
		err := s.readInfo(ctx, env)
		switch {
		case err == nil:
		case ctx.Err() != nil || refusal(err) || groupTooLarge(err):
			return err
		default:
			if !r.again(ctx, fmt.Sprintf("the rollout API at %s fails (%v): asking again", s.api.URL(), err)) {
				return ctx.Err()
			}
			continue
		}
		break
	}
	s.curStep = env.StartingStep
	s.sess.up(env, true)
	s.setAPI("")
	s.notify("", "registered with the rollout API at %s as %s (env %d): batch_size %d, max_token_len %d, trainer at step %d%s",
		s.api.URL(), env.Name, env.ID, s.info.BatchSize, s.info.MaxTokenLen, env.StartingStep, s.stepsLeft())
	return nil
}

// registerEnv posts /register-env until the API gives an env_id.
func (s *Serve) registerEnv(ctx context.Context) (atropos.Env, error) {
	r := s.retrier()
	for {
		env, waiting, ok, err := s.api.RegisterEnv(ctx, s.registration())
		switch {
		case ctx.Err() != nil:
			return env, ctx.Err()
		case refusal(err):
			return env, &fault.Usage{Err: err, Hint: "check [serve] (name, weight, group size, max_token_length) against the rollout API at " + s.api.URL()}
		case err != nil:
			if !r.again(ctx, fmt.Sprintf("waiting for the rollout API at %s: %v", s.api.URL(), err)) {
				return env, ctx.Err()
			}
		case !ok:
			r.say("", fmt.Sprintf("waiting for the trainer to start (the rollout API at %s says %q)", s.api.URL(), waiting))
			if !sleep(ctx, time.Second) {
				return env, ctx.Err()
			}
		default:
			return env, nil
		}
	}
}

// retrier paces the tries of a call the API failed: backoff from
// Options.Backoff, doubled up to 30s. Each new reason is said once, and
// the progress line says it while it holds.
type retrier struct {
	s    *Serve
	wait time.Duration
	said string
}

func (s *Serve) retrier() *retrier { return &retrier{s: s, wait: s.opts.Backoff} }

// say tells the user why serving waits, once per reason.
func (r *retrier) say(level, why string) {
	r.s.setAPI(why)
	if why != r.said {
		r.s.notify(level, "%s", why)
		r.said = why
	}
}

// again says why (a warning) and waits before the next try; false when
// ctx ended first.
func (r *retrier) again(ctx context.Context, why string) bool {
	r.say("warning", why)
	if !sleep(ctx, r.wait) {
		return false
	}
	r.wait = min(2*r.wait, 30*time.Second)
	return true
}

// readInfo reads /info and settles total_steps, as base.py
// get_server_info and register_env do.
func (s *Serve) readInfo(ctx context.Context, env atropos.Env) error {
	in, err := s.api.Info(ctx)
	if err != nil {
		return err
	}
	if in.BatchSize > 0 && s.size > in.BatchSize {
		return &fault.Usage{
			Err:  &groupSizeError{fmt.Errorf("process.group_size is %d, larger than the trainer's batch_size %d: a group must fit in a batch", s.size, in.BatchSize)},
			Hint: fmt.Sprintf("set [process] group_size to at most %d", in.BatchSize),
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info = in // the loop's goroutine writes it; builds and the progress line read it under s.mu
	s.total = s.cfg.Serve.TotalSteps
	if s.total == 0 {
		s.total = env.NumSteps
	}
	return nil
}

type groupSizeError struct{ error }

func (e *groupSizeError) Unwrap() error { return e.error }

func groupTooLarge(err error) bool {
	var g *groupSizeError
	return errors.As(err, &g)
}

func (s *Serve) stepsLeft() string {
	if s.total > 0 {
		return fmt.Sprintf(" of %d", s.total)
	}
	return " (no step limit: the trainer gave num_steps -1)"
}

// maxServerErrors is how many 5xx answers in a row to /status-env mean
// that the API no longer holds the environment: server.py answers an
// env_id it does not hold with a bare HTTP 500 (get_status_env indexes
// app.state.envs, line 480 at 296a0bc5: an IndexError, or an
// AttributeError at line 476 before any trainer registered), the same
// answer as any failure, but every time.
const maxServerErrors = 3

// check reads the environment's status. While the API is unreachable it
// waits (the groups running go on; the sender holds); a 5xx is asked
// again with backoff. When the API no longer holds the environment (the
// trainer's step went back: a new run-api process; or maxServerErrors
// 5xx in a row) it registers again, letting go of the old env_id if the
// API still holds it. A refusal or a malformed answer is returned.
func (s *Serve) check(ctx context.Context) (atropos.Status, error) {
	r := s.retrier()
	fails := 0
	for {
		st, err := s.api.Status(ctx, s.sess.envID())
		switch {
		case err == nil && st.CurrentStep >= s.curStep:
			if env, ok := s.sess.last(); ok {
				s.sess.up(env, false)
			}
			s.setAPI("")
			s.step.Store(int64(st.CurrentStep))
			return st, nil
		case ctx.Err() != nil:
			return st, ctx.Err()
		case err == nil:
			why := fmt.Sprintf("the trainer's step went from %d to %d: a new rollout API process", s.curStep, st.CurrentStep)
			s.forgetAll(why)
			if err := s.registerAgain(ctx, why); err != nil {
				return st, err
			}
			r, fails = s.retrier(), 0
		case serverError(err):
			if fails++; fails < maxServerErrors {
				if !r.again(ctx, fmt.Sprintf("the rollout API fails (%v): asking again; the groups running go on", err)) {
					return st, ctx.Err()
				}
				continue
			}
			why := fmt.Sprintf("%v, %d times in a row: what server.py answers for an env_id it does not hold", err, fails)
			if err := s.registerAgain(ctx, why); err != nil {
				return st, err
			}
			r, fails = s.retrier(), 0
		case atropos.Unreachable(err):
			s.sess.down()
			fails = 0
			if !r.again(ctx, fmt.Sprintf("the rollout API at %s is unreachable (%v): waiting for it; the groups running go on", s.api.URL(), err)) {
				return st, ctx.Err()
			}
		default:
			return st, &fault.Infra{Err: err, Hint: "is " + s.api.URL() + " Atropos' rollout API (run-api)?"}
		}
	}
}

// registerAgain registers anew: the API no longer holds the environment.
func (s *Serve) registerAgain(ctx context.Context, why string) error {
	s.sess.down()
	s.setAPI("registering again: the rollout API no longer knows this environment")
	s.notify("warning", "the rollout API no longer knows env %d (%s): registering again", s.sess.envID(), why)
	return s.register(ctx)
}

// refusal reports whether the API refused the request or answered
// something else than the endpoint answers: errors waiting cannot mend.
func refusal(err error) bool {
	var e *atropos.Error
	return errors.As(err, &e) && !e.ServerError()
}

func serverError(err error) bool {
	var e *atropos.Error
	return errors.As(err, &e) && e.ServerError()
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
