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
// waiting (every second) while the API says the trainer has not started
// and, beyond it, while the API is unreachable or failing; then reads
// /info. A refusal or a malformed answer ends serving: waiting cannot mend
// it.
func (s *Serve) register(ctx context.Context) error {
	said := ""
	say := func(level, msg string) {
		if msg != said {
			s.notify(level, "%s", msg)
			said = msg
		}
	}
	wait := s.opts.Backoff
	for {
		env, waiting, ok, err := s.api.RegisterEnv(ctx, s.registration())
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case refusal(err):
			return &fault.Usage{Err: err, Hint: "check [serve] (name, weight, group size, max_token_length) against the rollout API at " + s.api.URL()}
		case err != nil:
			say("warning", fmt.Sprintf("waiting for the rollout API at %s: %v", s.api.URL(), err))
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
			wait = min(2*wait, 30*time.Second)
			continue
		case !ok:
			say("", fmt.Sprintf("waiting for the trainer to start (the rollout API at %s says %q)", s.api.URL(), waiting))
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
			continue
		}
		if err := s.readInfo(ctx, env); err != nil {
			if ctx.Err() != nil || refusal(err) || groupTooLarge(err) {
				return err
			}
			say("warning", fmt.Sprintf("waiting for the rollout API at %s: %v", s.api.URL(), err))
			sleep(ctx, wait)
			continue
		}
		s.curStep = env.StartingStep
		s.sess.up(env, true)
		s.notify("", "registered with the rollout API at %s as %s (env %d): batch_size %d, max_token_len %d, trainer at step %d%s",
			s.api.URL(), env.Name, env.ID, s.info.BatchSize, s.info.MaxTokenLen, env.StartingStep, s.stepsLeft())
		return nil
	}
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
	s.info = in // the loop's goroutine writes it; builds read it under s.mu
	s.mu.Unlock()
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

// check reads the environment's status. While the API is unreachable it
// waits (the groups running go on; the sender holds); when the API no
// longer knows the environment (a 5xx: server.py fails on an unknown
// env_id) or its step went back (a new run-api process), it registers
// again. A refusal or a malformed answer is returned.
func (s *Serve) check(ctx context.Context) (atropos.Status, error) {
	wait := s.opts.Backoff
	for {
		st, err := s.api.Status(ctx, s.sess.envID())
		switch {
		case err == nil && st.CurrentStep >= s.curStep:
			if env, ok := s.sess.last(); ok {
				s.sess.up(env, false)
			}
			s.step.Store(int64(st.CurrentStep))
			return st, nil
		case ctx.Err() != nil:
			return st, ctx.Err()
		case err == nil, serverError(err):
			why := fmt.Sprintf("its step went from %d to %d", s.curStep, st.CurrentStep)
			if err != nil {
				why = err.Error()
			}
			s.sess.down()
			s.notify("warning", "the rollout API no longer knows this environment (%s): registering again", why)
			if err := s.register(ctx); err != nil {
				return st, err
			}
		case atropos.Unreachable(err):
			if _, ok := s.sess.current(); ok {
				s.notify("warning", "%v: waiting for it; the groups running go on", err)
			}
			s.sess.down()
			if !sleep(ctx, wait) {
				return st, ctx.Err()
			}
			wait = min(2*wait, 30*time.Second)
		default:
			return st, &fault.Infra{Err: err, Hint: "is " + s.api.URL() + " Atropos' rollout API (run-api)?"}
		}
	}
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
