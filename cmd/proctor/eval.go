package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	hostrun "github.com/proctor-dev/proctor/host/run" // main has its own run
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/report"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/host/term"
)

type evalCmd struct {
	Config string   `arg:"" help:"Run configuration (TOML)." type:"path"`
	Set    []string `help:"Override a config key: --set section.key=value (repeatable)." placeholder:"KEY=VALUE" sep:"none"`
	Out    string   `help:"Run directory (default: <run.out_dir>/<run.name>)."`
	Resume bool     `help:"Continue the run in the directory (also the default when it has results)."`
}

func (e evalCmd) Run(g *globals) error { return execute(g, e.Config, e.Set, e.Out) }

// execute runs, or resumes, the run of the config file path into out (""
// for the config's own directory): it builds the run's parts, has the run
// library run it, and prints what happened.
func execute(g *globals, path string, sets []string, out string, opts ...hostrun.Option) error {
	c, err := assemble.LoadConfig(path, sets)
	if err != nil {
		return err
	}
	return executeConfig(g, c, out, nil, opts...)
}

// executeConfig runs, or resumes, the run of c into out; wired, when not
// nil, sees the run's parts before it starts; opts may replace the
// defaults.
func executeConfig(g *globals, c *config.Config, out string, wired func(hostrun.Parts), opts ...hostrun.Option) error {
	// The caller's options come last: they may replace these.
	opts = append([]hostrun.Option{hostrun.WithDir(out), hostrun.WithVersion(fullVersion()), hostrun.WithNotices(notices(g.stderr)),
		hostrun.WithProgress(scheduler.NewProgress(g.stderr, isTTY(g.stderr), c.Run.ProgressInterval.Duration))}, opts...)
	r, err := hostrun.Open(c, opts...)
	if err != nil {
		return err
	}
	defer r.Close()
	parts, done, err := host().Parts(g.ctx, c)
	if err != nil {
		return err
	}
	defer done()
	if wired != nil {
		wired(parts)
	}
	res, err := r.Execute(g.ctx, parts)
	if res == nil {
		return err
	}
	fmt.Fprintf(g.stdout, "run %s: %s\n", res.RunID, res.Dir)
	report.Write(g.stdout, res.Summary, "text")
	printServed(g.stdout, res.Dir)
	switch {
	case err != nil:
		return err
	case res.Stats.Interrupted:
		fmt.Fprintf(g.stderr, "proctor: interrupted: %d rollouts recorded; run the same command again to resume\n", res.Stats.Finished+res.Stats.Skipped)
		return errInterrupted
	}
	return incomplete(g.stderr, res.Summary)
}

// incomplete says on w what the run could not score, and returns
// errSomeFailed when there is any: rollouts that ended as infra_error, and
// rollouts a [[reward]] plugin failed on (their reward lacks its score).
func incomplete(w io.Writer, s report.Summary) error {
	failed := false
	if n := s.Outcomes[rundir.OutcomeInfraError]; n > 0 {
		fmt.Fprintf(w, "proctor: %d rollouts ended as infra_error (see the report)\n", n)
		failed = true
	}
	for _, name := range slices.Sorted(maps.Keys(s.Rewards)) {
		if r := s.Rewards[name]; r.Errors > 0 {
			fmt.Fprintf(w, "proctor: error: reward plugin %s failed on %d of %d rollouts; the first: %s\n",
				term.Line(name), r.Errors, r.Errors+r.N, term.Line(r.FirstError))
			failed = true
		}
	}
	if failed {
		return errSomeFailed
	}
	return nil
}

// notices prints the run's notices to w: "proctor: warning: ...".
func notices(w io.Writer) func(hostrun.Notice) {
	return func(n hostrun.Notice) {
		if n.Level == "" {
			fmt.Fprintf(w, "proctor: %s\n", term.Text(n.Text))
			return
		}
		fmt.Fprintf(w, "proctor: %s: %s\n", n.Level, term.Text(n.Text))
	}
}

func isTTY(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type tasksCmd struct {
	Config string   `arg:"" help:"Run configuration (TOML)." type:"path"`
	Set    []string `help:"Override a config key." placeholder:"KEY=VALUE" sep:"none"`
}

func (t tasksCmd) Run(g *globals) error {
	c, err := assemble.LoadConfig(t.Config, t.Set)
	if err != nil {
		return err
	}
	env, _, rt, err := host().Environment(g.ctx, c)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	tasks, skipped, err := env.Tasks(g.ctx)
	if err != nil {
		return &fault.Usage{Err: fmt.Errorf("load tasks: %w", err)}
	}
	broken := 0
	for _, tk := range tasks {
		if tk.Broken != "" {
			broken++
			fmt.Fprintf(g.stdout, "%s\t%s\t%s\tbroken: %s\n", term.Line(tk.ID), term.Line(tk.Category), term.Line(tk.Difficulty), term.Line(tk.Broken))
			continue
		}
		timeout := tk.AgentTimeout
		if timeout == 0 {
			timeout = c.Run.AgentTimeout.Duration
		}
		fmt.Fprintf(g.stdout, "%s\t%s\t%s\t%s\n", term.Line(tk.ID), term.Line(tk.Category), term.Line(tk.Difficulty), timeout)
	}
	for _, s := range skipped {
		fmt.Fprintf(g.stderr, "skipped %s: %s\n", term.Line(s.ID), term.Text(s.Reason))
	}
	if broken > 0 {
		fmt.Fprintf(g.stderr, "%d tasks, %d of them broken (their rollouts will be infra errors)\n", len(tasks), broken)
	} else {
		fmt.Fprintf(g.stderr, "%d tasks\n", len(tasks))
	}
	return nil
}

type reportCmd struct {
	Dir    string `arg:"" help:"Run directory." type:"existingdir"`
	Format string `help:"text, json, md or html (one self-contained page)." default:"text" enum:"text,json,md,html"`
	Out    string `help:"Write the report to this file (atomically) instead of stdout." type:"path" placeholder:"FILE"`
}

func (r reportCmd) Run(g *globals) error {
	release, err := readRun(g, r.Dir, "report", true)
	if err != nil {
		return err
	}
	defer release()
	// Read, not Open: the run may still be writing to the directory.
	var buf bytes.Buffer
	if r.Format == "html" {
		err = report.WriteHTML(&buf, r.Dir, report.HTMLOptions{})
	} else {
		var recs []rundir.Record
		if recs, err = rundir.Read(r.Dir); err == nil {
			err = report.Write(&buf, report.SummarizeIn(r.Dir, recs), r.Format)
		}
	}
	if err != nil {
		return &fault.Infra{Err: err}
	}
	if r.Out == "" {
		_, err = g.stdout.Write(buf.Bytes())
	} else {
		err = rundir.WriteFileAtomic(r.Out, buf.Bytes())
	}
	if err != nil {
		return &fault.Infra{Err: err}
	}
	return nil
}

// readRun opens the run directory dir for a reader (command): it must
// hold a run, and the reader takes its shared lock, which a run being
// written does not refuse. With note, it says when a writer is still at
// work, so what is read is the run so far. release drops the lock.
func readRun(g *globals, dir, command string, note bool) (release func(), err error) {
	if _, err := os.Stat(filepath.Join(dir, rundir.ResultsFile)); err != nil {
		return nil, &fault.Usage{Err: fmt.Errorf("%s has no %s", dir, rundir.ResultsFile), Hint: "give the directory a run wrote (runs/<name>)"}
	}
	l, err := rundir.LockShared(dir, command)
	if err != nil {
		return nil, &fault.Infra{Err: err}
	}
	if w, ok := rundir.Writer(dir); ok && note {
		fmt.Fprintf(g.stderr, "proctor: note: %s is still writing this run: what follows is the run so far\n", w)
	}
	return func() { l.Unlock() }, nil
}

type sandboxCmd struct {
	Prune          pruneCmd   `cmd:"" help:"Remove sandboxes left by killed runs."`
	SeccompProfile seccompCmd `cmd:"" name:"seccomp-profile" help:"Print the seccomp profile of isolated sandboxes, for Kubernetes nodes (docs/kubernetes.md)."`
}

type pruneCmd struct {
	RunID  string `name:"run" help:"Only the sandboxes of this run id (see manifest.json)."`
	Config string `help:"A run config: prune in the sandbox backend it names (a Kubernetes namespace, say) instead of the local Docker engine." type:"existingfile"`
}

func (p pruneCmd) Run(g *globals) error {
	c := &config.Config{}
	c.Sandbox.Backend = "docker"
	if p.Config != "" {
		var err error
		if c, err = assemble.LoadConfig(p.Config, nil); err != nil {
			return err
		}
	}
	_, prune, err := assemble.Backend(g.ctx, c)
	if err != nil {
		return err
	}
	n, err := prune(g.ctx, p.RunID)
	fmt.Fprintf(g.stdout, "removed %d sandboxes\n", n)
	if err != nil {
		return &fault.Infra{Err: err}
	}
	return nil
}
