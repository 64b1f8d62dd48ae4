// Package serve is proctor serve: a run that feeds an RL trainer through
// Atropos' rollout API as an Atropos environment does
// (atroposlib/envs/base.py env_manager), instead of writing files.
//
// It registers the environment (waiting while the API says the trainer
// has not started), reads the trainer's batch size and token limit, and
// then, every poll, reads the environment's status and decides how many
// groups may run: none while the trainer is max_batches_offpolicy batches
// behind (base.py's throttle and add_train_workers arithmetic, min batch
// allocations included), fewer or none while an evaluation runs
// (eval_handling), none once the trainer has the steps it asked for. A
// group is group_size rollouts of one task; tasks are served epoch after
// epoch, each epoch in its own seeded order. A group is posted as soon as
// its last rollout is recorded, built as proctor process builds it (the
// same exact-token ScoredDataGroup, the same filters), several at once to
// /scored_data_list when they are ready together.
//
// Nothing is lost and nothing is sent twice: each group's fate is appended
// to serve.jsonl (synced) around its POST, so a restarted serve sends the
// groups whose rollouts finished but were never acknowledged, runs the
// missing rollouts of groups cut short, and continues the sequence. When
// the API restarts it registers again; when it is unreachable it waits,
// holding what it has; a group the API refuses (4xx) is recorded as
// refused and not sent again.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/run"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// Options are what a Serve needs besides the config.
type Options struct {
	// EvalParts are the parts of the evaluation runs (the environment
	// with [serve.eval] config); nil: steps_per_eval runs nothing.
	EvalParts *run.Parts
	// RunOptions are given to each evaluation's run (version, notices).
	RunOptions []run.Option
	// Notify receives what the user should know.
	Notify func(run.Notice)
	// HTTP is the client of the rollout API (nil: a default one).
	HTTP *http.Client
	// Poll is how often the status is read (default 100ms, base.py's).
	Poll time.Duration
	// Backoff is the first wait after the API failed, doubled up to 30s
	// (default 1s).
	Backoff time.Duration
	// Log receives debug lines (default slog.Default()).
	Log *slog.Logger
}

// Serve is a run.Driver: proctor serve.
type Serve struct {
	cfg  *config.Config
	api  *atropos.Client
	opts Options
	size int // group_size

	dir     string
	attempt scheduler.Attempter
	tasks   map[string]scheduler.Task
	order   []string // task ids, in the config's order
	idx     *index
	envs    *envLog       // the env_ids the API gave the run
	sem     chan struct{} // rollouts at once: run.concurrency

	sess    session
	info    atropos.Info
	total   int          // total_steps; 0: no limit
	curStep int          // base.py curr_step: the step evaluations are decided on
	step    atomic.Int64 // the trainer's step in the last status, for the index

	mu       sync.Mutex
	recs     map[key][]recorded              // each group's rollouts recorded so far
	known    map[key]bool                    // groups started, recorded or decided: never admitted again
	backlog  []key                           // groups cut short: their missing rollouts run first
	running  map[key]context.CancelCauseFunc // groups generating, with their cancel
	groups   sync.WaitGroup                  // groups generating
	inflight int                             // groups admitted and not yet decided (base.py's workers)
	ackSeq   int                             // groups acknowledged, ever
	next     int                             // the next group of the sequence to look at
	orders   map[int][]string                // epochs' orders of the tasks, as computed
	stats    scheduler.Stats
	fatal    error
	wake     chan struct{}
	snap     snapshot // what the progress line says

	send    *sender
	eval    evalState
	evalCtx context.Context // evaluations run on it
}

// recorded is a rollout's record and when it was stored.
type recorded struct {
	rec rundir.Record
	at  time.Time
}

var _ run.Driver = (*Serve)(nil)

// New makes the driver of a serve run of c.
func New(c *config.Config, opts Options) *Serve {
	if opts.Notify == nil {
		opts.Notify = func(run.Notice) {}
	}
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	if opts.Backoff <= 0 {
		opts.Backoff = time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Serve{cfg: c, opts: opts, size: c.Process.GroupSize, api: atropos.New(c.Serve.API, opts.HTTP),
		recs: map[key][]recorded{}, known: map[key]bool{}, running: map[key]context.CancelCauseFunc{}, wake: make(chan struct{}, 1),
		stats: scheduler.Stats{Outcomes: map[string]int{}}}
}

func (s *Serve) notify(level, format string, args ...any) {
	s.opts.Notify(run.Notice{Level: level, Text: "serve: " + fmt.Sprintf(format, args...)})
}

// Drive serves until the trainer has its steps, every epoch is sent, ctx
// ends (Ctrl-C: [serve] on_interrupt says what happens to the groups
// running) or something fails that waiting cannot mend.
func (s *Serve) Drive(ctx context.Context, runner *scheduler.Runner, tasks []scheduler.Task) (scheduler.Stats, error) {
	if err := s.open(runner, tasks); err != nil {
		return s.stats, err
	}
	defer s.idx.close()
	defer s.envs.close()
	// The sender too runs on its own context: what is whole is sent,
	// within drain_timeout, after the loop stops.
	s.send = newSender(s, context.WithoutCancel(ctx))
	stopProgress := s.progressLoop()
	defer stopProgress()
	if err := s.register(ctx); err != nil {
		s.send.cancel()
		s.leave(ctx)
		s.stats.Interrupted = ctx.Err() != nil
		if s.stats.Interrupted {
			return s.stats, nil
		}
		return s.stats, err
	}
	// Rollouts and evaluations run on their own context: on_interrupt =
	// "finish" lets them go on after Ctrl-C.
	gen, stopGen := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGen()
	var stopEval func()
	s.evalCtx, stopEval = context.WithCancel(context.WithoutCancel(ctx))
	defer stopEval()
	go s.send.loop()
	s.queueWhole(ctx)
	s.noteCutEvals()
	why, err := s.loop(ctx, gen)
	return s.stop(ctx, why, err, stopGen, stopEval)
}

// open prepares the run: the scheduler's attempter, the index with its
// group-size guard, and what earlier invocations recorded.
func (s *Serve) open(runner *scheduler.Runner, tasks []scheduler.Task) error {
	s.dir = runner.Store.Dir()
	var err error
	if s.attempt, err = runner.Attempter(); err != nil {
		return err
	}
	s.sem = make(chan struct{}, runner.Config.Concurrency)
	s.tasks = map[string]scheduler.Task{}
	for _, t := range tasks {
		s.tasks[t.ID] = t
		s.order = append(s.order, t.ID)
	}
	if s.idx, err = openIndex(s.dir); err != nil {
		return &fault.Infra{Err: err, Hint: "check that the run directory is writable"}
	}
	if s.envs, err = openEnvLog(s.dir); err != nil {
		s.idx.close()
		return &fault.Infra{Err: err, Hint: "check that the run directory is writable"}
	}
	if s.idx.first == nil {
		// Before any rollout: a run killed before its first group is
		// decided still says its group size.
		if err := s.idx.append(entry{State: stateOpen, GroupSize: s.size, ScoredAt: time.Now().UTC()}); err != nil {
			s.idx.close()
			return &fault.Infra{Err: err, Hint: "check that the run directory is writable and the disk has room"}
		}
	}
	if f := s.idx.first; f.GroupSize != s.size {
		s.idx.close()
		return &fault.Usage{
			Err:  fmt.Errorf("process.group_size is %d, but the serve run in %s was made with group_size %d (%s)", s.size, s.dir, f.GroupSize, rundir.ServeIndexFile),
			Hint: fmt.Sprintf("serve it with --set process.group_size=%d, or give this group size a new run directory with --out", f.GroupSize),
		}
	}
	for _, rec := range runner.Store.Records() {
		k := key{rec.TaskID, rec.Attempt / s.size}
		s.recs[k] = append(s.recs[k], recorded{rec: rec, at: rec.FinishedAt})
		s.known[k] = true
	}
	for _, e := range s.idx.entries() {
		s.known[e.key()] = true
	}
	var cut []key
	for k, rs := range s.recs {
		if len(rs) < s.size && !s.idx.decided(k) {
			cut = append(cut, k)
		}
	}
	slices.SortFunc(cut, func(a, b key) int { return compareKeys(a, b) })
	for _, k := range cut {
		if _, ok := s.tasks[k.task]; !ok {
			s.notify("warning", "group %s was cut short, but the config no longer selects task %s: its rollouts stay unsent", k, k.task)
			continue
		}
		s.backlog = append(s.backlog, k)
	}
	return nil
}

func compareKeys(a, b key) int {
	if a.epoch != b.epoch {
		return a.epoch - b.epoch
	}
	switch {
	case a.task < b.task:
		return -1
	case a.task > b.task:
		return 1
	}
	return 0
}

// queueWhole hands the sender the groups earlier invocations finished but
// never had acknowledged, oldest first. Those an earlier start posted
// and died before the answer of ("sending" last in serve.jsonl) are first
// looked for at /latest_example: when the API's latest group is one of
// them, the POST it went in was taken whole, and its groups are recorded
// as sent instead of being posted again.
func (s *Serve) queueWhole(ctx context.Context) {
	s.mu.Lock()
	var whole []key
	for k, rs := range s.recs {
		if len(rs) >= s.size && !s.idx.decided(k) {
			whole = append(whole, k)
		}
	}
	slices.SortFunc(whole, compareKeys)
	s.inflight += len(whole)
	s.mu.Unlock()
	var latest *atropos.Group
	var unknown error // the API's latest group could not be read before ctx ended
	asked, takenPost := false, -1
	var ready []built
	for _, k := range whole {
		s.mu.Lock()
		rs := append([]recorded(nil), s.recs[k]...)
		s.mu.Unlock()
		b, ok := s.send.build(k, rs)
		if !ok {
			return
		}
		if e, ok := s.idx.lastOf(k); ok && e.State == stateSending && b.group != nil {
			if !asked {
				latest, unknown = s.latestExample(ctx)
				asked = true
			}
			if same(latest, b.group) {
				takenPost = e.Post
			}
		}
		ready = append(ready, b)
	}
	for _, b := range ready {
		e, ok := s.idx.lastOf(b.k)
		sending := ok && e.State == stateSending && b.group != nil
		switch {
		case sending && unknown != nil:
			s.decided(b.k, false) // still "sending": the next start looks again
		case sending && e.Post == takenPost:
			s.send.acked([]built{b}, s.sess.envID(), "", "taken before: its answer was lost to a stop (GET /latest_example holds its POST)")
		default:
			s.send.queueBuilt(b)
		}
	}
}

// latestExample reads the API's latest group (GET /latest_example), asking
// again, with backoff, while the API is away or failing (5xx): posting
// without it could hand the trainer a group twice. Another answer (a 4xx,
// a malformed one) is warned of and taken as no group: those groups are
// posted again. The error is ctx's, when it ended first.
func (s *Serve) latestExample(ctx context.Context) (*atropos.Group, error) {
	wait := s.opts.Backoff
	for attempt := 0; ; attempt++ {
		g, err := s.api.LatestExample(ctx)
		switch {
		case err == nil:
			return g, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !atropos.Unreachable(err) && !serverError(err):
			s.notify("warning", "%v: the groups an earlier start was sending when it stopped are sent again; the trainer may get one of them twice", err)
			return nil, nil
		case attempt == 0:
			s.notify("warning", "%v: asking again before sending the groups an earlier start was sending when it stopped", err)
		}
		if !sleep(ctx, wait) {
			return nil, ctx.Err()
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// Stop reasons of the loop.
const (
	stopInterrupted = "interrupted"
	stopTrainerDone = "the trainer has the steps it asked for"
	stopEpochsDone  = "every epoch is sent"
	stopFailed      = "failed"
)

// loop polls the status and admits groups until a stop reason.
func (s *Serve) loop(ctx, gen context.Context) (string, error) {
	tick := time.NewTicker(s.opts.Poll)
	defer tick.Stop()
	for {
		if err := s.failed(); err != nil {
			return stopFailed, err
		}
		if ctx.Err() != nil {
			return stopInterrupted, nil
		}
		seq := s.acked()
		st, err := s.check(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return stopInterrupted, nil
			}
			return stopFailed, err
		}
		s.stepChecks(st)
		if s.trainerDone(st) {
			return stopTrainerDone, nil
		}
		if s.epochsDone() {
			return stopEpochsDone, nil
		}
		limit := s.limit(st) - (s.acked() - seq)
		s.snapshot(st, limit)
		s.admit(gen, limit)
		select {
		case <-ctx.Done():
		case <-tick.C:
		case <-s.wake:
		}
	}
}

// checkWhileDraining reads the status, while the sender drains, whenever
// the API was last found away: the loop that read it has stopped, and the
// sender waits for the API to answer before it sends, so without this it
// would wait out drain_timeout for an API that is back.
func (s *Serve) checkWhileDraining() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, ok := s.sess.current(); !ok {
				s.check(ctx)
			}
			if !sleep(ctx, s.opts.Poll) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// failed is the first error that ends serving, if any.
func (s *Serve) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// fail records the first error that ends serving and wakes the loop.
func (s *Serve) fail(err error) {
	s.mu.Lock()
	if s.fatal == nil {
		s.fatal = err
	}
	s.mu.Unlock()
	s.poke()
}

func (s *Serve) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Serve) acked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackSeq
}

// trainerDone is base.py's end of env_manager: the trainer's step plus the
// batches already queued pass total_steps.
func (s *Serve) trainerDone(st atropos.Status) bool {
	if s.total <= 0 || s.info.BatchSize <= 0 {
		return false
	}
	return st.CurrentStep+st.QueueSize*s.size/s.info.BatchSize > s.total
}

// epochsDone: with [serve] epochs, every group of every epoch is
// decided and none is left to send.
func (s *Serve) epochsDone() bool {
	if s.cfg.Serve.Epochs <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight == 0 && len(s.backlog) == 0 && s.nextKey(false) == nil
}

// stop ends serving for why. On Ctrl-C it drops or finishes the groups
// running (and the evaluation) as on_interrupt says; when the trainer or
// the epochs are done it stops generating but lets a running evaluation
// finish; on a failure it stops both. Then it sends what is whole within
// drain_timeout, says goodbye to the API and returns the run's stats.
func (s *Serve) stop(ctx context.Context, why string, err error, stopGen, stopEval func()) (scheduler.Stats, error) {
	switch {
	case why == stopInterrupted && s.cfg.Serve.OnInterrupt == "finish":
		s.notify("", "interrupted: finishing the %d groups running and sending them (Ctrl-C again to exit at once)", s.runningCount())
		s.waitGroups()
	case why == stopTrainerDone || why == stopEpochsDone:
		stopGen()
		s.waitGroups()
	default:
		stopGen()
		stopEval()
		s.waitGroups()
	}
	if why != stopFailed {
		s.notify("", "stopping: %s", why)
	}
	s.eval.wait()
	stopChecking := s.checkWhileDraining()
	s.send.drain(s.cfg.Serve.DrainTimeout.Duration)
	stopChecking()
	if e := s.send.err(); err == nil && e != nil {
		err = e
	}
	s.leave(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only a trainer that has its steps, or every epoch sent, finishes
	// the run: anything else leaves work for the next start.
	s.stats.Interrupted = why != stopTrainerDone && why != stopEpochsDone
	if s.fatal != nil && err == nil {
		err = s.fatal
	}
	return s.stats, err
}

// Command names the command a serve run is, for the run directory's lock.
func (s *Serve) Command() string { return "serve" }

// Account writes the serve run's account into the manifest: every
// invocation's groups, from serve.jsonl.
func (s *Serve) Account(m *rundir.Manifest) {
	if s.idx == nil {
		return
	}
	info := &rundir.ServeInfo{API: s.cfg.Serve.API, GroupSize: s.size, Dropped: map[string]int{}, TrainerStep: s.curStep}
	if env, ok := s.sess.last(); ok {
		info.Name, info.EnvID = env.Name, env.ID
	}
	for _, e := range s.idx.entries() {
		switch e.State {
		case stateSent:
			info.Sent++
		case stateRejected:
			info.Rejected++
		case stateDropped:
			info.Dropped[e.Dropped]++
		}
		for why, n := range e.Skipped {
			if info.Skipped == nil {
				info.Skipped = map[string]int{}
			}
			info.Skipped[why] += n
		}
	}
	s.mu.Lock()
	for k, rs := range s.recs {
		if len(rs) >= s.size && !s.idx.decided(k) {
			info.Pending++
		}
	}
	s.mu.Unlock()
	info.Evals = s.eval.finished(s.dir)
	m.Serve = info
}

// shuffled (s.mu held) is epoch's order of the tasks: the config's, shuffled with a
// seed of run.seed and the epoch, so a restart continues the same
// sequence.
func (s *Serve) shuffled(epoch int) []string {
	if o, ok := s.orders[epoch]; ok {
		return o
	}
	if s.orders == nil || len(s.orders) > 64 {
		s.orders = map[int][]string{}
	}
	order := slices.Clone(s.order)
	r := rand.New(rand.NewPCG(s.cfg.Run.Seed, uint64(epoch)))
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	s.orders[epoch] = order
	return order
}

// errPreempted: a group was cut short by an evaluation (STOP_TRAIN).
var errPreempted = errors.New("preempted by an evaluation")
