package run

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
)

// GroupSink receives the groups of a process run: each task's rollouts,
// once its last attempt is recorded. GroupFiles writes them to the run
// directory; another sink may hand them to a trainer as they come.
type GroupSink interface {
	// Open prepares the sink for the run in dir, whose groups have size
	// rollouts, and returns the tasks whose groups it already holds from
	// an earlier invocation: they are not handed to it again.
	Open(dir string, size int) (held map[string]bool, err error)
	// Write takes one task's group, in attempt order. An error ends the
	// run: no group is handed over after it.
	Write(taskID string, recs []rundir.Record) error
	// Close ends the sink and returns its account for the manifest; it
	// is called also after a failed Open.
	Close() (*rundir.ProcessInfo, error)
}

// grouper collects a process run's records by task and hands each whole
// group to the sink, on one goroutine fed through a bounded channel: the
// scheduler's workers wait for a slot in the channel, never for the
// sink's writes.
type grouper struct {
	sink    GroupSink
	size    int
	held    map[string]bool            // tasks whose group the sink has
	pending map[string][]rundir.Record // records of tasks not yet handed over
	err     error                      // the first write error: nothing is handed over after it

	recs chan rundir.Record
	done chan struct{}
	stop func() // ends the run
}

// openGroups opens the run's group sink and hands it the groups that
// finished in results.jsonl but never reached it (a kill between the
// two); then it takes the records of the run as they land.
func (r *Run) openGroups(stop func()) (*grouper, error) {
	sink := r.sink
	if sink == nil {
		p := r.cfg.Process
		sink = NewGroupFiles(export.Filter{MinReward: p.MinReward, DropEqualScores: p.DropEqualScores, MaxTokens: p.MaxTokens})
	}
	g := &grouper{sink: sink, size: r.cfg.Process.GroupSize}
	if err := g.open(r.dir, r.store.Records()); err != nil {
		sink.Close()
		return nil, &fault.Infra{Err: err}
	}
	g.start(stop, r.cfg.Run.Concurrency)
	return g, nil
}

// open opens the sink and hands it every whole group of recorded.
func (g *grouper) open(dir string, recorded []rundir.Record) error {
	held, err := g.sink.Open(dir, g.size)
	if err != nil {
		return err
	}
	g.held, g.pending = held, map[string][]rundir.Record{}
	for _, rec := range recorded {
		if !g.held[rec.TaskID] {
			g.pending[rec.TaskID] = append(g.pending[rec.TaskID], rec)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(g.pending)) {
		if len(g.pending[id]) >= g.size {
			if err := g.write(id); err != nil {
				return err
			}
		}
	}
	return nil
}

// start takes records from add on a goroutine of its own, at most
// capacity of them waiting; stop is called at the first write error.
func (g *grouper) start(stop func(), capacity int) {
	g.recs, g.done, g.stop = make(chan rundir.Record, max(capacity, 1)), make(chan struct{}), stop
	go g.loop()
}

// add takes a record the run stored; the scheduler calls it, from
// several goroutines at once.
func (g *grouper) add(rec rundir.Record) { g.recs <- rec }

func (g *grouper) loop() {
	defer close(g.done)
	for rec := range g.recs {
		if g.err != nil || g.held[rec.TaskID] {
			continue // after an error, drained so no worker blocks
		}
		g.pending[rec.TaskID] = append(g.pending[rec.TaskID], rec)
		if len(g.pending[rec.TaskID]) < g.size {
			continue
		}
		if err := g.write(rec.TaskID); err != nil {
			// Every rollout from here on would be run for nothing:
			// end the run now; finish reports the error.
			g.err = err
			if g.stop != nil {
				g.stop()
			}
		}
	}
}

// write hands the task's group to the sink, in attempt order.
func (g *grouper) write(taskID string) error {
	recs := g.pending[taskID]
	slices.SortFunc(recs, func(a, b rundir.Record) int { return cmp.Compare(a.Attempt, b.Attempt) })
	if err := g.sink.Write(taskID, recs); err != nil {
		return err
	}
	g.held[taskID] = true
	delete(g.pending, taskID)
	return nil
}

// finish waits for the records taken so far to be handed over, closes
// the sink and returns its account, and the first write error.
func (g *grouper) finish() (*rundir.ProcessInfo, error) {
	close(g.recs)
	<-g.done
	info, err := g.sink.Close()
	if g.err != nil {
		return info, fmt.Errorf("write training groups: %w", g.err)
	}
	return info, err
}
