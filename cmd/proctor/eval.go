package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/report"
	"github.com/proctor-dev/proctor/host/results"
	"github.com/proctor-dev/proctor/sandbox"
)

type evalCmd struct {
	Config string   `arg:"" help:"Run configuration (TOML)." type:"path"`
	Set    []string `help:"Override a config key: --set section.key=value (repeatable)." placeholder:"KEY=VALUE" sep:"none"`
	Out    string   `help:"Run directory (default: <run.out_dir>/<run.name>)."`
	Resume bool     `help:"Continue the run in the directory (also the default when it has results)."`
}

// Manifest is manifest.json.
type Manifest struct {
	ProctorVersion string              `json:"proctor_version"`
	RunID          string              `json:"run_id"`
	Name           string              `json:"name"`
	StartedAt      time.Time           `json:"started_at"`
	ResumedAt      []time.Time         `json:"resumed_at,omitempty"`
	FinishedAt     *time.Time          `json:"finished_at,omitempty"`
	Plugin         PluginInfo          `json:"plugin"`
	Rewards        []PluginInfo        `json:"rewards,omitempty"`
	Process        *ProcessInfo        `json:"process,omitempty"`
	Model          map[string]string   `json:"model,omitempty"`
	Agent          string              `json:"agent"`
	Backend        string              `json:"backend"`
	ConfigHash     string              `json:"config_hash"`
	ImageDigests   map[string]string   `json:"image_digests,omitempty"`
	SkippedTasks   []map[string]string `json:"skipped_tasks,omitempty"`
}

// PluginInfo says which plugin bytes ran.
type PluginInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Source  string `json:"source"`
	Digest  string `json:"oci_digest,omitempty"` // the OCI manifest digest actually used
}

func runDir(c *config.Config, out string) string {
	if out != "" {
		return out
	}
	return filepath.Join(c.Run.OutDir, c.Run.Name)
}

func (e evalCmd) Run(g *globals) error { return e.execute(g, nil) }

// runHooks let another command (process) ride on eval's run: adjust the
// config (or refuse it, before anything is written, given the run
// directory and the manifest of the run it resumes, zero for a new run),
// see the store before the run and every record as it lands, and add to
// the manifest at the end. start gets stop, which ends the run
// early (no new rollout starts, the running ones are cancelled) when a
// hook cannot go on; finish then reports why.
type runHooks struct {
	config func(c *config.Config, dir string, prior Manifest) error
	start  func(dir string, store *results.Store, stop func()) error
	record func(rec results.Record)
	finish func(man *Manifest) error
}

func (e evalCmd) execute(g *globals, h *runHooks) error {
	ctx := g.ctx
	c, err := loadConfig(e.Config, e.Set)
	if err != nil {
		return err
	}
	dir := runDir(c, e.Out)
	// The manifest keeps the run id across resumes, so leftovers of a
	// killed run can be found by label.
	var man Manifest
	manPath := filepath.Join(dir, results.ManifestFile)
	if b, err := os.ReadFile(manPath); err != nil || json.Unmarshal(b, &man) != nil || man.RunID == "" {
		man = Manifest{}
	}
	if h != nil && h.config != nil {
		if err := h.config(c, dir, man); err != nil {
			return err
		}
	}
	store, err := results.Open(dir)
	if err != nil {
		return &infraError{err: err, hint: "check that the run directory is writable and the disk has room"}
	}
	defer store.Close()

	if man.RunID != "" {
		man.ResumedAt = append(man.ResumedAt, time.Now().UTC())
		if man.ConfigHash != c.Hash() {
			fmt.Fprintf(g.stderr, "proctor: note: the config changed since this run started; only missing rollouts run\n")
		}
	} else {
		man = Manifest{RunID: newRunID(c.Run.Name), Name: c.Run.Name, StartedAt: time.Now().UTC()}
	}
	man.FinishedAt = nil

	be, prune, err := backend(ctx, c)
	if err != nil {
		return err
	}
	if prune != nil && len(man.ResumedAt) > 0 {
		if n, err := prune(ctx, man.RunID); err != nil {
			fmt.Fprintf(g.stderr, "proctor: warning: remove leftovers of the previous run: %v\n", err)
		} else if n > 0 {
			fmt.Fprintf(g.stderr, "proctor: removed %d leftover sandboxes of the interrupted run\n", n)
		}
	}

	env, plugin, rt, err := environment(ctx, c)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	// One limiter for the run: [model] max_concurrent_requests counts the
	// agent's requests and the judges' together.
	lim := openai.NewLimiter(c.Model.MaxConcurrent)
	scorers, rewardInfos, err := rewards(ctx, c, rt, lim)
	if err != nil {
		return err
	}
	ag, err := agentFor(c, lim)
	if err != nil {
		return err
	}
	tasks, skipped, err := env.Tasks(ctx)
	if err != nil {
		return &usageError{err: fmt.Errorf("load tasks: %w", err), hint: "check [env.config] against the plugin's documentation (proctor plugin inspect " + c.Env.Plugin + ")"}
	}
	if len(tasks) == 0 {
		return &usageError{err: errors.New("the config selects no tasks"), hint: "check the task filters in [env.config]; `proctor tasks` lists what is selected"}
	}

	m := plugin.Manifest()
	envInfo := PluginInfo{Name: m.Name, Version: m.Version, SHA256: plugin.SHA256(), Source: plugin.source, Digest: plugin.digest}
	if len(man.ResumedAt) > 0 {
		if err := samePlugins(dir, man, envInfo, rewardInfos); err != nil {
			return err
		}
		rewardInfos = keepRecorded(man.Rewards, rewardInfos)
	}
	man.ProctorVersion = version
	man.Plugin = envInfo
	man.Rewards = rewardInfos
	man.Agent, man.Backend, man.ConfigHash = c.Agent.Kind, c.Sandbox.Backend, c.Hash()
	if c.Agent.Kind == "llm" || judged(c) {
		man.Model = map[string]string{"base_url": c.Model.BaseURL, "name": c.Model.Name}
	}
	man.SkippedTasks = nil
	for _, s := range skipped {
		man.SkippedTasks = append(man.SkippedTasks, map[string]string{"id": s.ID, "reason": s.Reason})
		fmt.Fprintf(g.stderr, "proctor: warning: task %s skipped by the plugin: %s\n", s.ID, s.Reason)
	}
	if err := results.WriteJSONAtomic(manPath, man); err != nil {
		return &infraError{err: err}
	}
	if resolved, err := c.Resolved(); err == nil {
		if err := results.WriteFileAtomic(filepath.Join(dir, results.ConfigFile), resolved); err != nil {
			return &infraError{err: err}
		}
	}

	prices := c.Model.Prices
	r := &host.Runner{
		Env: env, Backend: be, Agent: ag, Store: store, Rewards: scorers,
		Progress: host.NewProgress(g.stderr, isTTY(g.stderr), c.Run.ProgressInterval.Duration),
		Config: host.Config{
			RunID: man.RunID, Concurrency: c.Run.Concurrency, StartConcurrency: c.Run.SandboxStartConcurrency,
			Attempts: c.Run.Attempts, Retries: c.Run.Retries, Seed: c.Run.Seed,
			AgentTimeoutScale: c.Run.AgentTimeoutScale, EnvRewardWeight: c.Env.RewardWeight,
			Timeouts: host.Timeouts{
				SandboxStart: c.Run.SandboxStartTimeout.Duration, Setup: c.Run.SetupTimeout.Duration,
				Agent: c.Run.AgentTimeout.Duration, Verify: c.Run.VerifyTimeout.Duration, Teardown: c.Run.TeardownTimeout.Duration,
			},
			Spec: func(s *sandbox.Spec) {
				if c.Sandbox.CPUs > 0 {
					s.CPUs = c.Sandbox.CPUs
				}
				if c.Sandbox.MemoryMB > 0 {
					s.MemoryMB = c.Sandbox.MemoryMB
				}
				if c.Sandbox.PidsMax > 0 {
					s.PidsMax = c.Sandbox.PidsMax
				}
				s.Pull = c.Sandbox.Pull
			},
			Cost: func(u results.Usage) float64 {
				return (float64(u.PromptTokens-u.CachedTokens)*prices.InputPerMTok +
					float64(u.CachedTokens)*prices.CachedInputPerMTok +
					float64(u.CompletionTokens)*prices.OutputPerMTok) / 1e6
			},
		},
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if h != nil && h.start != nil {
		if err := h.start(dir, store, stop); err != nil {
			return err
		}
	}
	if h != nil && h.record != nil {
		r.OnRecord = h.record
	}
	st, runErr := r.Run(runCtx, tasks)

	recs := store.Records()
	for _, rec := range recs {
		if rec.ImageDigest != "" {
			if man.ImageDigests == nil {
				man.ImageDigests = map[string]string{}
			}
			name := rec.Image
			if name == "" {
				name = "task:" + rec.TaskID
			}
			man.ImageDigests[name] = rec.ImageDigest
		}
	}
	sum := report.Summarize(recs)
	if err := results.WriteJSONAtomic(filepath.Join(dir, results.SummaryFile), sum); err != nil && runErr == nil {
		runErr = &infraError{err: err}
	}
	if !st.Interrupted {
		now := time.Now().UTC()
		man.FinishedAt = &now
	}
	if h != nil && h.finish != nil {
		if err := h.finish(&man); err != nil && runErr == nil {
			runErr = err
		}
	}
	results.WriteJSONAtomic(manPath, man)
	// After the manifest, so the page knows whether the run finished.
	if err := writeHTMLReport(dir); err != nil {
		fmt.Fprintf(g.stderr, "proctor: warning: write %s: %v\n", results.ReportFile, err)
	}
	fmt.Fprintf(g.stdout, "run %s: %s\n", man.RunID, dir)
	report.Write(g.stdout, sum, "text")
	switch {
	case runErr != nil:
		return &infraError{err: runErr, hint: "results so far are in " + dir + "; fix the cause and run the same command again to resume"}
	case st.Interrupted:
		fmt.Fprintf(g.stderr, "proctor: interrupted: %d rollouts recorded; run the same command again to resume\n", st.Finished+st.Skipped)
		return errInterrupted
	case sum.Outcomes[results.OutcomeInfraError] > 0:
		fmt.Fprintf(g.stderr, "proctor: %d rollouts ended as infra_error (see the report)\n", sum.Outcomes[results.OutcomeInfraError])
		return errSomeFailed
	}
	return nil
}

// samePlugins refuses to resume a run with other plugin bytes than it
// recorded: its manifest and results would claim a plugin that did not
// run. A plugin is compared by sha256: the environment's, and each stacked
// reward's by its name.
func samePlugins(dir string, old Manifest, env PluginInfo, rewards []PluginInfo) error {
	if old.Plugin.SHA256 != "" && old.Plugin.SHA256 != env.SHA256 {
		return changedPlugin(dir, "the [env] plugin "+env.Name, "[env]", old.Plugin, env)
	}
	for _, r := range rewards {
		for _, o := range old.Rewards {
			if o.Name == r.Name && o.SHA256 != "" && o.SHA256 != r.SHA256 {
				return changedPlugin(dir, fmt.Sprintf("the [[reward]] plugin %q", r.Name), fmt.Sprintf("the [[reward]] table named %q", r.Name), o, r)
			}
		}
	}
	return nil
}

func changedPlugin(dir, what, table string, old, now PluginInfo) error {
	hint := fmt.Sprintf("run the plugin that ran, pinned (sha256 = %q in %s), or write to a new --out", old.SHA256, table)
	if repo, ok := strings.CutPrefix(old.Source, "oci:"); ok && old.Digest != "" {
		repo, _, _ = strings.Cut(repo, "@")
		hint = fmt.Sprintf("pin the plugin to the digest that ran (plugin = \"oci://%s@%s\" in %s), or write to a new --out", repo, old.Digest, table)
	}
	return &usageError{
		err:  fmt.Errorf("resume %s: %s has sha256 %s, but the run recorded sha256 %s (%s): a resumed run must run the same bytes", dir, what, now.SHA256, old.SHA256, old.Source),
		hint: hint,
	}
}

// keepRecorded adds to the rewards that run now the recorded ones that no
// longer do: their scores are still in results.jsonl.
func keepRecorded(old, now []PluginInfo) []PluginInfo {
	for _, o := range old {
		if !slices.ContainsFunc(now, func(n PluginInfo) bool { return n.Name == o.Name }) {
			now = append(now, o)
		}
	}
	return now
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
	c, err := loadConfig(t.Config, t.Set)
	if err != nil {
		return err
	}
	env, _, rt, err := environment(g.ctx, c)
	if err != nil {
		return err
	}
	defer rt.Close(g.ctx)
	tasks, skipped, err := env.Tasks(g.ctx)
	if err != nil {
		return &usageError{err: fmt.Errorf("load tasks: %w", err)}
	}
	for _, tk := range tasks {
		fmt.Fprintf(g.stdout, "%s\t%s\t%s\t%s\n", tk.ID, tk.Category, tk.Difficulty, tk.AgentTimeout)
	}
	for _, s := range skipped {
		fmt.Fprintf(g.stderr, "skipped %s: %s\n", s.ID, s.Reason)
	}
	fmt.Fprintf(g.stderr, "%d tasks\n", len(tasks))
	return nil
}

type reportCmd struct {
	Dir    string `arg:"" help:"Run directory." type:"existingdir"`
	Format string `help:"text, json, md or html (one self-contained page)." default:"text" enum:"text,json,md,html"`
	Out    string `help:"Write the report to this file (atomically) instead of stdout." type:"path" placeholder:"FILE"`
}

func (r reportCmd) Run(g *globals) error {
	if _, err := os.Stat(filepath.Join(r.Dir, results.ResultsFile)); err != nil {
		return &usageError{err: fmt.Errorf("%s has no %s", r.Dir, results.ResultsFile), hint: "give the directory a run wrote (runs/<name>)"}
	}
	// Read, not Open: the run may still be writing to the directory.
	var buf bytes.Buffer
	var err error
	if r.Format == "html" {
		err = report.WriteHTML(&buf, r.Dir, report.HTMLOptions{})
	} else {
		var recs []results.Record
		if recs, err = results.Read(r.Dir); err == nil {
			err = report.Write(&buf, report.Summarize(recs), r.Format)
		}
	}
	if err != nil {
		return &infraError{err: err}
	}
	if r.Out == "" {
		_, err = g.stdout.Write(buf.Bytes())
	} else {
		err = results.WriteFileAtomic(r.Out, buf.Bytes())
	}
	if err != nil {
		return &infraError{err: err}
	}
	return nil
}

// writeHTMLReport writes report.html into the run directory.
func writeHTMLReport(dir string) error {
	var buf bytes.Buffer
	if err := report.WriteHTML(&buf, dir, report.HTMLOptions{}); err != nil {
		return err
	}
	return results.WriteFileAtomic(filepath.Join(dir, results.ReportFile), buf.Bytes())
}

type sandboxCmd struct {
	Prune pruneCmd `cmd:"" help:"Remove sandboxes left by killed runs."`
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
		if c, err = loadConfig(p.Config, nil); err != nil {
			return err
		}
	}
	_, prune, err := backend(g.ctx, c)
	if err != nil {
		return err
	}
	if prune == nil {
		fmt.Fprintf(g.stdout, "the %s backend leaves no sandboxes behind\n", c.Sandbox.Backend)
		return nil
	}
	n, err := prune(g.ctx, p.RunID)
	fmt.Fprintf(g.stdout, "removed %d sandboxes\n", n)
	if err != nil {
		return &infraError{err: err}
	}
	return nil
}
