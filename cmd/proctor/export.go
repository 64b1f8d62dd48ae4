package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/proctor-dev/proctor/host/fault"
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
	o := export.Options{Format: e.Format, Stdout: g.stdout, Version: version,
		Filter: export.Filter{MinReward: e.MinReward, DropEqualScores: e.DropEqualScores, MaxTokens: e.MaxTokens}}
	switch {
	case e.Format == "atif" && e.Out == "":
		e.Out = filepath.Join(e.Dir, "atif")
	case e.Format == "atropos":
		o.Messages = e.messagesPath()
	}
	if e.Format == "atif" || !e.toStdout() {
		o.Out = e.Out
	}
	st, err := export.Files(e.Dir, o)
	if err != nil {
		return err
	}
	e.report(g.stderr, st)
	return nil
}

// report prints what was written and what was left out, and why.
func (e exportCmd) report(w io.Writer, st export.Stats) {
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
		fmt.Fprintf(w, "proctor: export: %d of %d groups written to %s", st.Written, st.Groups, dest)
		if st.Dropped > 0 {
			fmt.Fprintf(w, " (dropped: %s)", counts(st.DroppedBy))
		}
		fmt.Fprintln(w)
		if st.WithoutTokens > 0 {
			n := fmt.Sprintf("%d %s", st.WithoutTokens, report.Noun(st.WithoutTokens, "group"))
			if p := e.messagesPath(); p != "" {
				fmt.Fprintf(w, "proctor: export: %s without exact token ids written with messages only to %s\n", n, p)
			} else {
				fmt.Fprintf(w, "proctor: export: %s without exact token ids left out of standard output\n", n)
			}
			fmt.Fprintf(w, "proctor: export: messages only, first: %s\n", st.FirstNoTokens)
			if e.messagesPath() == "" {
				fmt.Fprintln(w, "proctor: hint: --messages FILE writes them (messages and scores, no tokens); with -o FILE they go to FILE's .messages.jsonl sibling")
			}
			fmt.Fprintln(w, "proctor: hint: token ids are recorded when the endpoint returns them: set [model] return_tokens = true (vLLM, SGLang), and keep earlier reasoning in the chat template")
		}
	default:
		fmt.Fprintf(w, "proctor: export: %d of %d rollouts written to %s", st.Written, st.Rollouts, dest)
		if n := st.DroppedBy[export.DropMinReward]; n > 0 {
			fmt.Fprintf(w, " (%d below the minimum reward)", n)
		}
		fmt.Fprintln(w)
	}
	if len(st.Skipped) > 0 {
		fmt.Fprintf(w, "proctor: export: rollouts left out: %s\n", counts(st.Skipped))
	}
}
