// Command tb2 is the bundled Terminal-Bench 2 environment. It reads Harbor
// task folders (task.toml as Harbor's TaskConfig reads it) and dataset rows
// in the layout of the Hugging Face terminal-bench-2 dataset, runs each
// task's own image, and verifies the way Harbor does, with its holes
// closed: the verifier's folder is emptied and the tests uploaded only when
// verification starts, so an agent can neither pre-write a reward nor read
// the tests. A verifier that reaches no reward (its tests run past their
// timeout, or write no, an empty or an unreadable reward) is Harbor's
// outcome: reward 0, with the tests' output kept, not retried.
// docs/config.md lists what it reads of task.toml and where it differs
// from Harbor on purpose.
//
// It is built only against the public SDK and doubles as the reference
// plugin for authors.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.Register(&env{}) }

func main() {}

// Config is the run's [env.config] table.
type Config struct {
	Dataset             string   `json:"dataset"` // task folders, a JSONL/parquet file, or hf://owner/name
	Split               string   `json:"split"`
	Tasks               []string `json:"tasks"`      // include globs (default all)
	Exclude             []string `json:"exclude"`    // exclude globs
	Categories          []string `json:"categories"` // keep only these
	Skip                []string `json:"skip"`       // tasks the backend cannot run (KVM, ...)
	ForceBuild          bool     `json:"force_build"`
	AgentTimeoutMult    float64  `json:"agent_timeout_multiplier"`
	VerifierTimeoutMult float64  `json:"verifier_timeout_multiplier"`
	TestTimeout         string   `json:"test_timeout"` // overrides every task's verifier timeout
	CPUs                float64  `json:"cpus"`
	MemoryMB            int64    `json:"memory_mb"`
}

func parseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, fmt.Errorf("env.config: %w", err)
	}
	if c.Dataset == "" {
		return c, errors.New(`env.config.dataset is required: a folder of Harbor tasks, a .jsonl/.parquet file, or hf://NousResearch/terminal-bench-2`)
	}
	if c.AgentTimeoutMult == 0 {
		c.AgentTimeoutMult = 1
	}
	if c.VerifierTimeoutMult == 0 {
		c.VerifierTimeoutMult = 1
	}
	return c, nil
}

type env struct{}

func (*env) Manifest() abi.Manifest {
	return abi.Manifest{
		Name:         "tb2",
		Version:      "1.0.0",
		Description:  "Terminal-Bench 2: Harbor task folders and terminal-bench-2 dataset rows, verified Harbor's way",
		Capabilities: []string{abi.OpExec, abi.OpReadFile, abi.OpWriteFile, abi.OpUpload, abi.OpDatasetRead},
		ConfigSchema: json.RawMessage(`{"type":"object","required":["dataset"],"properties":{` +
			`"dataset":{"type":"string"},"split":{"type":"string"},"tasks":{"type":"array","items":{"type":"string"}},` +
			`"exclude":{"type":"array"},"categories":{"type":"array"},"skip":{"type":"array"},"force_build":{"type":"boolean"},` +
			`"agent_timeout_multiplier":{"type":"number"},"verifier_timeout_multiplier":{"type":"number"},` +
			`"test_timeout":{"type":"string"},"cpus":{"type":"number"},"memory_mb":{"type":"integer"}}}`),
		// What decides a verdict: a resume that changes one is refused.
		ScoringKeys: []string{"test_timeout", "verifier_timeout_multiplier"},
	}
}

func anyMatch(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

func (*env) LoadTasks(raw json.RawMessage) (abi.TasksResponse, error) {
	c, err := parseConfig(raw)
	if err != nil {
		return abi.TasksResponse{}, err
	}
	rows, err := sdk.ReadAllRows(c.Dataset, c.Split)
	if err != nil {
		return abi.TasksResponse{}, err
	}
	var resp abi.TasksResponse
	for i, row := range rows {
		t, err := FromRow(row)
		if err != nil {
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: fmt.Sprintf("row %d", i), Reason: err.Error()})
			continue
		}
		switch {
		case len(c.Tasks) > 0 && !anyMatch(c.Tasks, t.Name),
			anyMatch(c.Exclude, t.Name),
			len(c.Categories) > 0 && !anyMatch(c.Categories, t.Category):
			continue
		case anyMatch(c.Skip, t.Name):
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: t.Name, Reason: "in env.config.skip"})
			continue
		case t.Broken == "" && t.Refused != "":
			resp.Skipped = append(resp.Skipped, abi.Skipped{ID: t.Name, Reason: t.Refused})
			continue
		}
		if len(t.Ignored) > 0 {
			sdk.Log(sdk.LevelWarn, fmt.Sprintf("task %s: task.toml keys without effect in proctor: %s", t.Name, strings.Join(t.Ignored, ", ")))
		}
		agentTO, agentFrom := t.agentTimeout(c)
		t.VerifierTimeoutSec, t.VerifierTimeoutFrom = t.verifierTimeout(c)
		data, _ := json.Marshal(t)
		resp.Tasks = append(resp.Tasks, abi.Task{
			ID: t.Name, Category: t.Category, Difficulty: t.Difficulty, Tags: t.Tags,
			AgentTimeoutSec: agentTO, AgentTimeoutFrom: agentFrom,
			// The verifier's own work (uploading the tests, reading the
			// reward) gets a minute past test.sh's timeout.
			VerifyTimeoutSec: t.VerifierTimeoutSec + verifyMargin, VerifyTimeoutFrom: t.VerifierTimeoutFrom + fmt.Sprintf(", + %d s for the verifier's own work", verifyMargin),
			Broken: t.Broken, Data: data,
		})
	}
	return resp, nil
}

// verifyMargin is what verification may take past test.sh's timeout.
const verifyMargin = 60

// agentTimeout is the task's agent timeout times agent_timeout_multiplier
// (0: the run's), and where it comes from.
func (t *Task) agentTimeout(c Config) (float64, string) {
	if t.AgentTimeoutSec <= 0 {
		return 0, ""
	}
	return t.AgentTimeoutSec * c.AgentTimeoutMult,
		t.timeoutFrom("[agent] timeout_sec", "agent_timeout_sec", t.AgentTimeoutSec, "agent_timeout_multiplier", c.AgentTimeoutMult)
}

// verifierTimeout is test.sh's timeout: env.config.test_timeout, else the
// task's times verifier_timeout_multiplier; and where it comes from.
func (t *Task) verifierTimeout(c Config) (float64, string) {
	if c.TestTimeout != "" {
		if d, err := parseSeconds(c.TestTimeout); err == nil {
			return d, fmt.Sprintf("env.config.test_timeout = %q", c.TestTimeout)
		}
	}
	return t.VerifierTimeoutSec * c.VerifierTimeoutMult,
		t.timeoutFrom("[verifier] timeout_sec", "test_timeout_sec", t.VerifierTimeoutSec, "verifier_timeout_multiplier", c.VerifierTimeoutMult)
}

// timeoutFrom names where a task's timeout of sec seconds comes from: its
// task.toml field, or its dataset row's column, times the env.config
// multiplier mult when that is not 1.
func (t *Task) timeoutFrom(field, column string, sec float64, multKey string, mult float64) string {
	from := fmt.Sprintf("%s %s = %g", t.origin(), field, sec)
	if t.FromRow {
		from = fmt.Sprintf("the row's %s = %g", column, sec)
	}
	if mult != 1 {
		from += fmt.Sprintf(" × env.config.%s %g", multKey, mult)
	}
	return from
}

// origin names where a task folder's timeouts come from.
func (t *Task) origin() string { return "task.toml" }

// parseSeconds reads "180s", "3m", "1h" or a plain number of seconds.
func parseSeconds(s string) (float64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "ms"):
		mult, s = 0.001, strings.TrimSuffix(s, "ms")
	case strings.HasSuffix(s, "s"):
		s = strings.TrimSuffix(s, "s")
	case strings.HasSuffix(s, "m"):
		mult, s = 60, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "h"):
		mult, s = 3600, strings.TrimSuffix(s, "h")
	}
	v, err := strconv.ParseFloat(s, 64)
	return v * mult, err
}

func task(r abi.RolloutRequest) (Task, error) {
	var t Task
	if err := json.Unmarshal(r.Task.Data, &t); err != nil {
		return t, err
	}
	if t.Broken != "" {
		return t, sdk.Errorf("setup", "task %s cannot run: %s", t.Name, t.Broken)
	}
	return t, nil
}

func (*env) Sandbox(r abi.RolloutRequest) (abi.SandboxSpec, error) {
	t, err := task(r)
	if err != nil {
		return abi.SandboxSpec{}, err
	}
	c, err := parseConfig(r.Config)
	if err != nil {
		return abi.SandboxSpec{}, err
	}
	spec := abi.SandboxSpec{Image: t.DockerImage, CPUs: t.CPUs, MemoryMB: t.MemoryMB, DiskMB: t.StorageMB,
		// Harbor builds when there is no image, or when asked to and
		// there is a Dockerfile to build.
		ForceBuild: c.ForceBuild && t.HasDockerfile, BuildTimeoutSec: t.BuildTimeoutSec, BuildTimeoutFrom: t.buildTimeoutFrom(),
		Workdir: t.Workdir, Env: t.Env, User: t.VerifierUser,
		// What the verifier runs and writes is out of the agent's reach.
		Private: []string{testsDir, verifierDir}}
	if spec.Image == "" || spec.ForceBuild {
		if !t.HasDockerfile {
			return spec, sdk.Errorf("setup", "task %s has no environment/Dockerfile to build", t.Name)
		}
		spec.BuildContext = t.EnvironmentTar
	} else if t.HasDockerfile {
		// As Harbor, the image is used as it is; the Dockerfile beside it
		// builds only when asked.
		spec.BuildHint = fmt.Sprintf("task %s has environment/Dockerfile: set [env.config] force_build = true to build the image from it", t.Name)
	}
	if c.CPUs > 0 {
		spec.CPUs = c.CPUs
	}
	if c.MemoryMB > 0 {
		spec.MemoryMB = c.MemoryMB
	}
	if t.AgentUser != t.VerifierUser {
		spec.AgentUser = t.AgentUser
	}
	if t.Internet {
		spec.Network = abi.NetworkInternet
	}
	return spec, nil
}

// buildTimeoutFrom names where the task's build timeout comes from.
func (t *Task) buildTimeoutFrom() string {
	if t.FromRow {
		return fmt.Sprintf("the tb2 plugin's build_timeout_sec = %g for dataset rows", t.BuildTimeoutSec)
	}
	return fmt.Sprintf("%s [environment] build_timeout_sec = %g", t.origin(), t.BuildTimeoutSec)
}

// The folders Harbor's trial uses: the tests it uploads and runs, where
// test.sh writes the reward and logs, where the oracle writes its output.
const (
	testsDir    = "/tests"
	verifierDir = "/logs/verifier"
	agentLogDir = "/logs/agent"
	solutionDir = "/solution"
)

func (*env) Setup(r abi.RolloutRequest) error {
	t, err := task(r)
	if err != nil {
		return err
	}
	// Harbor mounts these writable for whichever user the agent and the
	// verifier run as.
	res, err := sdk.Exec(abi.ExecRequest{Cmd: "mkdir -p /logs/agent /logs/verifier /logs/artifacts && { chmod 777 /logs/agent /logs/artifacts 2>/dev/null || true; }", TimeoutMs: 60000})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return sdk.Errorf("setup", "create /logs: %s", res.Stderr)
	}
	// A prebuilt image with environment/ files but no Dockerfile gets
	// them copied into its working directory, as Harbor does.
	if t.DockerImage != "" && !t.HasDockerfile && t.EnvironmentTar != nil {
		dir := t.Workdir
		if dir == "" {
			res, err := sdk.Exec(abi.ExecRequest{Cmd: "pwd", TimeoutMs: 60000})
			if err != nil {
				return err
			}
			dir = strings.TrimSpace(res.Stdout)
		}
		if err := sdk.Upload(dir, t.EnvironmentTar); err != nil {
			return sdk.Errorf("setup", "copy environment/ into %s: %v", dir, err)
		}
	}
	if t.Healthcheck != nil {
		return healthcheck(t.Healthcheck)
	}
	return nil
}

// healthcheck runs [environment.healthcheck] as Harbor's
// BaseEnvironment.run_healthcheck does: until the command exits 0; during
// the start period failures do not count; after it, the check fails after
// retries failures in a row. Time is what the commands and the waits took.
func healthcheck(h *Healthcheck) error {
	elapsed, failures := 0.0, int64(0)
	wait := func(sec float64) error {
		if sec <= 0 {
			return nil
		}
		res, err := sdk.Exec(abi.ExecRequest{Cmd: fmt.Sprintf("sleep %g", sec)})
		elapsed += float64(res.DurationMs) / 1000
		return err
	}
	for {
		inStart := elapsed < h.StartPeriodSec
		// Harbor passes int(timeout_sec): a fraction is cut, and 0 means
		// no timeout.
		res, err := sdk.Exec(abi.ExecRequest{Cmd: h.Command, TimeoutMs: int64(h.TimeoutSec) * 1000, MaxOutput: 4096})
		if err != nil {
			return err
		}
		elapsed += float64(res.DurationMs) / 1000
		switch {
		case res.TimedOut:
			return sdk.Errorf("setup", "healthcheck %q ran past its timeout of %ds (task.toml [environment.healthcheck] timeout_sec)", h.Command, int64(h.TimeoutSec))
		case res.ExitCode == 0:
			return nil
		case inStart:
			err = wait(h.StartIntervalSec)
		default:
			if failures++; failures >= h.Retries {
				return sdk.Errorf("setup", "healthcheck failed after %d consecutive retries: %s (exit %d: %s)", h.Retries, h.Command, res.ExitCode, tailString(strings.TrimSpace(res.Stdout+res.Stderr), 500))
			}
			err = wait(h.IntervalSec)
		}
		if err != nil {
			return err
		}
	}
}

func (*env) Prompt(r abi.RolloutRequest) (abi.PromptResponse, error) {
	t, err := task(r)
	return abi.PromptResponse{User: t.Instruction}, err
}

// Oracle runs solution/solve.sh as Harbor's OracleAgent does: uploaded to
// /solution, made executable, run as its own program (its shebang counts)
// with DEBIAN_FRONTEND=noninteractive and [solution].env, its output in
// /logs/agent/oracle.txt. A non-zero exit is what the solution did, not an
// error.
func (*env) Oracle(r abi.RolloutRequest) (abi.OracleResponse, error) {
	t, err := task(r)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	if t.MissingSolve || t.SolutionTar == nil {
		return abi.OracleResponse{}, sdk.Errorf("setup", "task %s has no solution/solve.sh", t.Name)
	}
	if err := sdk.Upload(solutionDir, t.SolutionTar); err != nil {
		return abi.OracleResponse{}, err
	}
	env := map[string]string{"DEBIAN_FRONTEND": "noninteractive"}
	maps.Copy(env, t.SolutionEnv)
	// The agent's timeout (what is left of it: the host says so in the
	// request); Harbor passes it as int(seconds).
	timeout := int64(r.Task.AgentTimeoutSec)
	const out = agentLogDir + "/oracle.txt"
	res, err := sdk.Exec(abi.ExecRequest{Cmd: "chmod +x " + solutionDir + "/solve.sh; (" + solutionDir + "/solve.sh) > " + out + " 2>&1",
		TimeoutMs: timeout * 1000, Env: env})
	if err != nil {
		return abi.OracleResponse{}, err
	}
	log, err := readLog(out)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	if res.TimedOut {
		// The agent's outcome, with what the solution printed until then.
		return abi.OracleResponse{Output: log, TimedOut: true}, nil
	}
	code := res.ExitCode
	return abi.OracleResponse{Output: log, ExitCode: &code}, nil
}

// readLog reads a log file the task's scripts wrote, whole up to
// abi.MaxVerifyLog bytes; a longer one keeps its first quarter and its
// end around a line that says what was cut. A missing file reads empty.
func readLog(path string) (string, error) {
	b, size, err := sdk.ReadFileHead(path, abi.MaxVerifyLog)
	if errors.Is(err, sdk.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if size <= abi.MaxVerifyLog {
		return string(b), nil
	}
	head := abi.MaxVerifyLog / 4
	tail := abi.MaxVerifyLog - head - 256
	res, err := sdk.Exec(abi.ExecRequest{Cmd: fmt.Sprintf("tail -c %d %s", tail, path), MaxOutput: tail + 1024, TimeoutMs: 60000})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s\n[proctor: %d bytes of %d cut here; the whole file was %s]\n%s",
		b[:head], size-int64(head)-int64(len(res.Stdout)), size, path, res.Stdout), nil
}

// prepareVerifier makes /logs/verifier and /tests empty folders, with a
// process only where there is something to make or delete.
const prepareVerifier = `for d in /logs/verifier /tests; do [ -d "$d" ] || mkdir -p "$d" || exit 1; done
shopt -s nullglob dotglob
set -- /logs/verifier/* /tests/*
[ $# -eq 0 ] || find /logs/verifier /tests -mindepth 1 -delete`

func (*env) Verify(r abi.VerifyRequest) (abi.VerifyResponse, error) {
	t, err := task(r.RolloutRequest)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	// The host emptied the private folders when the agent's turn ended,
	// and nothing the agent runs can reach them; empty them here too for a
	// backend that keeps them as plain folders, and upload the tests only
	// now. Folders that are there and empty (the isolated case) cost no
	// process.
	res, err := sdk.Exec(abi.ExecRequest{Cmd: prepareVerifier, TimeoutMs: 60000, Env: map[string]string{}})
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	if res.ExitCode != 0 {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "prepare /logs/verifier: %s", res.Stderr)
	}
	if err := sdk.Upload(testsDir, t.TestsTar); err != nil {
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "upload tests: %v", err)
	}
	// As Harbor's Verifier: test.sh made executable and run as its own
	// program, its output and errors in test-stdout.txt, with
	// [verifier].env.
	const stdout = verifierDir + "/test-stdout.txt"
	res, err = sdk.Exec(abi.ExecRequest{Cmd: "[ -x " + testsDir + "/test.sh ] || chmod +x " + testsDir + "/test.sh; (" + testsDir + "/test.sh) > " + stdout + " 2>&1",
		TimeoutMs: int64(t.VerifierTimeoutSec * 1000), Env: t.VerifierEnv})
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	log, err := readLog(stdout)
	if err != nil {
		return abi.VerifyResponse{}, err
	}
	v := abi.VerifyResponse{Output: headTail(log, outputHead, outputTail), Log: log}
	if res.TimedOut {
		// Harbor's VerifierTimeoutError: no reward, the trial's reward 0.
		v.Failure = fmt.Sprintf("test.sh ran past the verifier timeout of %gs (%s)", t.VerifierTimeoutSec, t.VerifierTimeoutFrom)
		return v, nil
	}
	rw, err := readReward()
	switch {
	case errors.Is(err, errNoReward):
		v.Failure = fmt.Sprintf("%v (test.sh exit %d)", err, res.ExitCode)
		return v, nil
	case err != nil:
		return abi.VerifyResponse{}, sdk.Errorf("verifier", "%v (test.sh exit %d); output:\n%s", err, res.ExitCode, v.Output)
	}
	v.Reward, v.Scores, v.Passed, v.RewardSource, v.Tests = rw.Value, rw.Scores, rw.Value >= 1, rw.Source, testResults(log)
	return v, nil
}

// The verifier's output a record keeps (the whole output is the
// rollout's verifier log): its start, where a failing test's setup shows,
// and its end, where the summary is.
const (
	outputHead = 2000
	outputTail = 6000
)

// headTail is s, or its first head and last tail bytes around a line that
// says how much was cut and where the whole is; cuts fall on UTF-8
// boundaries.
func headTail(s string, head, tail int) string {
	if len(s) <= head+tail {
		return s
	}
	h := strings.ToValidUTF8(s[:head], "")
	t := strings.ToValidUTF8(s[len(s)-tail:], "")
	return fmt.Sprintf("%s\n[... %d bytes cut here: the whole output is the rollout's verifier log ...]\n%s", h, len(s)-len(h)-len(t), t)
}

// testResults reads the per-test results the tests left: ctrf.json, else
// a JUnit XML report in /logs/verifier, else pytest's -rA summary in the
// log.
func testResults(log string) []abi.TestResult {
	if b, err := sdk.ReadFile(verifierDir + "/ctrf.json"); err == nil {
		if tests := parseCTRF(b); tests != nil {
			return tests
		}
	}
	res, err := sdk.Exec(abi.ExecRequest{Cmd: `cd /logs/verifier && n=0 && for f in *.xml; do
  [ -f "$f" ] || continue
  echo "$f"; n=$((n + 1))
  if [ "$n" -ge 8 ]; then break; fi
done`, TimeoutMs: 60000})
	if err == nil {
		var tests []abi.TestResult
		for _, name := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
			if name == "" {
				continue
			}
			if b, err := sdk.ReadFile(verifierDir + "/" + name); err == nil {
				tests = append(tests, parseJUnit(b)...)
			}
		}
		if tests != nil {
			return tests
		}
	}
	return parsePytestSummary(log)
}
