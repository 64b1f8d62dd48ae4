package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
	"github.com/proctor-dev/proctor/host/rundir/report"
)

type exportCmd struct {
	Dir             string   `arg:"" help:"Run directory." type:"existingdir"`
	Format          string   `help:"atropos (Atropos scored data groups, JSONL, one line per task), sft (chat JSONL, one line per rollout) or atif (one ATIF-v1.7 JSON file per rollout)." enum:"atropos,sft,atif" required:""`
	Out             string   `short:"o" help:"File to write for atropos and sft (default: standard output); directory for atif (default: RUN_DIR/atif). With atropos, groups without exact token ids go to the file's sibling STEM.messages.jsonl." type:"path"`
	Messages        string   `help:"atropos: write the groups without exact token ids (messages only) to this file (default: -o's STEM.messages.jsonl; with standard output they are left out)." placeholder:"FILE" type:"path"`
	MinReward       *float64 `name:"min-reward" help:"Drop groups whose best reward is below this (sft: rollouts below it)."`
	DropEqualScores bool     `name:"drop-equal-scores" help:"Drop groups whose rollouts all scored the same (atropos)."`
	MaxTokens       int      `name:"max-tokens" help:"Drop groups with a rollout of this many tokens or more, as Atropos's max_token_len (atropos)."`
}

// exportStats is what the export says on stderr when it is done.
type exportStats struct {
	groups, dropped, rollouts, written int
	droppedBy, skipped                 map[string]int
	withTokens, withoutTokens          int
	firstNoTokens                      string
}

// toStdout: the main output is standard output.
func (e exportCmd) toStdout() bool { return e.Out == "" || e.Out == "-" }

// messagesPath is where atropos writes groups without exact tokens: the
// --messages file, else -o's sibling, else nowhere (standard output
// never mixes them with ScoredDataGroups).
func (e exportCmd) messagesPath() string {
	switch {
	case e.Messages != "":
		return e.Messages
	case !e.toStdout():
		return export.MessagesPath(e.Out)
	}
	return ""
}

func (e exportCmd) Run(g *globals) error {
	// A directory that is not a run is the user's mistake, told before
	// any output file is made.
	release, err := readRun(g, e.Dir, "export", true)
	if err != nil {
		return err
	}
	defer release()
	if e.Messages != "" && e.Format != "atropos" {
		return &fault.Usage{Err: fmt.Errorf("--messages is for --format atropos, not %s", e.Format), Hint: "drop --messages: only Atropos groups are split by whether they have token ids"}
	}
	if e.Messages != "" && !e.toStdout() && filepath.Clean(e.Messages) == filepath.Clean(e.Out) {
		return &fault.Usage{Err: fmt.Errorf("--messages and -o name the same file %s", e.Out), Hint: "groups without token ids must not mix with ScoredDataGroups: give --messages another file"}
	}
	f := export.Filter{MinReward: e.MinReward, DropEqualScores: e.DropEqualScores, MaxTokens: e.MaxTokens}
	st := exportStats{droppedBy: map[string]int{}, skipped: map[string]int{}}
	switch e.Format {
	case "atif":
		if e.Out == "" {
			e.Out = filepath.Join(e.Dir, "atif")
		}
		err = e.atif(&st)
	default:
		err = e.jsonl(g.stdout, f, &st)
	}
	if err != nil {
		return err
	}
	e.report(g.stderr, st)
	return nil
}

// each walks the run's groups; a transcript that cannot be read is not
// the user's mistake.
func (e exportCmd) each(fn func(recs []rundir.Record, trajs []*agent.Trajectory) error) error {
	if err := export.EachGroup(e.Dir, fn); err != nil {
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

func (e exportCmd) jsonl(stdout io.Writer, f export.Filter, st *exportStats) (err error) {
	path := e.Out
	if e.toStdout() {
		path = ""
	}
	out, err := newOutput(stdout, path)
	if err != nil {
		return err
	}
	defer out.abort()
	// Atropos groups without exact tokens are not ScoredDataGroups: they
	// go to a file of their own, or nowhere.
	var msgs *output
	if p := e.messagesPath(); e.Format == "atropos" && p != "" {
		if msgs, err = newOutput(nil, p); err != nil {
			return err
		}
		defer msgs.abort()
	}
	enc := out.enc
	err = e.each(func(recs []rundir.Record, trajs []*agent.Trajectory) error {
		if e.Format == "sft" {
			for i, r := range recs {
				st.rollouts++
				if why := export.SkipTraining(r, trajs[i]); why != "" {
					st.skipped[why]++
					continue
				}
				line, ok := export.SFT(r, trajs[i], f)
				if !ok {
					st.droppedBy[export.DropMinReward]++
					continue
				}
				st.written++
				if err := enc.Encode(line); err != nil {
					return err
				}
			}
			return nil
		}
		grp, info, err := export.Group(recs, trajs, f)
		if err != nil {
			return err
		}
		st.groups++
		st.rollouts += len(recs)
		for k, v := range info.Skipped {
			st.skipped[k] += v
		}
		if !info.Kept {
			st.dropped++
			st.droppedBy[info.Dropped]++
			return nil
		}
		if info.Tokens {
			st.written++
			st.withTokens++
			return enc.Encode(grp)
		}
		st.withoutTokens++
		if st.firstNoTokens == "" {
			st.firstNoTokens = fmt.Sprintf("task %s: %s", info.TaskID, info.NoTokens)
		}
		if msgs == nil {
			return nil // counted, and said on stderr
		}
		return msgs.enc.Encode(grp.MessagesOnly())
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

func (e exportCmd) atif(st *exportStats) error {
	dir := e.Out
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &fault.Infra{Err: fmt.Errorf("atif directory: %w", err)}
	}
	man, _, _ := rundir.ReadManifest(e.Dir) // no manifest: no session id
	meta := export.ATIFMeta{RunID: man.RunID, AgentVersion: version}
	return e.each(func(recs []rundir.Record, trajs []*agent.Trajectory) error {
		for i, r := range recs {
			st.rollouts++
			if why := export.Skip(r, trajs[i]); why != "" {
				st.skipped[why]++
				continue
			}
			st.written++
			doc := export.ATIF(r, trajs[i], meta)
			if err := rundir.WriteJSONAtomic(filepath.Join(dir, rundir.TranscriptName(r.RolloutID, r.Try)), doc); err != nil {
				return err
			}
		}
		return nil
	})
}

// report prints what was written and what was left out, and why.
func (e exportCmd) report(w io.Writer, st exportStats) {
	counts := func(m map[string]int) string {
		var parts []string
		for k, v := range m {
			parts = append(parts, fmt.Sprintf("%d %s", v, k))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
	dest := e.Out
	if dest == "" {
		dest = "standard output"
	}
	switch e.Format {
	case "atropos":
		fmt.Fprintf(w, "proctor: export: %d of %d groups written to %s", st.written, st.groups, dest)
		if st.dropped > 0 {
			fmt.Fprintf(w, " (dropped: %s)", counts(st.droppedBy))
		}
		fmt.Fprintln(w)
		if st.withoutTokens > 0 {
			n := fmt.Sprintf("%d %s", st.withoutTokens, report.Noun(st.withoutTokens, "group"))
			if p := e.messagesPath(); p != "" {
				fmt.Fprintf(w, "proctor: export: %s without exact token ids written with messages only to %s\n", n, p)
			} else {
				fmt.Fprintf(w, "proctor: export: %s without exact token ids left out of standard output\n", n)
			}
			fmt.Fprintf(w, "proctor: export: messages only, first: %s\n", st.firstNoTokens)
			if e.messagesPath() == "" {
				fmt.Fprintln(w, "proctor: hint: --messages FILE writes them (messages and scores, no tokens); with -o FILE they go to FILE's .messages.jsonl sibling")
			}
			fmt.Fprintln(w, "proctor: hint: token ids are recorded when the endpoint returns them: set [model] return_tokens = true (vLLM, SGLang), and keep earlier reasoning in the chat template")
		}
	default:
		fmt.Fprintf(w, "proctor: export: %d of %d rollouts written to %s", st.written, st.rollouts, dest)
		if n := st.droppedBy[export.DropMinReward]; n > 0 {
			fmt.Fprintf(w, " (%d below the minimum reward)", n)
		}
		fmt.Fprintln(w)
	}
	if len(st.skipped) > 0 {
		fmt.Fprintf(w, "proctor: export: rollouts left out: %s\n", counts(st.skipped))
	}
}
