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
	"errors"
	"fmt"
	"io/fs"
	"os"
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
	lock    *rundir.Lock
	// created is the topmost folder Open made for the run directory ("":
	// it existed); started is set once Execute writes the manifest. A run
	// that never started leaves no folder it made behind.
	created string
	started bool
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
//
// A Driver with a method Command() string names the proctor command it
// is ("serve"): the run directory's lock names it to whoever finds the
// lock held or takes it over.
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
// the run it holds. It takes the directory's exclusive lock first: a
// directory another process writes to is refused, naming that process. A
// process run's attempts become its group size, and one resumed with
// another group size is refused before anything is written. Close releases
// the directory.
func Open(c *config.Config, opts ...Option) (*Run, error) {
	r := &Run{cfg: c, dir: filepath.Join(c.Run.OutDir, c.Run.Name), notify: func(Notice) {}}
	for _, o := range opts {
		o(r)
	}
	if err := r.lockDir(); err != nil {
		return nil, err
	}
	if err := r.open(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// lockDir makes the run directory and takes its exclusive lock.
func (r *Run) lockDir() error {
	r.created = firstMissing(r.dir)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		r.removeCreated()
		return &fault.Infra{Err: fmt.Errorf("run directory: %w", err), Hint: "check that the run directory is writable and the disk has room"}
	}
	cmd := "eval"
	if r.process {
		cmd = "process"
	}
	if d, ok := r.driver.(interface{ Command() string }); ok {
		cmd = d.Command() // the lock names the command that holds it
	}
	var err error
	r.lock, err = rundir.LockExclusive(r.dir, cmd)
	var held *rundir.HeldError
	var bad *rundir.BadLockError
	switch {
	case errors.As(err, &held):
		err = &fault.Usage{Err: err, Hint: fmt.Sprintf("wait for it to finish or stop it (kill %d), or write this run to another directory with --out", held.Holder.PID)}
	case errors.As(err, &bad):
		err = &fault.Usage{Err: err, Hint: "if no proctor writes to this run, remove " + bad.Path}
	case err != nil:
		err = &fault.Infra{Err: err, Hint: "check that the run directory is writable"}
	}
	if err != nil {
		r.removeCreated()
		return err
	}
	for _, o := range r.lock.TakenOver {
		r.notify(Notice{"note", fmt.Sprintf("took over the lock of %s, which is no longer running", o)})
	}
	return nil
}

// open reads what the locked run directory holds: the manifest of the run
// to resume (none: a new run) and its results.
func (r *Run) open() error {
	c := r.cfg
	// The manifest keeps the run id across resumes, so leftovers of a
	// killed run can be found by label.
	// Only a missing manifest means a new run: one that cannot be read
	// would make a resume a new run (a new id, no pruning) and overwrite it.
	prior, _, err := rundir.ReadManifest(r.dir)
	if err == nil && prior.RunID == "" {
		err = fmt.Errorf("%s names no run id", rundir.ManifestFile)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &fault.Usage{Err: fmt.Errorf("resume %s: %w", r.dir, err),
			Hint: "restore " + rundir.ManifestFile + " (it holds the run id a resume keeps), or move the directory away to start a new run"}
	}
	if r.process {
		if err := checkGroupSize(r.dir, prior, c.Process.GroupSize); err != nil {
			return err
		}
		c.Run.Attempts = c.Process.GroupSize
	}
	if r.store, err = rundir.Open(r.dir); err != nil {
		return &fault.Infra{Err: err, Hint: "check that the run directory is writable and the disk has room"}
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
	return nil
}

// ID is the run id, the same across resumes.
func (r *Run) ID() string { return r.man.RunID }

// Dir is the run directory.
func (r *Run) Dir() string { return r.dir }

// Close releases the run directory. A run that never started (its plugin
// did not load, it selects no task, ...) leaves no folder Open made.
func (r *Run) Close() error {
	var err error
	if r.store != nil {
		err = r.store.Close()
	}
	if !r.started && r.created != "" {
		if recs, rerr := rundir.Read(r.dir); rerr == nil && len(recs) == 0 {
			os.Remove(filepath.Join(r.dir, rundir.ResultsFile))
			os.Remove(filepath.Join(r.dir, rundir.TranscriptsDir))
		}
	}
	if uerr := r.lock.Unlock(); err == nil {
		err = uerr
	}
	if !r.started {
		r.removeCreated()
	}
	return err
}

// firstMissing is the topmost folder of dir that does not exist ("" when
// dir exists).
func firstMissing(dir string) string {
	missing := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			return missing
		}
		missing = d
		if filepath.Dir(d) == d {
			return missing
		}
	}
}

// removeCreated removes the folders Open made, from the run directory up
// to the topmost, as far as they are empty.
func (r *Run) removeCreated() {
	if r.created == "" {
		return
	}
	for d := filepath.Clean(r.dir); ; d = filepath.Dir(d) {
		if os.Remove(d) != nil || d == r.created || filepath.Dir(d) == d {
			return
		}
	}
}

// newRunID names a new run: its name, the time and a random suffix.
func newRunID(name string) string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%s-%s", name, time.Now().UTC().Format("20060102T150405"), hex.EncodeToString(b[:]))
}

// Pruner removes the sandboxes a killed invocation of the run left, found
// by the run id's label, and says how many.
type Pruner func(ctx context.Context, runID string) (int, error)
