package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/archive"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// view is one side of a sandbox, the plugin's or the agent's. Its commands
// run in its own shell. Files in the plugin's private folders go through
// that shell: they live in its mount namespace, which only it (and the
// warden it runs) reaches. Small files elsewhere go through the warden run
// as root where the sandbox has one (copyIn, readAsRoot); the rest through
// the engine's archive API.
type view struct {
	s      *Sandbox
	shell  func() *shell.Shell
	plugin bool
}

// ID is the container's id, which agents that reproduce a docker-based
// reference quote as it does (mini-swe-agent's timeout message).
func (v view) ID() string { return v.s.id }

// Exec runs cmd in the view's shell. If the shell died, the container is
// inspected so the error says why (killed, OOM, engine restarted).
func (v view) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if err := v.s.live(); err != nil {
		return sandbox.ExecResult{}, err
	}
	r, err := v.shell().Exec(ctx, cmd, o)
	if err != nil && errors.Is(err, sandbox.ErrGone) && !v.s.closed.Load() {
		err = v.s.gone(ctx, err)
	}
	return r, err
}

func (v view) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(v.s.workdir, p)
}

// private reports whether a path lies in one of the plugin's private
// folders, seen from this view.
func (v view) private(full string) bool {
	return v.plugin && shell.InPrivate(v.s.private, full)
}

// files are the file operations of the plugin's private folders, through
// the plugin's shell.
func (v view) files() shell.Files { return shell.Files{Exec: v.Exec} }

// mkdir makes a folder (CopyToContainer needs it): in an isolated sandbox
// the warden does it as root (put of an empty archive), finding the path
// as the engine does. Otherwise, or where the warden cannot run, the
// view's shell does it (a cheap round trip); where it cannot (a command
// broke PATH, or the user may not write there) the engine's archive API
// does. A program of the image, which may be the agent's, never runs
// with more than the view's shell has.
func (v view) mkdir(ctx context.Context, dir string) error {
	if v.s.mux != nil {
		if done, err := v.putAsRoot(ctx, dir, nil); done {
			if err != nil {
				return fmt.Errorf("mkdir %s: %w", dir, err)
			}
			return nil
		}
	}
	r, err := v.Exec(ctx, "/bin/mkdir -p -- "+shell.Quote(dir)+" 2>/dev/null || mkdir -p -- "+shell.Quote(dir), sandbox.ExecOptions{Fresh: true})
	if err != nil {
		return err
	}
	if r.ExitCode == 0 {
		return nil
	}
	if err := v.s.engineMkdir(ctx, dir); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	return nil
}

// WriteFile writes data to p, creating parent folders.
func (v view) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := v.s.live(); err != nil {
		return err
	}
	full := v.abs(p)
	arc, err := fileTar(path.Base(full), data, mode)
	if err != nil {
		return err
	}
	if v.private(full) {
		if err := v.files().Put(ctx, path.Dir(full), arc); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		return nil
	}
	if err := v.copyIn(ctx, path.Dir(full), arc); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// fileTar is an archive of one file, name, with mode (0644 when 0).
func fileTar(name string, data []byte, mode fs.FileMode) ([]byte, error) {
	if mode == 0 {
		mode = 0o644
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: int64(mode.Perm()), Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	tw.Write(data)
	return buf.Bytes(), tw.Close()
}

// ReadFile reads the first limit bytes of a file and its size.
func (v view) ReadFile(ctx context.Context, p string, limit int64) ([]byte, int64, error) {
	if err := v.s.live(); err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		limit = sandbox.DefaultReadLimit
	}
	full := v.abs(p)
	if v.private(full) {
		data, size, err := v.files().Read(ctx, full, limit)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", p, err)
		}
		return data, size, nil
	}
	if data, size, ok, err := v.readAsRoot(ctx, full, limit); ok {
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", p, err)
		}
		return data, size, nil
	}
	data, size, err := v.readThroughEngine(ctx, full, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", p, err)
	}
	return data, size, nil
}

// readThroughEngine reads a file with the engine's archive API, in the
// container's own view. A link is followed there too, by asking again for
// its target: never through a shell, whose view (the plugin's) would lead
// a link the agent planted into the private folders.
func (v view) readThroughEngine(ctx context.Context, full string, limit int64) ([]byte, int64, error) {
	for hops := 0; ; hops++ {
		rc, stat, err := v.s.b.cli.CopyFromContainer(ctx, v.s.id, full)
		if err != nil {
			if client.IsErrNotFound(err) {
				return nil, 0, sandbox.ErrNotFound
			}
			return nil, 0, engineError(err)
		}
		tr := tar.NewReader(rc)
		h, err := tr.Next()
		if err != nil {
			rc.Close()
			return nil, 0, err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			rc.Close()
			return nil, 0, errors.New("is a directory")
		case tar.TypeSymlink:
			rc.Close()
			if hops == maxLinks {
				return nil, 0, errors.New("too many links")
			}
			switch {
			case stat.LinkTarget != "":
				// The engine resolved it in the container: a parent
				// that is a link itself counts.
				full = stat.LinkTarget
			case path.IsAbs(h.Linkname):
				full = path.Clean(h.Linkname)
			default:
				full = path.Join(path.Dir(full), h.Linkname)
			}
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, limit))
		rc.Close()
		return data, h.Size, err
	}
}

// maxLinks is how many links a read follows, as the kernel does.
const maxLinks = 40

// Upload checks the archive, then extracts it into dir.
func (v view) Upload(ctx context.Context, dir string, r io.Reader) error {
	if err := v.s.live(); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	if err := archive.Check(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("upload to %s: %w: %w", dir, sandbox.ErrUnsafeArchive, err)
	}
	full := v.abs(dir)
	if v.private(full) {
		if err := v.files().Put(ctx, full, data); err != nil {
			return fmt.Errorf("upload to %s: %w", dir, err)
		}
		return nil
	}
	if err := v.copyIn(ctx, full, data); err != nil {
		return fmt.Errorf("upload to %s: %w", dir, err)
	}
	return nil
}

// Download returns p (a file or folder) as a tar stream.
func (v view) Download(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := v.s.live(); err != nil {
		return nil, err
	}
	full := v.abs(p)
	if v.private(full) {
		data, err := v.files().Get(ctx, full)
		if err != nil {
			return nil, fmt.Errorf("download %s: %w", p, err)
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	rc, _, err := v.s.b.cli.CopyFromContainer(ctx, v.s.id, full)
	if err != nil {
		if client.IsErrNotFound(err) {
			return nil, fmt.Errorf("download %s: %w", p, sandbox.ErrNotFound)
		}
		return nil, fmt.Errorf("download %s: %w", p, engineError(err))
	}
	return rc, nil
}

// wardenExec runs the warden with args as root in the container's own
// namespaces, through the mux of an isolated sandbox: the one way proctor
// runs a program with the sandbox's privileges once it started, and never
// a program of the image, which may be the agent's by then.
func (s *Sandbox) wardenExec(ctx context.Context, args ...string) error {
	if s.mux == nil {
		return errors.New("the sandbox runs without the warden")
	}
	code, msg, err := s.mux.Run(ctx, append([]string{shell.WardenPath}, args...))
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("warden %s: exit %d: %s", args[0], code, strings.TrimSpace(msg))
	}
	return nil
}

// engineMkdir makes dir and the parents it lacks through the engine's
// archive API (root's, mode 0755, as a root mkdir makes them), with no
// process in the container. Each path is found as the engine finds it.
func (s *Sandbox) engineMkdir(ctx context.Context, dir string) error {
	var missing []string
	base := path.Clean(dir)
	for ; base != "/"; base = path.Dir(base) {
		_, err := s.b.cli.ContainerStatPath(ctx, s.id, base)
		if err == nil {
			break
		}
		if !client.IsErrNotFound(err) {
			return engineError(err)
		}
		missing = append(missing, path.Base(base))
	}
	if len(missing) == 0 {
		return nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	name := ""
	for i := len(missing) - 1; i >= 0; i-- {
		name = path.Join(name, missing[i])
		if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Now()}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return engineError(s.b.cli.CopyToContainer(ctx, s.id, base, &buf, container.CopyToContainerOptions{}))
}

// copyIn extracts a checked archive into dir, a folder outside the
// plugin's private ones: a small archive with the warden run as root
// (putAsRoot), anything else through the engine's archive API once the
// folder is made.
func (v view) copyIn(ctx context.Context, dir string, data []byte) error {
	if len(data) <= putMax {
		if done, err := v.putAsRoot(ctx, dir, data); done {
			return err
		}
	}
	if err := v.mkdir(ctx, dir); err != nil {
		return err
	}
	return v.s.copyTo(ctx, dir, data, v.plugin)
}

// putAsRoot extracts a small archive into dir with the warden run as root
// (rootWarden), owned and with modes as copyTo leaves them. done is false
// where the warden cannot do it: the caller then uses the archive API.
func (v view) putAsRoot(ctx context.Context, dir string, data []byte) (done bool, err error) {
	r, ok, err := v.rootWarden(ctx, []string{"put", "-user", v.s.putUser(v.plugin), dir}, data, 0)
	if !ok || err != nil {
		return ok, err
	}
	return true, shell.StatusError(r)
}

// putUser is who put -user makes the files of the plugin's side (plugin)
// or the agent's belong to: its numeric user, resolved at start in an
// isolated sandbox; root otherwise (a sandbox without isolation binds the
// warden only where its user is root:root).
func (s *Sandbox) putUser(plugin bool) string {
	if user, _ := s.userOf(plugin); user != "" && s.mux != nil {
		return user
	}
	return "0:0:"
}

// rootWarden runs the warden with args as root in the container's own
// mount namespace, with stdin, keeping at most maxOut bytes of its stdout:
// through the mux in an isolated sandbox, through the root shell of a
// sandbox without isolation that has the warden bound. The engine's
// archive API, which does the same work otherwise, re-executes the
// engine's binary for every call (about 100 ms of the machine's CPU). ok
// is false where there is no warden to run, or it cannot run here
// (archiveFallback).
func (v view) rootWarden(ctx context.Context, args []string, stdin []byte, maxOut int) (r sandbox.ExecResult, ok bool, err error) {
	switch {
	case v.s.b.archiveOnly.Load():
		return r, false, nil
	case v.s.mux != nil:
		// The agent's view closes alone, its sandbox living on.
		if sh := v.shell(); sh != nil && sh.Closed() {
			return r, true, sandbox.ErrClosed
		}
		r, err = v.s.muxRun(ctx, append([]string{shell.WardenPath}, args...), stdin, int64(maxOut))
	case v.s.bound:
		r, err = v.Exec(ctx, shell.WardenCommand(args...), sandbox.ExecOptions{Fresh: true, Stdin: stdin, MaxOutput: maxOut})
	default:
		return r, false, nil
	}
	if err == nil && v.s.b.archiveFallback(r) {
		return r, false, nil
	}
	return r, true, err
}

// archiveFallback reports whether a warden's result says it cannot run
// here: a warden bound in that cannot be executed (126, 127: a mount the
// engine allows but the security module does not). From then on the
// backend uses the engine's archive API for small uploads and reads too.
func (b *Backend) archiveFallback(r sandbox.ExecResult) bool {
	if r.ExitCode != 126 && r.ExitCode != 127 {
		return false
	}
	if b.archiveOnly.CompareAndSwap(false, true) {
		b.log.Warn("small uploads and reads go through the engine's archive API: the warden cannot run here",
			"exit", r.ExitCode, "err", strings.TrimSpace(r.Stderr))
	}
	return true
}

// putMax is the largest archive the warden extracts; a larger tree goes
// through the engine's archive API, which streams it.
const putMax = 4 << 20

// muxRun runs argv on a channel of the mux with stdin, keeping at most
// max bytes of its stdout.
func (s *Sandbox) muxRun(ctx context.Context, argv []string, stdin []byte, max int64) (sandbox.ExecResult, error) {
	ch, err := s.mux.Open(argv)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := ch.Write(stdin)
		if cerr := ch.Close(); err == nil {
			err = cerr
		}
		if _, rerr := io.Copy(&out, io.LimitReader(ch, max)); rerr != nil && err == nil {
			err = rerr
		}
		if _, rerr := io.Copy(io.Discard, ch); rerr != nil && err == nil {
			err = rerr
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		ch.Drop()
		return sandbox.ExecResult{}, ctx.Err()
	}
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	code, err := strconv.Atoi(ch.Exit())
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("%s: %s %s", path.Base(argv[0]), ch.Exit(), strings.TrimSpace(ch.Stderr()))
	}
	return sandbox.ExecResult{ExitCode: code, Stdout: out.String(), Stderr: ch.Stderr()}, nil
}

// readAsRoot reads a file outside the plugin's private folders with the
// warden run as root (rootWarden), finding it as the engine's archive API
// does (read -engine): links followed in the container's own view, where
// the private folders are not mounted, and nothing on its /proc. ok is
// false where the warden cannot do it.
func (v view) readAsRoot(ctx context.Context, full string, limit int64) (data []byte, size int64, ok bool, err error) {
	r, ok, err := v.rootWarden(ctx, []string{"read", "-engine", full, strconv.FormatInt(limit, 10)}, nil, shell.ReadMaxOutput(limit))
	if !ok || err != nil {
		return nil, 0, ok, err
	}
	data, size, err = shell.ReadResult(r)
	return data, size, true, err
}

// userOf is the user that owns what the plugin's side (plugin) or the
// agent's copies in, and its "uid:gid" where known.
func (s *Sandbox) userOf(plugin bool) (user, ids string) {
	if plugin {
		return s.user, s.owner
	}
	return s.agentUserOr()
}

// copyTo extracts a tar archive into dir, owned by the user of the
// plugin's side or the agent's. The engine resolves a user name in the
// container's passwd but not a numeric "uid[:gid]"; for those the
// archive's headers are rewritten to the ids (a chown as root cannot do
// it: an exec in a container whose user is not root gets no
// capabilities).
func (s *Sandbox) copyTo(ctx context.Context, dir string, data []byte, plugin bool) error {
	owner, ids := s.userOf(plugin)
	if ids != "" {
		owner = ids
	}
	uid, gid, numeric := numericUser(owner)
	if numeric {
		var err error
		if data, err = archive.Chown(data, uid, gid); err != nil {
			return err
		}
	}
	err := s.b.cli.CopyToContainer(ctx, s.id, dir, bytes.NewReader(data), container.CopyToContainerOptions{CopyUIDGID: !numeric})
	return engineError(err)
}

// numericUser parses "uid" or "uid:gid" (gid 0 when missing, as the
// engine runs it).
func numericUser(u string) (uid, gid int, ok bool) {
	us, gs, hasGid := strings.Cut(u, ":")
	uid, err := strconv.Atoi(us)
	if err != nil {
		return 0, 0, false
	}
	if hasGid {
		if gid, err = strconv.Atoi(gs); err != nil {
			return 0, 0, false
		}
	}
	return uid, gid, true
}
