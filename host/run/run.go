// Package run owns a run end to end. Open opens its run directory: a new
// run, or the resume of the run the directory holds (same run id, only the
// missing rollouts run); Execute loads the tasks, refuses a resume that
// would run other plugin bytes, writes manifest.json and the resolved
// config, drives the scheduler, and writes summary.json and report.html at
// the end. A process run (WithProcess) also hands each task's group of
// rollouts, as soon as its last attempt is recorded, to a GroupSink: the
// training files of the run directory, or whatever WithGroupSink gives.
//
// The caller builds the parts (sandbox backend, environment, stacked
// rewards, agent) and says what to print; cmd/proctor is one such caller.
// Errors the user must act on are fault.Usage or fault.Infra with a hint.
package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
)

// Run is one invocation of a run: it holds the run directory open from
// Open to Close.
type Run struct {
	cfg      *config.Config
	dir      string
	version  string
	progress scheduler.Progress
	notify   func(Notice)
	process  bool
	sink     GroupSink // a process run's; nil means the training files
	driver   Driver    // runs the rollouts instead of the scheduler's plan; nil: the plan

	man     rundir.Manifest
	resumed bool
	store   *rundir.Store
}

// Option sets up a Run.
type Option func(*Run)

// WithDir sets the run directory; "" keeps the default,
// <run.out_dir>/<run.name>.
func WithDir(dir string) Option {
	return func(r *Run) {
		if dir != "" {
			r.dir = dir
		}
	}
}

// WithVersion is the proctor version the manifest records.
func WithVersion(v string) Option { return func(r *Run) { r.version = v } }

// WithProgress receives the scheduler's events.
func WithProgress(p scheduler.Progress) Option { return func(r *Run) { r.progress = p } }

// WithNotices receives what the user should know that does not stop the
// run.
func WithNotices(f func(Notice)) Option { return func(r *Run) { r.notify = f } }

// WithProcess makes the run a process run (proctor process): [process]
// group_size attempts of every task, each task's group written to the
// training files of the run directory (GroupFiles) as soon as its last
// attempt is recorded.
func WithProcess() Option { return func(r *Run) { r.process = true } }

// WithGroupSink makes the run a process run whose groups go to sink
// instead of the training files.
func WithGroupSink(sink GroupSink) Option {
	return func(r *Run) { r.process, r.sink = true, sink }
}

// Driver runs a run's rollouts in place of the scheduler's plan of every
// task × attempt: proctor serve, which admits groups as a trainer asks for
// them, drives the run this way (runner.Attempter runs one identity).
// Execute still loads the tasks, guards a resume, writes the manifest and
// the config before, and summary.json, the manifest and report.html
// after.
type Driver interface {
	// Drive runs rollouts until it is done or ctx ends, and says what ran.
	Drive(ctx context.Context, runner *scheduler.Runner, tasks []scheduler.Task) (scheduler.Stats, error)
	// Account writes the driver's account into the manifest written at
	// the end of Execute.
	Account(m *rundir.Manifest)
}

// WithDriver has d run the rollouts (see Driver).
func WithDriver(d Driver) Option { return func(r *Run) { r.driver = d } }

// Notice is something the user should know that does not stop the run.
type Notice struct {
	Level string // "note" or "warning"; "" for plain information
	Text  string
}

// Open opens the run directory of c for a run: a new one, or the resume of
// the run it holds. A process run's attempts become its group size, and
// one resumed with another group size is refused before anything is
// written. Close releases the directory.
func Open(c *config.Config, opts ...Option) (*Run, error) {
	r := &Run{cfg: c, dir: filepath.Join(c.Run.OutDir, c.Run.Name), notify: func(Notice) {}}
	for _, o := range opts {
		o(r)
	}
	// The manifest keeps the run id across resumes, so leftovers of a
	// killed run can be found by label.
	prior, _, err := rundir.ReadManifest(r.dir)
	if err != nil || prior.RunID == "" {
		prior = rundir.Manifest{}
	}
	if r.process {
		if err := checkGroupSize(r.dir, prior, c.Process.GroupSize); err != nil {
			return nil, err
		}
		c.Run.Attempts = c.Process.GroupSize
	}
	if r.store, err = rundir.Open(r.dir); err != nil {
		return nil, &fault.Infra{Err: err, Hint: "check that the run directory is writable and the disk has room"}
	}
	r.man, r.resumed = prior, prior.RunID != ""
	if r.resumed {
		r.man.ResumedAt = append(r.man.ResumedAt, time.Now().UTC())
		if r.man.ConfigHash != c.Hash() {
			r.notify(Notice{"note", "the config changed since this run started; only missing rollouts run"})
		}
	} else {
		r.man = rundir.Manifest{RunID: newRunID(c.Run.Name), Name: c.Run.Name, StartedAt: time.Now().UTC()}
	}
	r.man.FinishedAt = nil
	return r, nil
}

// ID is the run id, the same across resumes.
func (r *Run) ID() string { return r.man.RunID }

// Dir is the run directory.
func (r *Run) Dir() string { return r.dir }

// Close releases the run directory.
func (r *Run) Close() error { return r.store.Close() }

// newRunID names a new run: its name, the time and a random suffix.
func newRunID(name string) string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%s-%s", name, time.Now().UTC().Format("20060102T150405"), hex.EncodeToString(b[:]))
}

// Pruner removes the sandboxes a killed invocation of the run left, found
// by the run id's label, and says how many.
type Pruner func(ctx context.Context, runID string) (int, error)
