package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// Bounds of one POST: the groups ready together go in one
// /scored_data_list, up to these.
const (
	maxPerPost  = 16
	maxRefusals = 3 // refusals in a row that end serving: the API and proctor disagree on the format
)

// sender posts whole groups to the API, one POST at a time, in the order
// they became whole, and records each group's fate in serve.jsonl around
// the POST: "sending" before it, "sent" after the API's answer. A POST
// that fails is tried again (the API answering again, or registered anew)
// until it is acknowledged or refused, or the drain ends.
type sender struct {
	s      *Serve
	ctx    context.Context
	cancel func()

	mu       sync.Mutex
	queue    []built
	stopping bool
	kick     chan struct{}
	done     chan struct{}
	firstErr error
	sent     int
	handed   int             // whole groups queued, ever
	refusals int             // in a row
	said     map[string]bool // drop reasons said (unsendable)
}

func newSender(s *Serve, parent context.Context) *sender {
	ctx, cancel := context.WithCancel(parent)
	return &sender{s: s, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}), said: map[string]bool{}}
}

// add builds a whole group and queues it (a dropped group is recorded
// when its turn comes).
func (q *sender) add(k key, rs []recorded) {
	if b, ok := q.build(k, rs); ok {
		q.queueBuilt(b)
	}
}

// build builds a group; a failure ends serving.
func (q *sender) build(k key, rs []recorded) (built, bool) {
	b, err := q.s.build(k, rs)
	if err != nil {
		q.s.fail(&fault.Infra{Err: fmt.Errorf("build group %s: %w", k, err), Hint: "check the run directory's transcripts; serving again resumes"})
		q.s.decided(k, false)
		return b, false
	}
	return b, true
}

// queueBuilt queues a built group.
func (q *sender) queueBuilt(b built) {
	q.mu.Lock()
	q.queue = append(q.queue, b)
	q.handed++
	q.mu.Unlock()
	q.poke()
}

func (q *sender) poke() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// loop sends until drained.
func (q *sender) loop() {
	defer close(q.done)
	for {
		q.mu.Lock()
		batch, dropped := q.take(maxPerPost)
		stopping := q.stopping
		q.mu.Unlock()
		for _, b := range dropped {
			q.record(b)
		}
		if len(batch) == 0 && len(dropped) > 0 {
			continue
		}
		if len(batch) == 0 {
			if stopping {
				return
			}
			select {
			case <-q.kick:
			case <-q.ctx.Done():
				return
			}
			continue
		}
		if !q.post(batch) {
			return // the drain ended with groups unsent: the next start sends them
		}
	}
}

// take removes what goes in the next POST, at most n groups, from the
// queue, and the dropped groups before them (q.mu held).
func (q *sender) take(n int) (batch, dropped []built) {
	for len(q.queue) > 0 && len(batch) < n {
		b := q.queue[0]
		q.queue = q.queue[1:]
		if b.group == nil {
			dropped = append(dropped, b)
			continue
		}
		batch = append(batch, b)
	}
	return batch, dropped
}

// record writes a dropped group's line. The first group that cannot be
// sent for a reason that holds for the whole run (no exact token ids, no
// rollout a model generated) says so, and what to set.
func (q *sender) record(b built) {
	why := q.s.unsendable(b)
	q.mu.Lock()
	say := why != "" && !q.said[b.entry.Dropped]
	q.said[b.entry.Dropped] = q.said[b.entry.Dropped] || say
	q.mu.Unlock()
	if say {
		q.s.notify("warning", "%s", why)
	}
	if err := q.s.idx.append(b.entry); err != nil {
		q.fail(err)
	}
	q.s.decided(b.k, false)
}

// post sends a batch until the API acknowledges or refuses it; false
// when the drain ended first.
func (q *sender) post(batch []built) bool {
	s := q.s
	post := s.idx.nextPost()
	var sending []entry
	groups := make([]atropos.Group, len(batch))
	ambiguous, ambGen := false, 0
	for i, b := range batch {
		e := b.entry
		e.State, e.Post = stateSending, post
		sending = append(sending, e)
		groups[i] = *b.group
	}
	if err := s.idx.append(sending...); err != nil {
		q.fail(err)
		return false
	}
	wait := s.opts.Backoff
	for attempt := 0; ; attempt++ {
		env, gen, err := s.sess.wait(q.ctx)
		if err != nil {
			return false
		}
		if !ambiguous {
			var ok bool
			if batch, groups, ok = q.grow(batch, groups, post); !ok {
				return false
			}
		}
		var held bool
		if ambiguous && ambGen == gen {
			held, err = q.taken(batch) // an error: ask again before posting
		}
		if held {
			q.acked(batch, env.ID, "", "taken before: its answer was lost (GET /latest_example holds it)")
			return true
		}
		var ack atropos.Ack
		var ep string
		if err == nil {
			ack, ep, err = s.api.Send(q.ctx, env.ID, groups)
		}
		var te *atropos.TransportError
		switch {
		case err == nil:
			q.acked(batch, env.ID, ep, ack.Status)
			return true
		case refusal(err):
			q.refused(batch, env.ID, err)
			return true
		case errors.As(err, &te) && te.Sent:
			ambiguous, ambGen = true, gen // it may have arrived: ask before sending it again
		}
		if q.ctx.Err() != nil {
			return false
		}
		if attempt == 0 {
			s.notify("warning", "%v: sending group %s again when the API answers", err, batch[0].k)
		}
		if !sleep(q.ctx, wait) {
			return false
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// grow adds to a POST that cannot have reached the API the whole groups
// queued since it was made, up to maxPerPost, with "sending" lines of the
// same POST number: groups that become whole together while the API is
// away go in one /scored_data_list, as base.py posts the groups its
// workers return together. False when serve.jsonl cannot be written.
func (q *sender) grow(batch []built, groups []atropos.Group, post int) ([]built, []atropos.Group, bool) {
	q.mu.Lock()
	more, dropped := q.take(maxPerPost - len(batch))
	q.mu.Unlock()
	for _, b := range dropped {
		q.record(b)
	}
	if len(more) == 0 {
		return batch, groups, true
	}
	sending := make([]entry, len(more))
	for i, b := range more {
		sending[i] = b.entry
		sending[i].State, sending[i].Post = stateSending, post
		groups = append(groups, *b.group)
	}
	if err := q.s.idx.append(sending...); err != nil {
		q.fail(err)
		return batch, groups, false
	}
	return append(batch, more...), groups, true
}

// taken reports whether the API already holds the batch, one POST whose
// answer was lost: its latest example is one of the batch's groups (a
// list is queued whole or not at all). The API away or failing (5xx) is
// an error: the caller asks again before posting. Another answer (a 4xx,
// a malformed one) is taken as no: the batch is posted again.
func (q *sender) taken(batch []built) (bool, error) {
	latest, err := q.s.api.LatestExample(q.ctx)
	switch {
	case err != nil && (atropos.Unreachable(err) || serverError(err)):
		return false, err
	case err != nil:
		q.s.notify("warning", "%v: sending group %s again; the trainer may get it twice", err, batch[0].k)
		return false, nil
	}
	return slices.ContainsFunc(batch, func(b built) bool { return same(latest, b.group) }), nil
}

// acked records an acknowledged batch.
func (q *sender) acked(batch []built, envID int, ep, ack string) {
	s := q.s
	now := time.Now().UTC()
	id := envID
	step := int(s.step.Load())
	var es []entry
	for _, b := range batch {
		e := b.entry
		e.State, e.EnvID, e.Endpoint, e.Ack, e.SentAt, e.Step = stateSent, &id, ep, ack, &now, step
		es = append(es, e)
	}
	if err := s.idx.append(es...); err != nil {
		q.fail(err)
	}
	q.mu.Lock()
	q.sent += len(batch)
	q.refusals = 0
	q.mu.Unlock()
	for _, b := range batch {
		s.decided(b.k, true)
	}
}

// refused records a batch the API refused; refusals in a row end serving.
func (q *sender) refused(batch []built, envID int, err error) {
	s := q.s
	id := envID
	var es []entry
	for _, b := range batch {
		e := b.entry
		e.State, e.EnvID, e.Reason = stateRejected, &id, err.Error()
		es = append(es, e)
	}
	if werr := s.idx.append(es...); werr != nil {
		q.fail(werr)
	}
	s.notify("warning", "the rollout API refused group %s (%d in the POST): %v", batch[0].k, len(batch), err)
	q.mu.Lock()
	q.refusals++
	n := q.refusals
	q.mu.Unlock()
	for _, b := range batch {
		s.decided(b.k, false)
	}
	if n >= maxRefusals {
		q.fail(&fault.Infra{Err: fmt.Errorf("the rollout API refused %d posts in a row: %w", n, err),
			Hint: "is " + s.api.URL() + " Atropos' rollout API (run-api) of a version that takes ScoredData as atroposlib/api/server.py defines it? The refused groups are in " + "serve.jsonl"})
	}
}

// fail ends serving with err.
func (q *sender) fail(err error) {
	q.mu.Lock()
	if q.firstErr == nil {
		q.firstErr = err
	}
	q.mu.Unlock()
	q.s.fail(err)
}

func (q *sender) err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.firstErr
}

func (q *sender) sentCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent
}

// drain lets the sender send what is queued, for at most d, and stops it.
func (q *sender) drain(d time.Duration) {
	q.mu.Lock()
	q.stopping = true
	q.mu.Unlock()
	q.poke()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-q.done:
	case <-t.C:
		q.s.notify("warning", "groups still unsent after drain_timeout (%s): the next start sends them", d)
		q.cancel()
		<-q.done
	}
}
