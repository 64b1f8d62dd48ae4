package shell

import (
	"bufio"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/proctor-dev/proctor/sandbox"
)

// The warden (sandbox/warden) is the static program backends put into an
// isolated sandbox to keep the agent's processes apart from the plugin's.
// `make warden` builds it for each architecture into warden/, and `go
// build` embeds it.
//
//go:embed all:warden
var wardens embed.FS

// WardenPath is where backends put the warden in the sandbox, and
// WardenDir the folder that holds it (sealed read-only by the warden's
// first run).
const (
	WardenDir  = "/.proctor"
	WardenPath = WardenDir + "/warden"
)

// Warden returns the warden built for a Linux architecture ("amd64",
// "arm64"). PROCTOR_WARDEN names a file to use instead, for development.
// The embedded one is read once per architecture and shared (3.6 MB that
// every sandbox start used to copy): callers must not change it.
func Warden(arch string) ([]byte, error) {
	if p := os.Getenv("PROCTOR_WARDEN"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("PROCTOR_WARDEN: %w", err)
		}
		return b, nil
	}
	if arch == "" {
		arch = "amd64"
	}
	if b, ok := embedded.Load(arch); ok {
		return b.([]byte), nil
	}
	b, err := fs.ReadFile(wardens, "warden/warden-linux-"+arch)
	if err != nil {
		return nil, fmt.Errorf("the sandbox warden for linux/%s is not in this binary: build it with `make warden` (or `make build`)", arch)
	}
	embedded.Store(arch, b)
	return b, nil
}

// embedded holds the embedded wardens read so far, by architecture.
var embedded sync.Map

// ReadNSHeader reads the line `warden plugin` and `warden agent` print
// before their shell starts, "@@PROCTOR NS <pid>", and returns the pid
// (the process that holds the namespace, as the sandbox numbers it). The
// line is read within r's buffer: a line, not a flood.
func ReadNSHeader(r *bufio.Reader) (int, error) {
	line, err := r.ReadSlice('\n')
	f := strings.Fields(string(line))
	if err != nil || len(f) != 3 || f[0] != "@@PROCTOR" || f[1] != "NS" {
		return 0, fmt.Errorf("%q: %v", line, err)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 2 {
		return 0, fmt.Errorf("bad namespace init %q", f[2])
	}
	return n, nil
}

// WardenCommand is the shell command that runs the warden with args, as
// the last thing its shell does: the shell becomes the warden (exec), a
// fork fewer, and the command's status is the warden's.
func WardenCommand(args ...string) string {
	q := make([]string, 0, len(args)+2)
	q = append(q, "exec", Quote(WardenPath))
	for _, a := range args {
		q = append(q, Quote(a))
	}
	return strings.Join(q, " ")
}

// PrivateDirs checks and cleans a spec's private folders: absolute, and
// neither / nor the warden's folder.
func PrivateDirs(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		c := path.Clean(d)
		if !path.IsAbs(d) || c == "/" || c == WardenDir || strings.HasPrefix(c, WardenDir+"/") {
			return nil, fmt.Errorf("private folder %q: want an absolute folder other than / and %s", d, WardenDir)
		}
		out = append(out, c)
	}
	return out, nil
}

// InPrivate reports whether the clean absolute path full lies in one of
// the private folders dirs (as PrivateDirs cleaned them).
func InPrivate(dirs []string, full string) bool {
	for _, d := range dirs {
		if full == d || strings.HasPrefix(full, d+"/") {
			return true
		}
	}
	return false
}

// MaxArchive caps a download that travels through a shell.
const MaxArchive = 64 << 20

// Files are the file operations of the folders only one shell sees (the
// plugin's private folders, in its mount namespace: a backend's own
// archive or exec calls see the sandbox's mounts, not that shell's). The
// warden does them, run fresh in that shell by Exec. Errors say what
// failed but not on which path: callers add that.
type Files struct {
	Exec func(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error)
}

// Put extracts a tar archive into dir, with the checks of every upload.
func (f Files) Put(ctx context.Context, dir string, tar []byte) error {
	r, err := f.Exec(ctx, WardenCommand("put", dir), sandbox.ExecOptions{Fresh: true, Stdin: tar})
	if err != nil {
		return err
	}
	return StatusError(r)
}

// Get returns a file or folder as a tar archive of at most MaxArchive
// bytes.
func (f Files) Get(ctx context.Context, p string) ([]byte, error) {
	r, err := f.Exec(ctx, WardenCommand("get", p), sandbox.ExecOptions{Fresh: true, MaxOutput: MaxArchive + 1})
	if err != nil {
		return nil, err
	}
	if err := StatusError(r); err != nil {
		return nil, err
	}
	if r.Truncated || len(r.Stdout) > MaxArchive {
		return nil, fmt.Errorf("over %d MiB", MaxArchive>>20)
	}
	return []byte(r.Stdout), nil
}

// Read reads the first limit bytes of a file and its size. A file that is
// not there costs no process (a verifier looks for several that may not
// be), as in the head-and-stat read of a sandbox without a warden.
func (f Files) Read(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	cmd := "[ -e " + Quote(p) + " ] || exit 3; " + WardenCommand("read", p, strconv.FormatInt(limit, 10))
	r, err := f.Exec(ctx, cmd, sandbox.ExecOptions{Fresh: true, MaxOutput: ReadMaxOutput(limit)})
	if err != nil {
		return nil, 0, err
	}
	return ReadResult(r)
}

// ReadMaxOutput is the MaxOutput of a command that reads limit bytes to
// stdout and reports the file's size on stderr: stdout holds no more than
// limit by itself, and the size line must survive a limit shorter than it.
func ReadMaxOutput(limit int64) int { return int(max(limit, 64)) }

// StatusError turns the exit status of the warden's put, get and read (or
// a command that follows their convention) into an error: 3 not found
// (ErrNotFound), 4 a directory, 5 an unsafe archive (ErrUnsafeArchive).
func StatusError(r sandbox.ExecResult) error {
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.Stderr), "warden: "))
	switch r.ExitCode {
	case 0:
		return nil
	case 3:
		return sandbox.ErrNotFound
	case 5:
		return fmt.Errorf("%w: %s", sandbox.ErrUnsafeArchive, msg)
	}
	return errors.New(msg)
}

// ReadResult is what a read answered: the bytes on stdout, and the size a
// "size N" line on stderr gave (at least the bytes read).
func ReadResult(r sandbox.ExecResult) ([]byte, int64, error) {
	if err := StatusError(r); err != nil {
		return nil, 0, err
	}
	size := int64(len(r.Stdout))
	for _, line := range strings.Split(r.Stderr, "\n") {
		if s, ok := strings.CutPrefix(line, "size "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil && n >= size {
				size = n
			}
		}
	}
	return []byte(r.Stdout), size, nil
}

// ReservedPids is how many process slots verification needs free: Seal
// stops the agent's processes when fewer are.
const ReservedPids = 64

// StoppedNote is what Seal says when it stopped the agent's processes.
func StoppedNote(pids, max int64) string {
	return fmt.Sprintf("the agent's processes were stopped before verification: the sandbox had %d of %d process slots in use", pids, max)
}

// Restarted is what a call of the agent sees when a command killed the
// agent's shell.
const Restarted = "the shell was killed by a command in the sandbox; a new shell was started (working directory and exported variables are reset)"

// PluginArgs is the command that starts the plugin's shell through the
// warden, up to the "--" the shell's own command follows: in a mount
// namespace of its own where private (the spec's private folders, then
// state, the shell's folder) are tmpfs mounts of sizeMiB only it sees, as
// user (empty: the sandbox's), without CAP_SYS_ADMIN.
func PluginArgs(sizeMiB int64, private []string, state, user string) []string {
	args := []string{WardenPath, "plugin", "-size", strconv.FormatInt(sizeMiB, 10)}
	for _, d := range append(slices.Clone(private), state) {
		args = append(args, "-private", d)
	}
	if user != "" {
		args = append(args, "-user", user)
	}
	return append(args, "--")
}

// AgentArgs is the command that starts the agent's shell through the
// warden, up to "--": in PID and mount namespaces of its own, as user
// (empty: the sandbox's), the paths of the private folders pinned so
// that nothing the agent runs can move or replace them, and nothing in
// its reach holding more than it does.
func AgentArgs(private []string, user string) []string {
	args := []string{WardenPath, "agent"}
	for _, d := range private {
		args = append(args, "-private", d)
	}
	if user != "" {
		args = append(args, "-user", user)
	}
	return append(args, "--")
}

// Remount is the warden's arguments that replace dirs with fresh empty
// tmpfs mounts of sizeMiB owned by user, in the mount namespace whose
// holder is ns (0: the caller's).
func Remount(sizeMiB int64, user string, ns int, dirs []string) []string {
	args := []string{"remount", "-size", strconv.FormatInt(sizeMiB, 10)}
	if user != "" {
		args = append(args, "-user", user)
	}
	if ns != 0 {
		args = append(args, "-ns", strconv.Itoa(ns))
	}
	return append(args, dirs...)
}
