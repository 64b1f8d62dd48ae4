package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/run"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/report"
	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// evalState is the evaluation running, if any: base.py's eval_runner.
type evalState struct {
	mu     sync.Mutex
	active bool
	wg     sync.WaitGroup
}

func (e *evalState) running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active
}

// begin marks an evaluation running; false when one already is.
func (e *evalState) begin() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.active {
		return false
	}
	e.active = true
	e.wg.Add(1)
	return true
}

func (e *evalState) end() {
	e.mu.Lock()
	e.active = false
	e.mu.Unlock()
	e.wg.Done()
}

func (e *evalState) wait() { e.wg.Wait() }

// finished counts the lines of the run's evals.jsonl.
func (e *evalState) finished(dir string) int {
	return len(readEvals(dir))
}

// evalLine is one line of evals.jsonl: a finished evaluation.
type evalLine struct {
	Step       int                `json:"step"`
	Dir        string             `json:"dir"`
	StartedAt  time.Time          `json:"started_at"`
	FinishedAt time.Time          `json:"finished_at"`
	Metrics    map[string]float64 `json:"metrics"`
}

func readEvals(dir string) []evalLine {
	f, err := os.Open(filepath.Join(dir, rundir.EvalsFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []evalLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for sc.Scan() {
		var l evalLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// stepChecks is base.py env_step_checks: when the trainer's step passes a
// multiple of steps_per_eval, an evaluation starts (unless one still
// runs), and with STOP_TRAIN the groups generating are cut short and go
// back to the backlog.
func (s *Serve) stepChecks(st atropos.Status) {
	if s.curStep == st.CurrentStep {
		return
	}
	// base.py fires when curr_step % n > current_step % n, which misses
	// a multiple passed in a jump of more than one step between polls;
	// comparing the multiples passed fires then too.
	every := s.cfg.Serve.StepsPerEval
	if every > 0 && st.CurrentStep/every > s.curStep/every {
		switch {
		case s.opts.EvalParts == nil:
			s.notify("warning", "steps_per_eval is %d but this serve has no evaluation to run", every)
		case !s.eval.begin():
			s.notify("warning", "the evaluation before step %d has not finished: skipping this one", st.CurrentStep)
		default:
			if s.cfg.Serve.EvalHandling == config.EvalStopTrain {
				s.preempt()
			}
			go s.evaluate(s.evalCtx, st.CurrentStep)
		}
	}
	s.curStep = st.CurrentStep
}

// evaluate runs the evaluation at step as a run of its own in
// evals/step-N (its tasks from [serve.eval], every attempt recorded,
// summary and report), then writes Atropos' metrics.json there
// (base.py evaluate_log) and a line to evals.jsonl. A failed evaluation
// is reported and serving goes on.
func (s *Serve) evaluate(ctx context.Context, step int) {
	defer s.eval.end()
	defer s.poke()
	rel := filepath.Join(rundir.EvalsDir, fmt.Sprintf("step-%d", step))
	dir := filepath.Join(s.dir, rel)
	start := time.Now().UTC()
	s.notify("", "evaluating at trainer step %d (%s) into %s", step, s.cfg.Serve.EvalHandling, rel)
	r, err := run.Open(s.evalConfig(), append(s.opts.RunOptions, run.WithDir(dir))...)
	if err != nil {
		s.notify("warning", "evaluation at step %d: %v", step, err)
		return
	}
	defer r.Close()
	res, err := r.Execute(ctx, *s.opts.EvalParts)
	if ctx.Err() != nil || res == nil || res.Stats.Interrupted {
		if err != nil && ctx.Err() == nil {
			s.notify("warning", "evaluation at step %d: %v", step, err)
		}
		return
	}
	if err != nil {
		s.notify("warning", "evaluation at step %d: %v (its metrics count what ran)", step, err)
	}
	end := time.Now().UTC()
	m := evalMetrics(res.Summary)
	if err := rundir.WriteJSONAtomic(filepath.Join(dir, "metrics.json"), s.atroposEvalLog(m, start, end)); err != nil {
		s.notify("warning", "evaluation at step %d: %v", step, err)
	}
	if err := appendLine(filepath.Join(s.dir, rundir.EvalsFile), evalLine{Step: step, Dir: filepath.ToSlash(rel), StartedAt: start, FinishedAt: end, Metrics: m}); err != nil {
		s.notify("warning", "evaluation at step %d: %v", step, err)
		return
	}
	s.notify("", "evaluation at step %d: pass rate %.3f over %d rollouts, mean reward %.3f", step, m["eval/pass_rate"], res.Summary.Rollouts, m["eval/mean_reward"])
}

// evalConfig is the evaluation's run config: the run's, with
// [serve.eval]'s tasks, attempts and concurrency.
func (s *Serve) evalConfig() *config.Config {
	ec := *s.cfg
	ec.Run.Name = s.cfg.Run.Name + "-eval"
	ec.Run.Attempts = s.cfg.Serve.Eval.Attempts
	ec.Run.Concurrency = s.cfg.Serve.Eval.Concurrency
	ec.Run.SandboxStartConcurrency = min(ec.Run.SandboxStartConcurrency, ec.Run.Concurrency)
	var merged map[string]any
	json.Unmarshal(s.cfg.EvalConfig(), &merged)
	ec.Env.Config = merged
	return &ec
}

// evalMetrics are an evaluation's numbers, named as Atropos environments
// log theirs ("eval/...").
func evalMetrics(sum report.Summary) map[string]float64 {
	m := map[string]float64{
		"eval/pass_rate":        sum.PassRate,
		"eval/pass_rate_stderr": sum.StdErr,
		"eval/mean_reward":      sum.MeanReward,
		"eval/rollouts":         float64(sum.Rollouts),
		"eval/infra_errors":     float64(sum.Outcomes[rundir.OutcomeInfraError]),
	}
	for k, v := range sum.PassAtK {
		m["eval/pass@"+strings.TrimPrefix(k, "pass@")] = v
	}
	for c, r := range sum.Categories {
		m["eval/"+c+"/pass_rate"] = r.PassRate
	}
	return m
}

// atroposEvalLog is metrics.json as base.py evaluate_log writes it for
// nous-evals: a skeleton of lighteval's result file.
func (s *Serve) atroposEvalLog(m map[string]float64, start, end time.Time) map[string]any {
	params := map[string]any{"max_new_tokens": s.cfg.Serve.MaxTokenLength}
	if t := s.cfg.Model.Temperature; t != nil {
		params["temperature"] = *t
	}
	task := fmt.Sprintf("atropos|%s_eval|0", s.cfg.Serve.Name)
	return map[string]any{
		"config_general": map[string]any{
			"model_name":                    s.cfg.Model.Name,
			"total_evaluation_time_seconds": strconv.FormatFloat(end.Sub(start).Seconds(), 'f', -1, 64),
			"generation_parameters":         params,
		},
		"results": map[string]any{task: m, "all": m},
	}
}

// noteCutEvals says which evaluations an earlier start left unfinished:
// they are not resumed, since the policy has moved on since their step.
func (s *Serve) noteCutEvals() {
	done := map[string]bool{}
	for _, l := range readEvals(s.dir) {
		done[l.Dir] = true
	}
	ents, _ := os.ReadDir(filepath.Join(s.dir, rundir.EvalsDir))
	var cut []string
	for _, e := range ents {
		rel := rundir.EvalsDir + "/" + e.Name()
		if e.IsDir() && !done[rel] {
			cut = append(cut, rel)
		}
	}
	sort.Strings(cut)
	for _, rel := range cut {
		s.notify("note", "the evaluation in %s was cut short by an earlier stop; its rollouts so far stay there (the policy has moved on, so it is not resumed)", rel)
	}
}

// appendLine appends v as a JSON line to path and syncs.
func appendLine(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
