package serve

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// derivedBatch is base.py derived_batch_size: the part of a batch this
// environment competes for, from the status' unallocated fraction and its
// own min_batch_allocation.
func (s *Serve) derivedBatch(st atropos.Status) int {
	if s.info.BatchSize == -1 {
		return -1
	}
	frac := st.UnallocatedFraction
	if m := s.cfg.Serve.MinBatchAllocation; m != nil {
		frac += *m
	}
	return int(float64(s.info.BatchSize) * frac)
}

// throttled is base.py env_manager's stop condition: the API holds
// max_batches_offpolicy batches the trainer has not taken (and, with a min
// batch allocation, this environment's own share of them), or the batch
// size is unknown. Generation stops until it clears.
func (s *Serve) throttled(st atropos.Status) bool {
	c, g, batch := s.cfg.Serve, s.size, s.info.BatchSize
	if s.derivedBatch(st) == -1 {
		return true
	}
	if c.MaxBatchesOffpolicy <= 0 || st.QueueSize*g < c.MaxBatchesOffpolicy*batch {
		return false
	}
	if c.MinBatchAllocation == nil {
		return true
	}
	mgs := maxGroupSize(st, g)
	own := int(math.Ceil(*c.MinBatchAllocation*float64(batch*c.MaxBatchesOffpolicy)/float64(mgs))) * (mgs / g)
	return own-st.SelfQueueSize <= 0
}

// maxGroupSize is the status' largest group queued; the environment's
// own group size when the API did not say.
func maxGroupSize(st atropos.Status, g int) int {
	if st.MaxGroupSize > 0 {
		return st.MaxGroupSize
	}
	return g
}

// limit is how many groups may be admitted and not yet decided, as
// base.py add_train_workers computes its workers: max_groups (none while
// an evaluation runs with STOP_TRAIN, eval_limit_ratio of them with
// LIMIT_TRAIN), no more than leave max_batches_offpolicy batches queued,
// and at least enough to keep a min batch allocation filled.
func (s *Serve) limit(st atropos.Status) int {
	if s.throttled(st) {
		return 0
	}
	c, g := s.cfg.Serve, s.size
	n := c.MaxGroups
	if s.eval.running() {
		switch c.EvalHandling {
		case config.EvalStopTrain:
			return 0
		case config.EvalLimitTrain:
			n = int(float64(n) * c.EvalLimitRatio)
		}
	}
	if c.MaxBatchesOffpolicy > 0 {
		n = min(n, c.MaxBatchesOffpolicy*s.derivedBatch(st)/g-st.QueueSize)
	}
	if m := c.MinBatchAllocation; m != nil {
		mgs := maxGroupSize(st, g)
		packs := math.Ceil(*m*float64(s.info.BatchSize*c.MaxBatchesOffpolicy)/float64(mgs)) + float64(mgs/g)
		queued := math.Floor(float64(mgs*st.SelfQueueSize) / (float64(mgs) / float64(g)))
		n = max(n, int(math.Max(0, math.Ceil((packs*float64(mgs)-queued)/float64(g)))))
	}
	return n
}

// admit starts groups until limit groups are in flight: the backlog
// (groups cut short) first, then the next of the sequence.
func (s *Serve) admit(gen context.Context, limit int) {
	for {
		s.mu.Lock()
		if s.inflight >= limit || gen.Err() != nil {
			s.mu.Unlock()
			return
		}
		var k key
		if len(s.backlog) > 0 {
			k, s.backlog = s.backlog[0], s.backlog[1:]
		} else if p := s.nextKey(true); p != nil {
			k = *p
		} else {
			s.mu.Unlock()
			return
		}
		s.known[k] = true
		s.inflight++
		ctx, cancel := context.WithCancelCause(gen)
		s.running[k] = cancel
		s.groups.Add(1)
		s.mu.Unlock()
		go s.runGroup(ctx, k)
	}
}

// nextKey is the next group of the sequence nobody has started (s.mu
// held); take moves past it. Epoch after epoch, each task in the epoch's
// order; nil when [serve] epochs are all started or there are no tasks.
func (s *Serve) nextKey(take bool) *key {
	n := len(s.order)
	if n == 0 {
		return nil
	}
	for i := s.next; ; i++ {
		epoch := i / n
		if e := s.cfg.Serve.Epochs; e > 0 && epoch >= e {
			return nil
		}
		k := key{s.shuffled(epoch)[i%n], epoch}
		if s.known[k] {
			continue
		}
		if take {
			s.next = i + 1
		} else {
			s.next = i
		}
		return &k
	}
}

// runGroup runs the rollouts a group is missing, at most run.concurrency
// rollouts at once across groups, and hands the group on when it is
// whole; a group cut short goes back to the backlog, unless serving stops.
func (s *Serve) runGroup(ctx context.Context, k key) {
	defer s.groups.Done()
	task := s.tasks[k.task]
	s.mu.Lock()
	done := map[int]bool{}
	for _, r := range s.recs[k] {
		done[r.rec.Attempt] = true
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	whole := true
	var mu sync.Mutex
	for a := k.epoch * s.size; a < (k.epoch+1)*s.size; a++ {
		if done[a] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := s.rollout(ctx, k, task, a)
			mu.Lock()
			whole = whole && ok
			mu.Unlock()
		}()
	}
	wg.Wait()
	s.mu.Lock()
	if cancel := s.running[k]; cancel != nil {
		cancel(nil)
		delete(s.running, k)
	}
	if !whole {
		s.inflight--
		if context.Cause(ctx) == errPreempted {
			s.backlog = append([]key{k}, s.backlog...) // an evaluation took its place: run it again first
		}
		s.mu.Unlock()
		s.poke()
		return
	}
	s.mu.Unlock()
	s.finished(k)
}

// rollout runs one attempt of a group in a slot; false when it was not
// recorded (cancelled, or the store failed, which ends serving).
func (s *Serve) rollout(ctx context.Context, k key, task scheduler.Task, attempt int) bool {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	rec, ok, err := s.attempt(ctx, task, attempt)
	<-s.sem
	if err != nil {
		s.fail(err)
		return false
	}
	if !ok {
		return false
	}
	s.mu.Lock()
	s.recs[k] = append(s.recs[k], recorded{rec: rec, at: time.Now()})
	s.stats.Finished++
	s.stats.Outcomes[rec.Outcome]++
	s.mu.Unlock()
	return true
}

// finished hands a whole group to the sender.
func (s *Serve) finished(k key) {
	s.mu.Lock()
	rs := append([]recorded(nil), s.recs[k]...)
	s.mu.Unlock()
	s.send.add(k, rs)
}

// decided is the sender's word that group k is decided (sent, dropped,
// refused) or given up until the next start: it no longer counts against
// the limit, and its records are no longer held.
func (s *Serve) decided(k key, sent bool) {
	s.mu.Lock()
	s.inflight--
	if sent {
		s.ackSeq++
	}
	delete(s.recs, k)
	s.mu.Unlock()
	s.poke()
}

// runningCount is how many groups are generating.
func (s *Serve) runningCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

// preempt cancels the groups generating for an evaluation with
// STOP_TRAIN, as base.py env_step_checks cancels its workers: their
// recorded rollouts stay, and the groups go back to the backlog.
func (s *Serve) preempt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range s.running {
		cancel(errPreempted)
	}
}

// waitGroups waits until no group generates.
func (s *Serve) waitGroups() { s.groups.Wait() }

// snapshot is what the progress line says besides the counts: the
// last status, and why serving waits.
type snapshot struct {
	st     atropos.Status
	steps  string // " of N", or why there is no limit
	polled bool   // a status was read
	api    string // why the API cannot be used now ("" while it answers)
	idle   string // why no more groups may start
}

// setAPI says why the API cannot be used now; "" when it answers.
func (s *Serve) setAPI(why string) {
	s.mu.Lock()
	s.snap.api = why
	s.mu.Unlock()
}

// snapshot keeps the loop's view for the progress line: the status, and
// why no more groups may start when limit allows none.
func (s *Serve) snapshot(st atropos.Status, limit int) {
	idle := ""
	c := s.cfg.Serve
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(s.backlog) == 0 && s.nextKey(false) == nil:
		idle = fmt.Sprintf("every group of the %d epochs has started", c.Epochs)
	case limit > s.inflight:
	case s.eval.running() && c.EvalHandling == config.EvalStopTrain:
		idle = "evaluating (STOP_TRAIN): no training group starts until it is over"
	case s.throttled(st) || limit <= 0:
		idle = fmt.Sprintf("throttled: the trainer is behind (%d groups queued at the API, max_batches_offpolicy %d)", st.QueueSize, c.MaxBatchesOffpolicy)
	default:
		idle = fmt.Sprintf("as many groups as may run (%d) are running or waiting to be sent", limit)
	}
	s.snap.st, s.snap.steps, s.snap.polled, s.snap.idle = st, s.stepsLeft(), true, idle
}

// progressLoop prints where serving stands every run.progress_interval
// (at least a second), also while the loop waits for the API; the
// function it returns stops it.
func (s *Serve) progressLoop() func() {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(max(s.cfg.Run.ProgressInterval.Duration, time.Second))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.progress()
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// progress prints where serving stands and, when it waits, why.
func (s *Serve) progress() {
	s.mu.Lock()
	running, inflight, recorded, snap := len(s.running), s.inflight, s.stats.Finished, s.snap
	s.mu.Unlock()
	step := "not registered yet"
	if snap.polled {
		step = fmt.Sprintf("trainer step %d%s", snap.st.CurrentStep, snap.steps)
	}
	var state []string
	switch {
	case snap.api != "":
		state = append(state, snap.api)
	case snap.idle != "" && (running == 0 || strings.HasPrefix(snap.idle, "throttled")):
		state = append(state, snap.idle)
	}
	if s.eval.running() && !strings.HasPrefix(snap.idle, "evaluating") {
		state = append(state, fmt.Sprintf("evaluating (%s)", s.cfg.Serve.EvalHandling))
	}
	why := ""
	if len(state) > 0 {
		why = "; " + strings.Join(state, "; ")
	}
	s.notify("", "%s, %d groups sent, %d running, %d waiting to be sent, %d queued at the API, %d rollouts recorded%s",
		step, s.send.sentCount(), running, inflight-running, snap.st.QueueSize, recorded, why)
}
