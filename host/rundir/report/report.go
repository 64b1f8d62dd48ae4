// Package report turns results.jsonl into metrics and reports: pass rate
// with its standard error, per category, pass@k with the unbiased
// estimator, outcome and error counts, tokens and cost, time per phase, the
// slowest tasks and a task x attempt table, as text, JSON or Markdown; and
// into report.html (WriteHTML), one self-contained page with the same
// summary, a chart per category, the task x attempt grid, a sortable,
// filterable table of rollouts and each rollout's trajectory, which
// `proctor view` serves live while a run goes on.
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/term"
	"github.com/proctor-dev/proctor/trajectory"
)

// Summary is summary.json.
type Summary struct {
	Rollouts       int                    `json:"rollouts"`
	Tasks          int                    `json:"tasks"`
	Attempts       int                    `json:"attempts"`
	Outcomes       map[string]int         `json:"outcomes"`
	ErrorClasses   map[string]int         `json:"error_classes,omitempty"`
	PassRate       float64                `json:"pass_rate"`
	StdErr         float64                `json:"stderr"`
	PassRateScored float64                `json:"pass_rate_excluding_infra_errors"`
	MeanReward     float64                `json:"mean_reward"`
	Rewards        map[string]RewardStat  `json:"rewards,omitempty"`
	PassAtK        map[string]float64     `json:"pass_at_k,omitempty"`
	Categories     map[string]Rate        `json:"categories,omitempty"`
	Usage          trajectory.Usage       `json:"usage"`
	CostUSD        float64                `json:"cost_usd"`
	Phases         map[string]PhaseTiming `json:"phases"`
	Slowest        []Slow                 `json:"slowest"`
	Table          []TaskRow              `json:"table"`

	// NetworkWithheld lists the tasks that asked for the internet and ran
	// without it, each with why.
	NetworkWithheld map[string]string `json:"network_withheld,omitempty"`

	// GroupSize, in a serve run, is its group size: pass@k is computed
	// per group (a task's rollouts of one epoch), k up to GroupSize;
	// Groups counts the groups.
	GroupSize int `json:"group_size,omitempty"`
	Groups    int `json:"groups,omitempty"`
}

// RewardStat summarises one stacked reward: its mean over the rollouts it
// scored, how many times it failed, and the tokens it spent asking the
// run's model (a judge's).
type RewardStat struct {
	N      int               `json:"n"`
	Mean   float64           `json:"mean"`
	Errors int               `json:"errors"`
	Usage  *trajectory.Usage `json:"usage,omitempty"`
	// FirstError is the error of the first rollout it failed on.
	FirstError string `json:"first_error,omitempty"`
}

// rewardStats sums up the stacked rewards of recs.
func rewardStats(recs []rundir.Record) map[string]RewardStat {
	var out map[string]RewardStat
	scored := map[string][]float64{}
	for _, r := range recs {
		for _, rs := range r.Rewards {
			if out == nil {
				out = map[string]RewardStat{}
			}
			st := out[rs.Name]
			if rs.Usage != nil {
				var u trajectory.Usage
				if st.Usage != nil {
					u = *st.Usage
				}
				u = u.Add(*rs.Usage)
				st.Usage = &u
			}
			if rs.Error != "" {
				if st.Errors == 0 {
					st.FirstError = rs.Error
				}
				st.Errors++
			} else {
				scored[rs.Name] = append(scored[rs.Name], rs.Reward)
				st.N++
			}
			out[rs.Name] = st
		}
	}
	for name, xs := range scored {
		st := out[name]
		st.Mean = mean(xs)
		out[name] = st
	}
	return out
}

// Rate is a pass rate over n rollouts.
type Rate struct {
	N        int     `json:"n"`
	Passed   int     `json:"passed"`
	PassRate float64 `json:"pass_rate"`
}

// PhaseTiming summarises one phase's seconds.
type PhaseTiming struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	Max  float64 `json:"max"`
}

// Slow is one slow rollout.
type Slow struct {
	RolloutID string  `json:"rollout_id"`
	Seconds   float64 `json:"seconds"`
	Outcome   string  `json:"outcome"`
}

// TaskRow is one task's line of the task x attempt table.
type TaskRow struct {
	TaskID   string   `json:"task_id"`
	Category string   `json:"category,omitempty"`
	Outcomes []string `json:"outcomes"`
	Passed   int      `json:"passed"`
}

// SummarizeIn computes the summary of the records of the run in dir: a
// serve run's pass@k is per group (SummarizeGroups), since its serve.jsonl
// says its group size.
func SummarizeIn(dir string, recs []rundir.Record) Summary {
	if g := rundir.ServeGroupSize(dir); g > 0 {
		return SummarizeGroups(recs, g)
	}
	return Summarize(recs)
}

// SummarizeGroups computes the summary of a serve run's records, whose
// attempts go in groups of size (attempts epoch×size to
// (epoch+1)×size-1 of a task). Its pass@k, k up to size, is the mean over
// the groups: a group's rollouts are samples of one policy, while a
// task's attempts over the epochs are samples of a policy that training
// changed in between, so pooled they estimate nothing.
func SummarizeGroups(recs []rundir.Record, size int) Summary {
	s := Summarize(recs)
	if size <= 0 {
		return s
	}
	type group struct {
		task  string
		epoch int
	}
	n, passed := map[group]int{}, map[group]int{}
	for _, r := range recs {
		g := group{r.TaskID, r.Attempt / size}
		n[g]++
		if r.Outcome == rundir.OutcomePassed {
			passed[g]++
		}
	}
	s.GroupSize, s.Groups, s.PassAtK = size, len(n), nil
	for k := 1; k <= size; k++ {
		sum, m := 0.0, 0
		for g, c := range n {
			if c >= k {
				sum += PassAtK(c, passed[g], k)
				m++
			}
		}
		if m > 0 {
			if s.PassAtK == nil {
				s.PassAtK = map[string]float64{}
			}
			s.PassAtK[fmt.Sprintf("pass@%d", k)] = sum / float64(m)
		}
	}
	return s
}

// Summarize computes the summary of a run's records.
func Summarize(recs []rundir.Record) Summary {
	s := Summary{Outcomes: map[string]int{}, ErrorClasses: map[string]int{}, Categories: map[string]Rate{}, Phases: map[string]PhaseTiming{}}
	s.Rollouts = len(recs)
	byTask := map[string][]rundir.Record{}
	phases := map[string][]float64{}
	var rewards []float64
	passed, scored := 0, 0
	for _, r := range recs {
		s.Outcomes[r.Outcome]++
		if r.Outcome == rundir.OutcomeInfraError {
			s.ErrorClasses[r.ErrorClass]++
		} else {
			scored++
		}
		if r.Outcome == rundir.OutcomePassed {
			passed++
		}
		rewards = append(rewards, r.Reward)
		byTask[r.TaskID] = append(byTask[r.TaskID], r)
		cat := r.Category
		if cat == "" {
			cat = "(none)"
		}
		c := s.Categories[cat]
		c.N++
		if r.Outcome == rundir.OutcomePassed {
			c.Passed++
		}
		s.Categories[cat] = c
		s.Usage = s.Usage.Add(r.Usage)
		s.CostUSD = rundir.Finite(s.CostUSD + rundir.Finite(r.CostUSD))
		for p, v := range r.Phases {
			phases[p] = append(phases[p], rundir.Finite(v))
		}
		s.Slowest = append(s.Slowest, Slow{r.RolloutID, r.Duration().Seconds(), r.Outcome})
		if r.NetworkWithheld != "" {
			if s.NetworkWithheld == nil {
				s.NetworkWithheld = map[string]string{}
			}
			s.NetworkWithheld[r.TaskID] = r.NetworkWithheld
		}
	}
	for k, c := range s.Categories {
		c.PassRate = ratio(c.Passed, c.N)
		s.Categories[k] = c
	}
	s.Tasks = len(byTask)
	s.PassRate = ratio(passed, s.Rollouts)
	s.PassRateScored = ratio(passed, scored)
	if s.Rollouts > 0 {
		s.MeanReward = mean(rewards)
		s.Rewards = rewardStats(recs)
	}
	for p, v := range phases {
		s.Phases[p] = timing(v)
	}
	slices.SortFunc(s.Slowest, func(a, b Slow) int { return cmp.Compare(b.Seconds, a.Seconds) })
	s.Slowest = s.Slowest[:min(10, len(s.Slowest))]

	// Per task: the table, pass@k, and the task-clustered standard error.
	var taskMeans []float64
	maxAttempts := 0
	for _, id := range slices.Sorted(maps.Keys(byTask)) {
		rs := byTask[id]
		slices.SortFunc(rs, func(a, b rundir.Record) int { return cmp.Compare(a.Attempt, b.Attempt) })
		row := TaskRow{TaskID: id, Category: rs[0].Category}
		for _, r := range rs {
			row.Outcomes = append(row.Outcomes, r.Outcome)
			if r.Outcome == rundir.OutcomePassed {
				row.Passed++
			}
		}
		s.Table = append(s.Table, row)
		taskMeans = append(taskMeans, ratio(row.Passed, len(rs)))
		maxAttempts = max(maxAttempts, len(rs))
	}
	s.Attempts = maxAttempts
	s.StdErr = stdErr(taskMeans, s.PassRate, s.Rollouts, maxAttempts)
	if maxAttempts > 1 {
		s.PassAtK = map[string]float64{}
		for k := 1; k <= maxAttempts; k++ {
			sum, n := 0.0, 0
			for _, row := range s.Table {
				if len(row.Outcomes) >= k {
					sum += PassAtK(len(row.Outcomes), row.Passed, k)
					n++
				}
			}
			if n > 0 {
				s.PassAtK[fmt.Sprintf("pass@%d", k)] = sum / float64(n)
			}
		}
	}
	return s
}

// Noun is word, in the plural unless n is 1.
func Noun(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// stdErr is sqrt(p(1-p)/n) with one attempt per task; with several, the
// standard error of the mean of per-task pass rates (attempts of one task
// are not independent).
func stdErr(taskMeans []float64, p float64, n, attempts int) float64 {
	if attempts <= 1 {
		if n == 0 {
			return 0
		}
		return math.Sqrt(p * (1 - p) / float64(n))
	}
	t := len(taskMeans)
	if t < 2 {
		return 0
	}
	var mean float64
	for _, m := range taskMeans {
		mean += m
	}
	mean /= float64(t)
	var v float64
	for _, m := range taskMeans {
		v += (m - mean) * (m - mean)
	}
	return math.Sqrt(v / float64(t-1) / float64(t))
}

// PassAtK is the unbiased estimator 1 - C(n-c, k)/C(n, k) for n attempts
// with c passes, computed as a product to stay stable.
func PassAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

func timing(v []float64) PhaseTiming {
	slices.Sort(v)
	q := func(f float64) float64 { return v[min(len(v)-1, int(f*float64(len(v))))] }
	return PhaseTiming{Mean: mean(v), P50: q(0.5), P95: q(0.95), Max: v[len(v)-1]}
}

// mean is the mean of xs, made finite first: whatever finite numbers a
// run recorded, the mean is in float64's range even where their sum is
// not.
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += rundir.Finite(x)
	}
	n := float64(len(xs))
	if !math.IsInf(sum, 0) {
		return sum / n
	}
	sum = 0
	for _, x := range xs {
		sum += rundir.Finite(x) / n
	}
	return sum
}

// outcomes are the outcomes in the order reports list them.
var outcomes = []string{rundir.OutcomePassed, rundir.OutcomeFailed, rundir.OutcomeAgentTimeout, rundir.OutcomeVerifierFailed, rundir.OutcomeInfraError}

// symbol marks each outcome in the text report, the HTML page and their
// legends. Each is in the DejaVu fonts Debian installs with Chromium (the
// stopwatch U+23F1 is not, and showed as an empty box).
var symbol = map[string]string{
	rundir.OutcomePassed:       "✓",
	rundir.OutcomeFailed:       "✗",
	rundir.OutcomeAgentTimeout: "◷",
	// No reward from the verifier: an empty set.
	rundir.OutcomeVerifierFailed: "∅",
	rundir.OutcomeInfraError:     "!",
}

// legend explains the symbols: "✓ passed  ✗ failed  ...".
func legend() string {
	var parts []string
	for _, o := range outcomes {
		parts = append(parts, symbol[o]+" "+words(o))
	}
	return strings.Join(parts, "  ")
}

// Write renders the summary as text, json or md.
func Write(w io.Writer, s Summary, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	case "md":
		return writeMarkdown(w, s)
	case "", "text":
		return writeText(w, s)
	}
	return fmt.Errorf("unknown report format %q: want text, json or md", format)
}

// passKeys is the keys of a pass@k map by k: pass@2 before pass@10.
func passKeys(m map[string]float64) []string {
	k := func(key string) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(key, "pass@"))
		return n
	}
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(k(a), k(b)) })
}

func outcomeLine(s Summary) string {
	var parts []string
	for _, o := range outcomes {
		parts = append(parts, fmt.Sprintf("%s %d", o, s.Outcomes[o]))
	}
	return strings.Join(parts, ", ")
}

func writeText(w io.Writer, s Summary) error {
	fmt.Fprintf(w, "rollouts   %d (%d %s x up to %d %s)\n", s.Rollouts, s.Tasks, Noun(s.Tasks, "task"), s.Attempts, Noun(s.Attempts, "attempt"))
	fmt.Fprintf(w, "pass rate  %.1f%% ± %.1f%% (excluding infra errors: %.1f%%), mean reward %.3f\n", 100*s.PassRate, 100*s.StdErr, 100*s.PassRateScored, s.MeanReward)
	fmt.Fprintf(w, "outcomes   %s\n", outcomeLine(s))
	for _, k := range slices.Sorted(maps.Keys(s.Rewards)) {
		r := s.Rewards[k]
		fmt.Fprintf(w, "reward     %s: mean %.3f over %d rollouts, %d errors", term.Line(k), r.Mean, r.N, r.Errors)
		if r.Usage != nil {
			fmt.Fprintf(w, "; %d tokens in, %d out", r.Usage.PromptTokens, r.Usage.CompletionTokens)
		}
		fmt.Fprintln(w)
		if r.FirstError != "" {
			fmt.Fprintf(w, "           first error: %s\n", term.Line(shorten(r.FirstError, 300)))
		}
	}
	if len(s.ErrorClasses) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.ErrorClasses)) {
			parts = append(parts, fmt.Sprintf("%s %d", term.Line(k), s.ErrorClasses[k]))
		}
		fmt.Fprintf(w, "errors     %s\n", strings.Join(parts, ", "))
	}
	if s.GroupSize > 0 {
		fmt.Fprintf(w, "groups     %d of up to %d rollouts (a task in one epoch); pass@k is their mean\n", s.Groups, s.GroupSize)
	}
	for _, k := range passKeys(s.PassAtK) {
		fmt.Fprintf(w, "%-10s %.3f\n", term.Line(k), s.PassAtK[k])
	}
	fmt.Fprintf(w, "tokens     %d in (%d cached), %d out; cost $%.4f\n", s.Usage.PromptTokens, s.Usage.CachedTokens, s.Usage.CompletionTokens, s.CostUSD)
	for _, l := range withheldLines(s, term.Line) {
		fmt.Fprintf(w, "network    %s\n", l)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(s.Phases) > 0 {
		fmt.Fprintln(tw, "\nphase\tmean s\tp50 s\tp95 s\tmax s")
		for _, p := range orderedPhases(s.Phases) {
			t := s.Phases[p]
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\n", p, t.Mean, t.P50, t.P95, t.Max)
		}
	}
	if len(s.Categories) > 1 {
		fmt.Fprintln(tw, "\ncategory\tn\tpass rate")
		for _, k := range slices.Sorted(maps.Keys(s.Categories)) {
			c := s.Categories[k]
			fmt.Fprintf(tw, "%s\t%d\t%.1f%%\n", term.Line(k), c.N, 100*c.PassRate)
		}
	}
	fmt.Fprintln(tw, "\ntask\tcategory\tattempts\tpassed")
	for _, r := range s.Table {
		var marks []string
		for _, o := range r.Outcomes {
			marks = append(marks, symbol[o])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\n", term.Line(r.TaskID), term.Line(r.Category), strings.Join(marks, " "), r.Passed, len(r.Outcomes))
	}
	if len(s.Slowest) > 0 {
		fmt.Fprintln(tw, "\nslowest\tseconds\toutcome")
		for _, sl := range s.Slowest[:min(5, len(s.Slowest))] {
			fmt.Fprintf(tw, "%s\t%.1f\t%s\n", term.Line(sl.RolloutID), sl.Seconds, term.Line(sl.Outcome))
		}
	}
	fmt.Fprintln(tw, "\n"+legend())
	return tw.Flush()
}

func writeMarkdown(w io.Writer, s Summary) error {
	fmt.Fprintf(w, "| metric | value |\n|---|---|\n")
	fmt.Fprintf(w, "| rollouts | %d |\n| tasks | %d |\n| pass rate | %.1f%% ± %.1f%% |\n| mean reward | %.3f |\n| outcomes | %s |\n| cost | $%.4f |\n",
		s.Rollouts, s.Tasks, 100*s.PassRate, 100*s.StdErr, s.MeanReward, outcomeLine(s), s.CostUSD)
	for _, k := range passKeys(s.PassAtK) {
		fmt.Fprintf(w, "| %s | %.3f |\n", term.Markdown(k), s.PassAtK[k])
	}
	for _, l := range withheldLines(s, term.Markdown) {
		fmt.Fprintf(w, "| network | %s |\n", l)
	}
	fmt.Fprintf(w, "\n| task | category | attempts | passed |\n|---|---|---|---|\n")
	for _, r := range s.Table {
		var marks []string
		for _, o := range r.Outcomes {
			marks = append(marks, symbol[o])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d/%d |\n", term.Markdown(r.TaskID), term.Markdown(r.Category), strings.Join(marks, " "), r.Passed, len(r.Outcomes))
	}
	return nil
}

// withheldLines says which tasks ran without the network they asked
// for, one line per reason, each task id and reason written by esc.
func withheldLines(s Summary, esc func(string) string) []string {
	byWhy := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(s.NetworkWithheld)) {
		why := s.NetworkWithheld[id]
		byWhy[why] = append(byWhy[why], esc(id))
	}
	var out []string
	for _, why := range slices.Sorted(maps.Keys(byWhy)) {
		ids := byWhy[why]
		out = append(out, fmt.Sprintf("withheld from %d %s (%s): %s", len(ids), Noun(len(ids), "task"), esc(why), strings.Join(ids, ", ")))
	}
	return out
}

// words writes an outcome for people: agent_timeout is "agent timeout".
func words(outcome string) string { return strings.ReplaceAll(outcome, "_", " ") }
