package export

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// Options says what Files writes of a run directory.
type Options struct {
	Format string // atropos, sft or atif
	// Out is the file for atropos and sft ("": Stdout), the folder for
	// atif.
	Out    string
	Stdout io.Writer
	// Messages is where atropos writes the groups without exact token ids
	// ("": they are counted, not written).
	Messages string
	Filter   Filter
	Version  string // proctor's, for ATIF's agent version
}

// Stats is what Files wrote and left out.
type Stats struct {
	Groups, Dropped, Rollouts, Written int
	DroppedBy, Skipped                 map[string]int
	WithTokens, WithoutTokens          int
	FirstNoTokens                      string // the first group without exact token ids, and why
}

// Files writes the rollouts of the run directory dir as o says: Atropos
// groups or SFT lines into one JSONL file (put in place once whole), or
// one ATIF file per rollout.
func Files(dir string, o Options) (Stats, error) {
	st := Stats{DroppedBy: map[string]int{}, Skipped: map[string]int{}}
	var err error
	if o.Format == "atif" {
		err = atifFiles(dir, o, &st)
	} else {
		err = jsonlFile(dir, o, &st)
	}
	return st, err
}

// eachGroup walks the run's groups; a transcript that cannot be read is
// not the user's mistake.
func eachGroup(dir string, fn func(recs []rundir.Record, trajs []*trajectory.Trajectory) error) error {
	if err := EachGroup(dir, fn); err != nil {
		return &fault.Infra{Err: err}
	}
	return nil
}

// output is a JSONL destination: standard output, or a file put in place
// once all of it is written (rundir.CreateAtomic), so a failed export
// leaves no half file.
type output struct {
	path string             // "" for standard output
	file *rundir.AtomicFile // nil for standard output
	bw   *bufio.Writer
	enc  *json.Encoder
}

func newOutput(stdout io.Writer, path string) (*output, error) {
	o := &output{path: path}
	w := stdout
	if path != "" {
		var err error
		if o.file, err = rundir.CreateAtomic(path); err != nil {
			return nil, &fault.Infra{Err: err, Hint: "check that the folder exists and is writable"}
		}
		w = o.file
	}
	o.bw = bufio.NewWriterSize(w, 1<<20)
	o.enc = json.NewEncoder(o.bw)
	o.enc.SetEscapeHTML(false)
	return o, nil
}

// commit flushes and, for a file, puts it in place.
func (o *output) commit() error {
	err := o.bw.Flush()
	if o.file == nil {
		return err
	}
	if err != nil {
		return &fault.Infra{Err: fmt.Errorf("write %s: %w", o.path, err)}
	}
	if err := o.file.Commit(); err != nil {
		return &fault.Infra{Err: err} // it names the path
	}
	return nil
}

// abort removes the temporary file of an output that was not committed.
func (o *output) abort() {
	if o != nil && o.file != nil {
		o.file.Abort()
	}
}

// encodeTo encodes each value as a line of o.
func encodeTo[T any](o *output) func(T) error {
	return func(v T) error { return o.enc.Encode(v) }
}

func jsonlFile(dir string, o Options, st *Stats) (err error) {
	out, err := newOutput(o.Stdout, o.Out)
	if err != nil {
		return err
	}
	defer out.abort()
	w := Writer{Filter: o.Filter}
	if o.Format == "sft" {
		w.SFT = encodeTo[SFTRecord](out)
	} else {
		w.Groups = encodeTo[ScoredDataGroup](out)
	}
	// Atropos groups without exact tokens are not ScoredDataGroups: they
	// go to a file of their own, or nowhere.
	var msgs *output
	if o.Format == "atropos" && o.Messages != "" {
		if msgs, err = newOutput(nil, o.Messages); err != nil {
			return err
		}
		defer msgs.abort()
		w.Messages = encodeTo[MessagesGroup](msgs)
	}
	err = eachGroup(dir, func(recs []rundir.Record, trajs []*trajectory.Trajectory) error {
		r, err := w.Write(recs, trajs)
		if err == nil {
			st.count(o.Format, len(recs), r)
		}
		return err
	})
	if err != nil {
		return err
	}
	if msgs != nil {
		if err := msgs.commit(); err != nil {
			return err
		}
	}
	return out.commit()
}

// count adds what Write made of one task's rollouts.
func (st *Stats) count(format string, rollouts int, r Routed) {
	st.Rollouts += rollouts
	if format == "sft" {
		for k, v := range r.SFTSkipped {
			st.Skipped[k] += v
		}
		if r.SFTBelow > 0 {
			st.DroppedBy[DropMinReward] += r.SFTBelow
		}
		st.Written += r.SFTLines
		return
	}
	info := r.Group
	st.Groups++
	for k, v := range info.Skipped {
		st.Skipped[k] += v
	}
	switch {
	case !info.Kept:
		st.Dropped++
		st.DroppedBy[info.Dropped]++
	case info.Tokens:
		st.Written++
		st.WithTokens++
	default:
		st.WithoutTokens++
		if st.FirstNoTokens == "" {
			st.FirstNoTokens = fmt.Sprintf("task %s: %s", info.TaskID, info.NoTokens)
		}
	}
}

func atifFiles(dir string, o Options, st *Stats) error {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return &fault.Infra{Err: fmt.Errorf("atif directory: %w", err)}
	}
	man, _, _ := rundir.ReadManifest(dir) // no manifest: no session id
	meta := ATIFMeta{RunID: man.RunID, AgentVersion: o.Version}
	return eachGroup(dir, func(recs []rundir.Record, trajs []*trajectory.Trajectory) error {
		for i, r := range recs {
			st.Rollouts++
			if why := Skip(r, trajs[i]); why != "" {
				st.Skipped[why]++
				continue
			}
			st.Written++
			doc := ATIF(r, trajs[i], meta)
			if err := rundir.WriteJSONAtomic(filepath.Join(o.Out, rundir.TranscriptName(r.RolloutID, r.Try)), doc); err != nil {
				return err
			}
		}
		return nil
	})
}
