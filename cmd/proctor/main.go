// Command proctor runs LLM agents on sandboxed tasks and scores them.
//
// It keeps the flags, the exit codes and the printing: it parses the
// command line (kong), has host/assemble build the parts of a run from its
// configuration (the sandbox backend, the environment and reward plugins,
// the agent), hands them to the run library, host/run, and prints what it
// reports. The other commands call their libraries the same way
// (host/plugincheck, host/doctor, host/view, host/rundir/export). Errors
// map to the documented exit codes in one place, exitCode.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/term"
	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// version is proctor's version: set at link time (make build: -ldflags
// "-X main.linkVersion=$(git describe --tags --always --dirty)"), or else
// the module version go build stamps from the checkout
// (v0.0.0-DATE-REVISION, +dirty with uncommitted changes), or else "dev"
// (go run, go test). revision is the commit built from, the same ways
// (-X main.linkRevision=..., or go build's vcs.revision).
var version, revision = stamp(linkVersion, linkRevision, buildInfo())

// Set by -ldflags "-X main.linkVersion=... -X main.linkRevision=...".
var linkVersion, linkRevision string

func buildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// stamp derives the version and the VCS revision from the link-time
// version and the build information.
func stamp(link, linkRev string, bi *debug.BuildInfo) (version, revision string) {
	version = link
	if linkRev != "" || bi == nil {
		return cmp.Or(version, "dev"), linkRev
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	version = cmp.Or(version, "dev")
	if revision != "" && modified {
		revision += "+dirty"
	}
	return version, revision
}

// host is proctor as the run's plugins see it.
func host() assemble.Host { return assemble.Host{Version: version} }

// fullVersion is the version with the revision when the version does not
// already name it, as the run manifest records it.
func fullVersion() string {
	short := revision
	if len(short) > 12 {
		short = short[:12]
	}
	if short == "" || strings.Contains(version, short) {
		return version
	}
	return version + " (" + revision + ")"
}

// Exit codes, documented in docs/cli.md.
const (
	exitOK          = 0   // everything ran; every rollout has a final outcome
	exitRolloutsErr = 1   // the run finished but some rollouts ended as infra_error or without a reward plugin's score
	exitUsage       = 2   // bad flags, bad config, bad plugin reference
	exitInfra       = 3   // the engine, a plugin or the run directory is unavailable
	exitInterrupted = 130 // stopped by Ctrl-C (results so far are kept)
)

type cli struct {
	LogLevel   string `help:"Log level: debug, info, warn, error." default:"warn" enum:"debug,info,warn,error" name:"log-level"`
	CPUProfile string `help:"Write a CPU profile (pprof) of the whole command to this file." name:"cpu-profile" type:"path" hidden:""`
	Profiles   string `help:"Write block, mutex and heap profiles (pprof) of the whole command into this folder." name:"profiles" type:"path" hidden:""`

	Eval    evalCmd    `cmd:"" help:"Run an evaluation described by a TOML config."`
	Process processCmd `cmd:"" help:"Generate scored groups of rollouts for training (Atropos groups and SFT lines)."`
	Serve   serveCmd   `cmd:"" help:"Serve scored groups to an RL trainer live, as an environment of Atropos' rollout API."`
	Tasks   tasksCmd   `cmd:"" help:"List the tasks a config selects."`
	Report  reportCmd  `cmd:"" help:"Print the report of a run directory."`
	Export  exportCmd  `cmd:"" help:"Write a run's rollouts as training data: Atropos groups, SFT chat JSONL or ATIF."`
	View    viewCmd    `cmd:"" help:"Serve the HTML report of a run directory on 127.0.0.1, live while it runs."`
	Plugin  pluginCmd  `cmd:"" help:"Inspect and check plugins."`
	Sandbox sandboxCmd `cmd:"" help:"Manage sandboxes."`
	Doctor  doctorCmd  `cmd:"" help:"Check that this machine can run proctor."`
	Version versionCmd `cmd:"" help:"Print the version."`
}

// globals reach every command's Run.
type globals struct {
	stdout io.Writer
	stderr io.Writer
	ctx    context.Context
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// kongExit carries kong's exit request (after --help) out of Parse.
type kongExit struct{ code int }

func run(args []string, stdout, stderr io.Writer) (code int) {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("proctor"),
		kong.Description("Run LLM agents on sandboxed tasks and score them."),
		kong.UsageOnError(),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(kongExit{code}) }),
	)
	if err != nil {
		fmt.Fprintf(stderr, "proctor: error: %v\n", err)
		return exitUsage
	}
	if len(args) == 0 {
		args = []string{"--help"}
	}
	defer func() {
		if r := recover(); r != nil {
			ke, ok := r.(kongExit)
			if !ok {
				panic(r)
			}
			code = ke.code
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		printError(stderr, err)
		return exitUsage
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: parseLevel(c.LogLevel)})))
	if c.CPUProfile != "" {
		stopProfile, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			printError(stderr, err)
			return exitUsage
		}
		defer stopProfile()
	}
	if c.Profiles != "" {
		stop, err := startProfiles(c.Profiles)
		if err != nil {
			printError(stderr, err)
			return exitUsage
		}
		defer stop()
	}

	// Commands that run rollouts say what a Ctrl-C does to them.
	note := "proctor: interrupted: stopping rollouts and saving results (Ctrl-C again to exit at once)"
	if cmd := kctx.Command(); !strings.HasPrefix(cmd, "eval") && !strings.HasPrefix(cmd, "process") && !strings.HasPrefix(cmd, "serve") {
		note = "proctor: interrupted: stopping (Ctrl-C again to exit at once)"
	}
	ctx, stop := interruptContext(stderr, note)
	defer stop()
	g := &globals{stdout: stdout, stderr: stderr, ctx: ctx}
	if err := kctx.Run(g); err != nil {
		code := exitCode(err)
		if code != exitRolloutsErr && code != exitInterrupted {
			printError(stderr, err)
		}
		return code
	}
	return exitOK
}

// interruptContext cancels on the first Ctrl-C or SIGTERM so the run stops
// starting rollouts, cancels the running ones and flushes results; a second
// signal exits at once.
func interruptContext(stderr io.Writer, note string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		n := 0
		for range sigs {
			n++
			if n == 1 {
				fmt.Fprintln(stderr, note)
				cancel(errInterrupted)
				continue
			}
			fmt.Fprintln(stderr, "proctor: exiting at once")
			os.Exit(exitInterrupted)
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel(nil) }
}

var errInterrupted = errors.New("interrupted")

// errSomeFailed is returned by eval when rollouts ended as infra_error or a
// [[reward]] plugin failed on them; the run itself completed and its report
// was printed.
var errSomeFailed = errors.New("some rollouts ended as infra_error or without a reward plugin's score")

// exitCode is the one place errors become exit codes.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errInterrupted), errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, errSomeFailed), errors.Is(err, errChecksFailed):
		return exitRolloutsErr
	case fault.IsUsage(err):
		return exitUsage
	default:
		return exitInfra // fault.Infra, and whatever says nothing of itself
	}
}

// printError writes the age-style message: "proctor: error: ..." and, when
// the error carries one, "proctor: hint: ...", with what plugins and
// datasets wrote in it made safe for a terminal.
func printError(w io.Writer, err error) {
	msg := strings.TrimSpace(err.Error())
	fmt.Fprintf(w, "proctor: error: %s\n", term.Text(msg))
	if hint := fault.Hint(err); hint != "" {
		fmt.Fprintf(w, "proctor: hint: %s\n", term.Text(hint))
	}
}

// startCPUProfile profiles the process into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// startProfiles records blocking and lock contention from now on; the
// returned function writes them, with the heap's profile, into dir.
func startProfiles(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	runtime.SetMutexProfileFraction(10)
	return func() {
		for _, name := range []string{"block", "mutex", "heap"} {
			f, err := os.Create(filepath.Join(dir, name+".pprof"))
			if err != nil {
				continue
			}
			pprof.Lookup(name).WriteTo(f, 0)
			f.Close()
		}
	}, nil
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}

type versionCmd struct{}

func (versionCmd) Run(g *globals) error {
	fmt.Fprintf(g.stdout, "proctor %s\n", version)
	if revision != "" {
		fmt.Fprintf(g.stdout, "revision %s\n", revision)
	}
	fmt.Fprintf(g.stdout, "abi      v%d.%d\nsdk      go %s\n", abi.Version, abi.Minor, sdk.Version)
	if bi := buildInfo(); bi != nil {
		fmt.Fprintf(g.stdout, "go       %s\n", bi.GoVersion)
	}
	return nil
}
