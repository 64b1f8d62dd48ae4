// Package abi is the wire contract between proctor (the host) and its
// environment plugins (WebAssembly modules). Both sides import it; it uses
// only the standard library. This file is the whole contract: link names,
// status codes, hook and operation names and their JSON messages.
//
// # Linking
//
// A plugin is a WASI reactor (for Go: GOOS=wasip1 GOARCH=wasm go build
// -buildmode=c-shared). The host runs `_initialize` once per instance and
// never `main`. The plugin exports:
//
//	proctor_abi_v1()                                   marker; its presence is the version
//	proctor_handle(method_len, input_len u32) -> u32   one entry point for every hook
//
// and imports from module "proctor_v1":
//
//	read_input(method_ptr, input_ptr u32)              copy the method name and JSON input in
//	set_output(ptr, len u32)                           hand the JSON result back (host copies at once)
//	call(op_ptr, op_len, req_ptr, req_len, resp_ptr, resp_cap u32) -> u64
//	                                                   call a host operation: (status<<32 | resp_len);
//	                                                   if resp_len > resp_cap nothing was copied and the
//	                                                   host keeps the response for take_response
//	take_response(ptr u32)                             copy the kept response (exactly resp_len bytes)
//	log(level i32, ptr, len u32)                       a log line (level: -4 debug, 0 info, 4 warn, 8 error)
//
// The plugin owns all of its memory: the host never allocates inside it. A
// host that is not v1 fails at link time; a plugin without the v1 marker is
// refused before it is instantiated, with a message to rebuild it against
// the current SDK.
//
// # Files
//
// A plugin may carry read-only files in a custom section named
// FilesSection: a zip archive whose entries are all stored (not
// compressed). The host compiles the module without that section, so
// plugins that differ only in their files (Python plugins: one runtime,
// each with its own code) share one compilation, and mounts the archive's
// tree read-only at "/" of every instance. A plugin without the section
// gets no files at all.
//
// A plugin may also carry a memory image in a custom section named
// MemorySection: the state its initialization leaves (the Python runtime:
// the interpreter started and the plugin imported), written over each
// fresh instance's memory right after _initialize, so every rollout starts
// initialized instead of initializing again. Its payload is gzip of the
// little-endian u32 memory size in 64 KiB pages, the u32 count of runs,
// and each run as u32 offset, u32 length and its bytes, in increasing,
// non-overlapping offsets: the bytes that differ from a fresh instance.
// The module's mutable globals are not in the image, so the state must be
// taken between calls (the stack unwound). The host's wasm.Plugin.Snapshot
// makes one.
//
// # Versions
//
// The major version (Version) is in the link names: a host and a plugin of
// different majors refuse each other at load. Inside a major, the contract
// grows by minor versions (Minor) without breaking what was built before:
// a minor version adds hooks, host operations, optional message fields and
// status codes, never removes or renames one. A plugin says which minor it
// was built for in its Manifest (ABIMinor; 0 for plugins older than
// minors), and the host says which it speaks, and which hooks and
// operations it has, in HostInfo (ABIMinor, Features), so a plugin can ask
// before it relies on something new. A plugin built for a newer minor than
// the host's still loads: a hook the host does not know is never called,
// an operation it does not know is answered StatusUnknown, and an optional
// capability it does not know is denied (StatusDenied) when called. Only a
// required capability the host does not have refuses the plugin.
//
// Both sides ignore JSON fields they do not know, so a field added in a
// later minor is invisible to a party built before it. The JSON names
// below are the wire format: the golden files in testdata/wire pin them.
//
// Minor versions:
//
//	v1.0  the contract before minor versions
//	v1.1  Manifest.ABIMinor and SDK, HostInfo.ABIMinor and Features, the
//	      config.check hook, error classes (Class*), unknown optional
//	      capabilities denied at call time instead of refused at load;
//	      optional fields: SandboxSpec.Private, DiskMB, AgentUser and
//	      BuildTimeoutSec, Task.Broken, VerifyResponse.Log and RewardSource,
//	      OracleResponse.ExitCode, ReadFileRequest.MaxBytes and
//	      ReadFileResponse.Size and Truncated
//	v1.2  the hook timeout bounds a hook's own work, not its sandbox
//	      operations; the error class ClassDataset; optional fields:
//	      Task.AgentTimeoutFrom and VerifyTimeoutFrom,
//	      SandboxSpec.BuildTimeoutFrom and BuildHint, VerifyResponse.Failure,
//	      OracleResponse.TimedOut, Manifest.ScoringKeys
//
// # Hooks
//
// Each hook is a method name; its input and output are JSON (types below).
// A hook returns StatusOK with its output, or StatusError with an Error
// object. The host calls describe once per load, tasks.load once per run,
// and the rollout hooks on a fresh instance per rollout, in this order:
// rollout.sandbox, rollout.setup, prompt.format, (the agent runs; it may
// call rollout.oracle), rollout.verify, rollout.teardown. A plugin that
// implements config.check is asked, before any rollout starts, whether its
// config table is valid, so a misspelt key fails the run at once.
//
// A hook that fails returns StatusError and an Error whose Class says what
// kind of failure the host records (Class*). A class the host does not know
// is recorded as ClassPlugin.
package abi

import "encoding/json"

// Version is the ABI's major version, the one in the link names.
const Version = 1

// Minor is the ABI's minor version this package describes (see Versions).
const Minor = 2

// Link names.
const (
	MarkerExport = "proctor_abi_v1"
	HandleExport = "proctor_handle"
	ImportModule = "proctor_v1"

	// FilesSection is the custom section of a plugin's read-only files.
	FilesSection = "proctor.files"
	// MemorySection is the custom section of a plugin's memory image.
	MemorySection = "proctor.memory"

	ImportReadInput    = "read_input"
	ImportSetOutput    = "set_output"
	ImportCall         = "call"
	ImportTakeResponse = "take_response"
	ImportLog          = "log"
)

// Status codes, returned by proctor_handle and by the call import.
const (
	StatusOK         = 0 // success; the output is the result
	StatusError      = 1 // failure; the output is an Error object
	StatusUnknown    = 2 // unknown hook or operation
	StatusDenied     = 3 // the operation was not declared or not granted
	StatusDeadline   = 4 // the hook's or operation's deadline passed
	StatusTooLarge   = 5 // a message is over its size cap
	StatusBadRequest = 6 // the input is not valid for the method
)

// Hook (method) names.
const (
	HookDescribe = "describe"         // host → plugin, once per load: Manifest
	HookTasks    = "tasks.load"       // once per run: TasksRequest → TasksResponse
	HookPrompt   = "prompt.format"    // per rollout: RolloutRequest → PromptResponse
	HookSandbox  = "rollout.sandbox"  // per rollout, first: RolloutRequest → SandboxSpec
	HookSetup    = "rollout.setup"    // after the sandbox started: RolloutRequest → Empty
	HookVerify   = "rollout.verify"   // after the agent: VerifyRequest → VerifyResponse
	HookOracle   = "rollout.oracle"   // by the oracle agent: RolloutRequest → OracleResponse
	HookTeardown = "rollout.teardown" // last, best effort: RolloutRequest → Empty
	HookReward   = "reward.score"     // reward plugins: RewardRequest → RewardResponse
	// HookConfig (v1.1) checks the run's config table for the plugin
	// ([env.config] or the [[reward]] table's config) before any rollout:
	// ConfigRequest → Empty, StatusError with a message naming the key.
	HookConfig = "config.check"
)

// Hooks lists every hook name of this minor version.
func Hooks() []string {
	return []string{HookDescribe, HookTasks, HookPrompt, HookSandbox, HookSetup, HookVerify, HookOracle, HookTeardown, HookReward, HookConfig}
}

// Host operation names. Each is a capability: a plugin may call only the
// operations its Manifest declares and the run grants. Sandbox operations
// always act on the calling rollout's own sandbox.
const (
	OpExec        = "sandbox.exec"       // ExecRequest → ExecResponse
	OpReadFile    = "sandbox.read_file"  // ReadFileRequest → ReadFileResponse
	OpWriteFile   = "sandbox.write_file" // WriteFileRequest → Empty
	OpUpload      = "sandbox.upload"     // UploadRequest → Empty (a tar, checked by the host)
	OpDownload    = "sandbox.download"   // DownloadRequest → DownloadResponse (a tar)
	OpDatasetRead = "dataset.read"       // DatasetRequest → DatasetResponse
	OpHostInfo    = "host.info"          // Empty → HostInfo
	// OpReset replaces the rollout's sandbox with a fresh one started from
	// the same spec: the agent's sandbox is closed with everything in it
	// (files, processes), and later sandbox operations act on the new one.
	// A verifier that must not trust the agent's sandbox takes what it
	// needs from it first (a diff, say), then resets and grades there.
	OpReset = "sandbox.reset" // Empty → Empty
	// OpRepoCheckout puts a git repository at a commit into the sandbox,
	// from a bare-repository cache the host keeps and shares between
	// rollouts. The host, not the sandbox, reaches the repository's URL.
	OpRepoCheckout = "repo.checkout" // RepoCheckoutRequest → RepoCheckoutResponse
	// OpModelComplete sends one chat completion through the run's model
	// client (its endpoint, key, limits and retries), for judges. The
	// plugin never sees the key.
	OpModelComplete = "model.complete" // ModelRequest → ModelResponse
)

// Ops lists every host operation of this minor version.
func Ops() []string {
	return []string{OpExec, OpReadFile, OpWriteFile, OpUpload, OpDownload, OpReset, OpDatasetRead, OpHostInfo, OpRepoCheckout, OpModelComplete}
}

// Error classes (v1.1): what the host records a failed hook as, in an
// infra_error's error_class. An empty class is the failing hook's own
// phase (setup for rollout.setup, verifier for rollout.verify, plugin for
// the others); a class the host does not know is ClassPlugin.
const (
	// ClassPlugin is a bug in the plugin: a panic, an uncaught exception,
	// an answer that is not what the hook returns.
	ClassPlugin = "plugin"
	// ClassSetup is a task that could not be set up (a broken task, an
	// image without what it needs).
	ClassSetup = "setup"
	// ClassVerifier is a verifier that could not reach a verdict (its
	// tests did not run, their output could not be read).
	ClassVerifier = "verifier"
	// ClassDataset (v1.2) is a dataset row that cannot be graded as it is
	// (it names a test that does not exist, say): the row's fault, never
	// the agent's.
	ClassDataset = "dataset"
)

// Classes lists the error classes of this minor version.
func Classes() []string { return []string{ClassPlugin, ClassSetup, ClassVerifier, ClassDataset} }

// Error is the output of a failed hook or operation. Class (Class*) tells
// the host how to classify a failed rollout; empty means the hook's own
// phase.
type Error struct {
	Error string `json:"error"`
	Class string `json:"class,omitempty"`
}

// Empty is the input or output of methods that carry nothing.
type Empty struct{}

// Manifest is what describe returns. The SDK fills ABI, ABIMinor, SDK and
// Hooks.
type Manifest struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	ABI     int    `json:"abi"`
	// ABIMinor (v1.1) is the minor version the plugin was built for; 0 for
	// plugins built before minor versions.
	ABIMinor int `json:"abi_minor,omitempty"`
	// SDK (v1.1) names the SDK that built the plugin and its version, as
	// "go 0.1.0" or "python 0.1.0", for messages and manifests.
	SDK          string   `json:"sdk,omitempty"`
	Description  string   `json:"description,omitempty"`
	Hooks        []string `json:"hooks"`
	Capabilities []string `json:"capabilities"`
	// OptionalCapabilities are operations the plugin uses only in some
	// configurations. Unlike Capabilities, a run that does not grant them
	// still loads the plugin; their calls are then denied.
	OptionalCapabilities []string        `json:"optional_capabilities,omitempty"`
	ConfigSchema         json.RawMessage `json:"config_schema,omitempty"`
	// ScoringKeys (v1.2) are the keys of the plugin's config table that
	// change how a rollout is scored (a grading mode, a test timeout). A
	// run resumed with another value for one is refused: its records were
	// scored under the old one. Nil: every key counts.
	ScoringKeys []string `json:"scoring_keys,omitempty"`
}

// ConfigRequest (v1.1) carries a config table for config.check.
type ConfigRequest struct {
	Config json.RawMessage `json:"config"`
}

// TasksRequest carries the run's [env.config] table.
type TasksRequest struct {
	Config json.RawMessage `json:"config"`
}

// Task is one task of the environment. Data is the plugin's own payload,
// handed back untouched in every rollout hook.
type Task struct {
	ID               string   `json:"id"`
	Category         string   `json:"category,omitempty"`
	Difficulty       string   `json:"difficulty,omitempty"`
	Tags             []string `json:"tags,omitempty"`
	AgentTimeoutSec  float64  `json:"agent_timeout_sec,omitempty"`
	VerifyTimeoutSec float64  `json:"verify_timeout_sec,omitempty"`
	// AgentTimeoutFrom and VerifyTimeoutFrom (v1.2) say where those
	// timeouts come from ("task.toml [agent] timeout_sec = 900"), for the
	// error that says which limit fired.
	AgentTimeoutFrom  string          `json:"agent_timeout_from,omitempty"`
	VerifyTimeoutFrom string          `json:"verify_timeout_from,omitempty"`
	Data              json.RawMessage `json:"data,omitempty"`
	// Broken says why the task cannot be run (its task.toml does not
	// parse, say). The host lists it as broken; its rollouts still go
	// through the hooks, which fail with the reason, so each is recorded.
	// Empty for a runnable task (and from plugins older than the field).
	Broken string `json:"broken,omitempty"`
}

// TasksResponse lists the tasks after the config's filters. Skipped lists
// tasks the plugin refused (a broken row), each with its reason, so the
// host records them instead of losing them.
type TasksResponse struct {
	Tasks   []Task    `json:"tasks"`
	Skipped []Skipped `json:"skipped,omitempty"`
}

// Skipped is a task the plugin could not load.
type Skipped struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// RolloutRequest is the input of the per-rollout hooks.
type RolloutRequest struct {
	Task      Task            `json:"task"`
	Config    json.RawMessage `json:"config"`
	RolloutID string          `json:"rollout_id"`
	Attempt   int             `json:"attempt"`
	Seed      uint64          `json:"seed"`
}

// PromptResponse is the agent's prompt.
type PromptResponse struct {
	System string `json:"system,omitempty"`
	User   string `json:"user"`
}

// SandboxSpec is the sandbox a rollout needs. BuildContext is a tar (JSON
// base64) with a Dockerfile, used when Image is empty or ForceBuild is set.
type SandboxSpec struct {
	Image        string            `json:"image,omitempty"`
	BuildContext []byte            `json:"build_context,omitempty"`
	Dockerfile   string            `json:"dockerfile,omitempty"`
	ForceBuild   bool              `json:"force_build,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	User         string            `json:"user,omitempty"`
	// AgentUser is the user the agent's commands run as, when it is not
	// User (the plugin's commands, the verifier's among them, run as
	// User). Empty: User.
	AgentUser string  `json:"agent_user,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	MemoryMB  int64   `json:"memory_mb,omitempty"`
	PidsMax   int64   `json:"pids_max,omitempty"`
	DiskMB    int64   `json:"disk_mb,omitempty"` // what the sandbox may write
	// BuildTimeoutSec bounds starting the sandbox (building its image
	// included); 0 leaves the run's sandbox start timeout.
	// BuildTimeoutFrom (v1.2) says where it comes from.
	BuildTimeoutSec  float64 `json:"build_timeout_sec,omitempty"`
	BuildTimeoutFrom string  `json:"build_timeout_from,omitempty"`
	// BuildHint (v1.2), for a spec with Image and no BuildContext, says how
	// the task's own context would build the image, for the error when
	// the image cannot be found ("set [env.config] force_build = true").
	BuildHint string `json:"build_hint,omitempty"`
	// Network says what the task needs: "" or "none" no network,
	// NetworkInternet the internet. The run decides how it is given
	// ([sandbox] network: the backend's ordinary network, the host's, or
	// none, which withholds it and says so in the rollout's record).
	// "host" is read as NetworkInternet.
	Network string `json:"network,omitempty"`
	// Private lists absolute folders only the plugin's own operations see:
	// the verifier's tests and its output. Each starts empty, is emptied
	// again when verification starts, and is out of reach of everything
	// the agent runs (a process it left running cannot write a reward
	// there). A backend that cannot keep them apart refuses the spec.
	Private []string `json:"private,omitempty"`
}

// NetworkInternet is the SandboxSpec.Network of a task that needs the
// internet.
const NetworkInternet = "internet"

// VerifyRequest asks for the verdict after the agent finished.
type VerifyRequest struct {
	RolloutRequest
	AgentTimedOut bool `json:"agent_timed_out"`
}

// TestResult is one test's outcome.
type TestResult struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // passed, failed, skipped, error
	Message string `json:"message,omitempty"`
}

// VerifyResponse is the verdict. Output is the tail of the verifier's
// output, for humans; Log is its whole output, at most MaxVerifyLog bytes
// (a longer one keeps its head and tail around a line that says what was
// cut), which the host keeps in the run directory. RewardSource names
// where the reward came from (a file, say). Reward and every score are
// finite and within ±1e6; the host refuses a verdict outside that.
//
// Failure (v1.2) says why the verifier reached no reward although it ran
// (its tests ran past their timeout, wrote no reward, or an empty or
// unreadable one): the rollout's outcome is then verifier_failed, with
// reward 0, as Harbor records such a trial. A verifier that could not run
// at all (a broken task, a failed upload) returns an error instead.
type VerifyResponse struct {
	Reward       float64            `json:"reward"`
	Passed       bool               `json:"passed"`
	Failure      string             `json:"failure,omitempty"`
	Scores       map[string]float64 `json:"scores,omitempty"`
	Tests        []TestResult       `json:"tests,omitempty"`
	Output       string             `json:"output,omitempty"`
	Log          string             `json:"log,omitempty"`
	RewardSource string             `json:"reward_source,omitempty"`
}

// MaxVerifyLog is the most of VerifyResponse.Log and OracleResponse.Output
// the host keeps.
const MaxVerifyLog = 1 << 20

// OracleResponse says how applying the reference solution went: what it
// printed (at most MaxVerifyLog bytes) and, when it ran to its end, its
// exit code.
//
// TimedOut (v1.2) says the solution ran past the agent's timeout: Output
// is then what it printed until it was stopped, and the rollout's outcome
// is agent_timeout.
type OracleResponse struct {
	Output   string `json:"output,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// RewardRequest is the input of a reward plugin. Trajectory is the
// rollout's transcript as the run directory keeps it: {task_id,
// rollout_id, seed, system, prompt, trajectory: {agent, model, messages
// (OpenAI chat format), turns (usage, tool timings, errors), stop_reason,
// usage}}.
//
// docs/reward-request.schema.json is its JSON Schema, generated from the
// host's types.
type RewardRequest struct {
	// Task is the task as tasks.load listed it (Data included).
	Task Task `json:"task"`
	// Config is the [[reward]] table's config ({} when it has none).
	Config json.RawMessage `json:"config"`
	// Trajectory is the rollout's transcript (transcripts/<id>.json).
	Trajectory json.RawMessage `json:"trajectory"`
	// Verify is the environment's verdict on the rollout.
	Verify VerifyResponse `json:"verify"`
}

// RewardResponse is a reward plugin's verdict: Reward is its score (what
// the run weighs and adds up), Scores any named details; all finite and
// within ±1e6, as in VerifyResponse.
type RewardResponse struct {
	Reward float64            `json:"reward"`
	Scores map[string]float64 `json:"scores,omitempty"`
}

// ChatMessage is one message of a ModelRequest.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ModelRequest is one chat completion without tools, sent with the run's
// [model] settings (name, temperature, max_tokens).
type ModelRequest struct {
	Messages []ChatMessage `json:"messages"`
}

// ModelResponse is the model's answer.
type ModelResponse struct {
	Content          string `json:"content"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
}

// ExecRequest runs a command with bash in the rollout's sandbox, from the
// sandbox's starting state: the spec's working directory and environment,
// plus Env. It never sees what the agent's shell exported or where it cd'd,
// and leaves no such state behind for the next call.
type ExecRequest struct {
	Cmd       string            `json:"cmd"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Stdin     []byte            `json:"stdin,omitempty"`
	MaxOutput int               `json:"max_output,omitempty"`
}

// ExecResponse is what the command did. A non-zero exit is not an error.
type ExecResponse struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	OOMKilled  bool   `json:"oom_killed,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	DurationMs int64  `json:"duration_ms"`
}

// MaxReadFile is the most a sandbox.read_file answer holds.
const MaxReadFile = 16 << 20

// ReadFileRequest reads a file from the sandbox: its first MaxBytes bytes
// (MaxReadFile when zero or above it).
type ReadFileRequest struct {
	Path     string `json:"path"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
}

// ReadFileResponse holds the file. Missing is set (and Data empty) when the
// file does not exist, which is not an error. Size is the file's size;
// Truncated says Data holds only its first bytes.
type ReadFileResponse struct {
	Data      []byte `json:"data"`
	Missing   bool   `json:"missing,omitempty"`
	Size      int64  `json:"size,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// WriteFileRequest writes a file, creating parent folders.
type WriteFileRequest struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
	Mode uint32 `json:"mode,omitempty"`
}

// UploadRequest extracts a tar archive into Dir.
type UploadRequest struct {
	Dir string `json:"dir"`
	Tar []byte `json:"tar"`
}

// DownloadRequest fetches a path as a tar archive.
type DownloadRequest struct {
	Path string `json:"path"`
}

// DownloadResponse holds the archive.
type DownloadResponse struct {
	Tar []byte `json:"tar"`
}

// DatasetRequest reads rows of a dataset: a local JSON, JSONL or parquet
// file or folder (relative to the config's folder), or hf://owner/name[@rev].
// Offset and Limit page through the rows; Limit 0 means the host's default.
type DatasetRequest struct {
	Source  string   `json:"source"`
	Split   string   `json:"split,omitempty"`
	Offset  int      `json:"offset,omitempty"`
	Limit   int      `json:"limit,omitempty"`
	Columns []string `json:"columns,omitempty"`
}

// DatasetResponse is one page of rows. Next is the offset of the next page;
// EOF is set on the last page.
type DatasetResponse struct {
	Rows []json.RawMessage `json:"rows"`
	Next int               `json:"next"`
	EOF  bool              `json:"eof"`
}

// RepoCheckoutRequest asks for URL (https://, ssh://, git@host:path, or a
// local path) at Commit (a full or abbreviated commit id, or a ref) in the
// sandbox folder Dir. The checkout has no .git of its own: the plugin
// decides what history the agent sees.
type RepoCheckoutRequest struct {
	URL    string `json:"url"`
	Commit string `json:"commit"`
	Dir    string `json:"dir"`
}

// RepoCheckoutResponse names the commit actually checked out.
type RepoCheckoutResponse struct {
	Commit string `json:"commit"`
}

// HostInfo tells the plugin where it runs.
type HostInfo struct {
	ProctorVersion string `json:"proctor_version"`
	ABI            int    `json:"abi"`
	// ABIMinor (v1.1) is the minor version the host speaks; 0 from hosts
	// older than minor versions.
	ABIMinor int `json:"abi_minor,omitempty"`
	// Features (v1.1) names the hooks the host calls and the operations it
	// serves (Hook*, Op*), whether or not this plugin may call them: ask
	// with Has before relying on one newer than v1.0.
	Features  []string `json:"features,omitempty"`
	Backend   string   `json:"backend"`
	RunID     string   `json:"run_id,omitempty"`
	RolloutID string   `json:"rollout_id,omitempty"`
	Seed      uint64   `json:"seed"`
}

// Has reports whether the host has the feature (a hook or an operation
// name). A host older than v1.1 lists none, and has exactly v1.0's.
func (h HostInfo) Has(feature string) bool {
	if h.ABIMinor == 0 && len(h.Features) == 0 {
		return feature != HookConfig && (contains(Hooks(), feature) || contains(Ops(), feature))
	}
	return contains(h.Features, feature)
}

func contains(list []string, s string) bool {
	for _, f := range list {
		if f == s {
			return true
		}
	}
	return false
}
