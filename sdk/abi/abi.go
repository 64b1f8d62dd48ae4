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
// # Hooks
//
// Each hook is a method name; its input and output are JSON (types below).
// A hook returns StatusOK with its output, or StatusError with an Error
// object. The host calls describe once per load, tasks.load once per run,
// and the rollout hooks on a fresh instance per rollout, in this order:
// rollout.sandbox, rollout.setup, prompt.format, (the agent runs; it may
// call rollout.oracle), rollout.verify, rollout.teardown.
package abi

import "encoding/json"

// Version is the ABI version this package describes.
const Version = 1

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
)

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

// Error is the output of a failed hook or operation. Class tells the host
// how to classify a failed rollout (setup, verifier, ...); empty means the
// hook's own phase.
type Error struct {
	Error string `json:"error"`
	Class string `json:"class,omitempty"`
}

// Empty is the input or output of methods that carry nothing.
type Empty struct{}

// Manifest is what describe returns.
type Manifest struct {
	Name         string   `json:"name"`
	Version      string   `json:"version"`
	ABI          int      `json:"abi"`
	Description  string   `json:"description,omitempty"`
	Hooks        []string `json:"hooks"`
	Capabilities []string `json:"capabilities"`
	// OptionalCapabilities are operations the plugin uses only in some
	// configurations. Unlike Capabilities, a run that does not grant them
	// still loads the plugin; their calls are then denied.
	OptionalCapabilities []string        `json:"optional_capabilities,omitempty"`
	ConfigSchema         json.RawMessage `json:"config_schema,omitempty"`
}

// TasksRequest carries the run's [env.config] table.
type TasksRequest struct {
	Config json.RawMessage `json:"config"`
}

// Task is one task of the environment. Data is the plugin's own payload,
// handed back untouched in every rollout hook.
type Task struct {
	ID               string          `json:"id"`
	Category         string          `json:"category,omitempty"`
	Difficulty       string          `json:"difficulty,omitempty"`
	Tags             []string        `json:"tags,omitempty"`
	AgentTimeoutSec  float64         `json:"agent_timeout_sec,omitempty"`
	VerifyTimeoutSec float64         `json:"verify_timeout_sec,omitempty"`
	Data             json.RawMessage `json:"data,omitempty"`
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
	CPUs         float64           `json:"cpus,omitempty"`
	MemoryMB     int64             `json:"memory_mb,omitempty"`
	PidsMax      int64             `json:"pids_max,omitempty"`
	DiskMB       int64             `json:"disk_mb,omitempty"` // what the sandbox may write
	// Network "host" is honoured only when the run's config allows it.
	Network string `json:"network,omitempty"`
	// Private lists absolute folders only the plugin's own operations see:
	// the verifier's tests and its output. Each starts empty, is emptied
	// again when verification starts, and is out of reach of everything
	// the agent runs (a process it left running cannot write a reward
	// there). A backend that cannot keep them apart refuses the spec.
	Private []string `json:"private,omitempty"`
}

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
// output, for humans. Reward and every score are finite and within ±1e6;
// the host refuses a verdict outside that.
type VerifyResponse struct {
	Reward float64            `json:"reward"`
	Passed bool               `json:"passed"`
	Scores map[string]float64 `json:"scores,omitempty"`
	Tests  []TestResult       `json:"tests,omitempty"`
	Output string             `json:"output,omitempty"`
}

// OracleResponse says how applying the reference solution went.
type OracleResponse struct {
	Output string `json:"output,omitempty"`
}

// RewardRequest is the input of a reward plugin. Trajectory is the
// rollout's transcript as the run directory keeps it: {task_id,
// rollout_id, seed, system, prompt, trajectory: {agent, model, messages
// (OpenAI chat format), turns (usage, tool timings, errors), stop_reason,
// usage}}.
type RewardRequest struct {
	Task       Task            `json:"task"`
	Config     json.RawMessage `json:"config"`
	Trajectory json.RawMessage `json:"trajectory"`
	Verify     VerifyResponse  `json:"verify"`
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
	Backend        string `json:"backend"`
	RunID          string `json:"run_id,omitempty"`
	RolloutID      string `json:"rollout_id,omitempty"`
	Seed           uint64 `json:"seed"`
}
