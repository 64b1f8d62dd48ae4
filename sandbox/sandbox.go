// Package sandbox defines where a rollout's commands run: the Sandbox
// interface every backend implements, the Spec a plugin asks for, and the
// errors callers can test with errors.Is. Backends live in sub-packages
// (docker, kubernetes, local); the conformance suite in sandboxtest runs
// against each.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strconv"
	"time"
)

// Sandbox is one isolated place to run a rollout's commands. Exec runs in a
// persistent shell: a `cd` or `export` in one call is seen by the next, as a
// user at a terminal expects. Every command runs in its own process group, so
// a timeout kills the whole group. A Sandbox is safe for use by one goroutine
// at a time; Close may be called from any goroutine and more than once.
type Sandbox interface {
	// Exec runs cmd with bash in the persistent shell. A non-zero exit code,
	// a timeout or an OOM kill is reported in ExecResult, not as an error; an
	// error means the sandbox itself failed (ErrClosed, ErrGone, ...).
	Exec(ctx context.Context, cmd string, opts ExecOptions) (ExecResult, error)
	// WriteFile writes data to path (absolute, or relative to the workdir),
	// creating parent directories.
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	// ReadFile reads the first limit bytes of a file (DefaultReadLimit when
	// limit <= 0) and reports the file's whole size, so a caller knows
	// when it got less than all of it (size > len(data)); nothing beyond
	// limit is ever read into memory. A missing file is an error matching
	// ErrNotFound.
	ReadFile(ctx context.Context, path string, limit int64) (data []byte, size int64, err error)
	// Upload extracts a tar stream into dir, creating it when missing.
	Upload(ctx context.Context, dir string, tar io.Reader) error
	// Download returns path (a file or a directory) as a tar stream.
	Download(ctx context.Context, path string) (io.ReadCloser, error)
	// Close stops the sandbox and removes everything it made. It works even
	// when ctx is already cancelled (Ctrl-C): backends use
	// context.WithoutCancel with their own short timeout.
	Close(ctx context.Context) error
}

// Backend starts sandboxes.
type Backend interface {
	Start(ctx context.Context, spec Spec) (Sandbox, error)
}

// Network is the network mode of a sandbox.
type Network string

const (
	// NetworkNone gives the sandbox no network at all. It is the default.
	NetworkNone Network = "none"
	// NetworkHost shares the host's network; a config must ask for it.
	NetworkHost Network = "host"
	// NetworkDefault is the backend's ordinary network: on docker the
	// engine's default bridge (the internet through NAT, not the host's
	// loopback). The local backend's commands always have the host's.
	NetworkDefault Network = "default"
)

// Spec describes the sandbox a rollout needs. The zero value of every
// resource field means the backend default, never "unlimited".
type Spec struct {
	// Image is an image reference. When empty, or when ForceBuild is set,
	// the image is built from BuildContext.
	Image string
	// BuildContext is a tar archive of a build context with a Dockerfile.
	BuildContext []byte
	// Dockerfile is the Dockerfile's path inside BuildContext
	// (default "Dockerfile").
	Dockerfile string
	// ForceBuild builds from BuildContext even when Image is set.
	ForceBuild bool
	// BuildHint, for a spec without BuildContext, says how the task's
	// own context would build Image ("set [env.config] force_build =
	// true"); a backend that cannot find Image says it in its error.
	BuildHint string
	// Pull allows pulling Image from a registry when it is not local.
	Pull bool

	Workdir string            // working directory of the shell (created if missing)
	Env     map[string]string // environment of every command
	User    string            // user to run as (default: the image's user)
	// AgentUser is the user the agent's commands run as, when it is not
	// User (Harbor's [agent].user beside [verifier].user). Only a
	// sandbox that keeps the agent apart (Isolated) can run two users; a
	// backend that cannot refuses the spec.
	AgentUser string

	CPUs     float64 // CPU limit (default 1)
	MemoryMB int64   // memory limit in MiB (default 2048)
	PidsMax  int64   // process limit (default 1024)
	DiskMB   int64   // what the sandbox may write, in MiB (default 10240)
	// DiskInodes is how many files, folders and links the sandbox may
	// create (default 1,000,000).
	DiskInodes int64
	Network    Network // default NetworkNone
	// BuildNetwork is what building the image may reach (a Dockerfile's
	// apt-get); empty means the same as Network.
	BuildNetwork Network
	// StartTimeout bounds Backend.Start, the image build included; the
	// runner applies it (0: the run's sandbox start timeout), and names it
	// by StartTimeoutFrom (where it comes from) when it fires.
	StartTimeout     time.Duration
	StartTimeoutFrom string

	// Private lists absolute folders the plugin's own commands and file
	// operations own: in a sandbox that implements Isolated, each is an
	// empty tmpfs only the plugin sees (never the agent or anything it
	// started), emptied again by Seal. A backend that cannot keep them
	// apart refuses the spec.
	Private []string

	// Labels are attached to the sandbox; the runner sets proctor.run and
	// proctor.rollout so leftovers of a killed run can be found.
	Labels map[string]string

	// Layer, when set, is software added on top of the image (an installed
	// agent), built once per (image, layer) into an image of its own that
	// every later sandbox of the same image reuses. A backend that cannot
	// build it refuses the spec.
	Layer *Layer
}

// Layer is what a rollout adds to its task's image: a build on top of it,
// made once and kept as an image. Its build context's Dockerfile starts
// with `ARG BASE` and builds FROM $BASE (the task's image, by id); stages
// it does not keep are labelled `LABEL proctor.stage=$STAGE` and removed
// once the build is done.
type Layer struct {
	// Name says what the layer is, for messages ("claude-code 2.1.332").
	Name string
	// Key names the layer's content (a hash of what it installs, and
	// how): with the image's id it names the built image.
	Key string
	// Context writes the build context (a tar) for an image of the
	// architecture arch ("amd64", "arm64"); it is called only when the
	// image must be built.
	Context func(ctx context.Context, arch string) ([]byte, error)
	// Network is what the build may reach (default: none).
	Network Network
}

// Isolated is implemented by sandboxes that keep the agent apart from the
// plugin. The Sandbox itself is the plugin's: its commands run in a mount
// namespace where Spec.Private folders are the plugin's own. Agent returns
// the agent's view: its commands run in PID and mount namespaces of their
// own without CAP_SYS_ADMIN, so nothing the agent starts (a process left
// running, a fork bomb, kill -9 -1) can see, signal or trace the plugin's
// processes or reach its private folders, while services it started stay
// reachable over the network for the tests. When a command of the agent
// kills the agent's shell, its next call starts a new one.
type Isolated interface {
	Sandbox
	// Agent returns the agent's view of the sandbox. Closing it ends only
	// the agent's shell.
	Agent() Sandbox
	// Seal ends the agent's turn before verification: the Private folders
	// are emptied, and when what the agent left running holds so many of
	// the sandbox's process slots that verification could not start, the
	// agent's processes are stopped (Seal then says so in its note).
	Seal(ctx context.Context) (note string, err error)
}

// AgentView returns the view of sb an agent should get: Isolated's Agent,
// or sb itself.
func AgentView(sb Sandbox) Sandbox {
	if i, ok := sb.(Isolated); ok {
		return i.Agent()
	}
	return sb
}

// Capabilities are what a sandbox keeps after dropping all, on every
// backend that isolates. Tasks run apt-get, create users and start services
// as root, so root must still own and chown files (CHOWN, DAC_OVERRIDE,
// FOWNER, FSETID), switch users (SETUID, SETGID, SETPCAP for dropping
// capabilities when it does), signal its own processes (KILL, also how
// timeouts kill a command's group), bind low ports for services
// (NET_BIND_SERVICE), chroot for package scripts (SYS_CHROOT) and create
// device-less special files such as fifos (MKNOD). Left out of the
// runtimes' default set: NET_RAW (raw sockets) and AUDIT_WRITE.
var Capabilities = []string{
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "MKNOD",
}

// CapWarden is the capability an isolated sandbox adds for the warden
// (sandbox/warden), which builds the agent's namespaces with it and drops
// it for good before the agent's shell starts.
const CapWarden = "SYS_ADMIN"

// Label keys the runner and `proctor sandbox prune` agree on.
const (
	LabelRun     = "proctor.run"
	LabelRollout = "proctor.rollout"
	LabelManaged = "proctor.managed"
)

// WithDefaults returns the spec with its zero or negative resources (CPUs,
// MemoryMB, PidsMax, DiskMB, DiskInodes) set to the defaults, as every
// backend applies them.
func (s Spec) WithDefaults() Spec {
	if s.CPUs <= 0 {
		s.CPUs = DefaultCPUs
	}
	if s.MemoryMB <= 0 {
		s.MemoryMB = DefaultMemoryMB
	}
	if s.PidsMax <= 0 {
		s.PidsMax = DefaultPidsMax
	}
	if s.DiskMB <= 0 {
		s.DiskMB = DefaultDiskMB
	}
	if s.DiskInodes <= 0 {
		s.DiskInodes = DefaultDiskInodes
	}
	return s
}

// Defaults applied by backends to zero Spec fields (Spec.WithDefaults).
const (
	DefaultCPUs     = 1.0
	DefaultMemoryMB = 2048
	DefaultPidsMax  = 1024
	DefaultDiskMB   = 10240
	// DefaultDiskInodes bounds what a sandbox may create: a million
	// files is more than a build of the Linux kernel leaves, and keeps
	// the watchdog's walk near a second.
	DefaultDiskInodes = 1_000_000
	DefaultMaxOutput  = 1 << 20  // bytes kept per stream by Exec
	DefaultReadLimit  = 16 << 20 // bytes ReadFile returns when asked for no limit
)

// ExecOptions tune one Exec call.
type ExecOptions struct {
	// Timeout kills the command's whole process group when it runs longer.
	// Zero means no timeout beyond ctx.
	Timeout time.Duration
	// Workdir runs this command in another directory without changing the
	// shell's current directory.
	Workdir string
	// Env adds variables for this command only.
	Env map[string]string
	// Stdin is fed to the command; nil means an empty stdin.
	Stdin []byte
	// MaxOutput caps the bytes kept per stream (default DefaultMaxOutput).
	// Over the cap the head and tail are kept around a marker that says how
	// many bytes were cut.
	MaxOutput int
	// Fresh runs the command from the sandbox's starting state (the spec's
	// working directory and environment) instead of the persistent shell's:
	// it neither sees nor changes what earlier commands did with cd, export
	// or unset. Plugins' commands and the backends' own file operations run
	// fresh, so nothing an agent exported (PATH, LD_PRELOAD, PYTHONPATH)
	// reaches them.
	Fresh bool
}

// CutMark is what Exec puts between the head and the tail of an output
// over MaxOutput: how many bytes it left out.
func CutMark(n int64) string { return fmt.Sprintf("\n…[%d bytes cut]…\n", n) }

var cutMark = regexp.MustCompile("\n…\\[(\\d+) bytes cut\\]…\n")

// CutOutput splits an output that Exec cut (ExecResult.Truncated) into its
// head, the number of bytes it left out and its tail; an output without
// the mark is all head.
func CutOutput(out string) (head string, cut int, tail string) {
	loc := cutMark.FindStringSubmatchIndex(out)
	if loc == nil {
		return out, 0, ""
	}
	cut, _ = strconv.Atoi(out[loc[2]:loc[3]])
	return out[:loc[0]], cut, out[loc[1]:]
}

// ExecResult is what one command did.
type ExecResult struct {
	Stdout    string
	Stderr    string
	ExitCode  int
	TimedOut  bool // killed because Timeout passed
	OOMKilled bool // killed by the kernel's out-of-memory killer
	Truncated bool // Stdout or Stderr was cut to MaxOutput
	Duration  time.Duration
}

// Sentinel errors. Backends wrap them with context; test with errors.Is.
var (
	// ErrClosed: the sandbox was closed; no more calls are possible.
	ErrClosed = errors.New("sandbox closed")
	// ErrGone: the sandbox died under us (container removed or killed,
	// engine restarted).
	ErrGone = errors.New("sandbox gone")
	// ErrNotFound: a file or directory does not exist in the sandbox.
	ErrNotFound = errors.New("not found in sandbox")
	// ErrImage: the image is missing and could not be pulled or built.
	ErrImage = errors.New("sandbox image unavailable")
	// ErrEngine: the backend's engine cannot be reached.
	ErrEngine = errors.New("sandbox engine unavailable")
	// ErrUnsafeArchive: a tar archive tried to escape its target.
	ErrUnsafeArchive = errors.New("unsafe archive")
	// ErrLimit: what ran in the sandbox went over one of its limits (the
	// disk); the agent's processes were stopped. It is the agent's
	// outcome, not a failure of the sandbox.
	ErrLimit = errors.New("sandbox over its limit")
	// ErrTampered: a file the host puts into every sandbox (the warden)
	// is not what the host wrote; something changed it. No sandbox
	// starts from it, and a run that meets it stops.
	ErrTampered = errors.New("a file the host puts into sandboxes was changed")
)

// ImageError says which image failed and carries the build log's tail.
type ImageError struct {
	Image   string
	Reason  string
	LogTail string
}

func (e *ImageError) Error() string {
	s := fmt.Sprintf("image %q: %s", e.Image, e.Reason)
	if e.LogTail != "" {
		s += "\n" + e.LogTail
	}
	return s
}

// Unwrap makes ImageError match ErrImage.
func (e *ImageError) Unwrap() error { return ErrImage }
