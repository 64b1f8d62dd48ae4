// Package repocache keeps bare mirrors of git repositories on the host,
// shared by every rollout of a run and by every proctor process on the
// machine, and serves the tree of any commit as a tar stream.
//
// A mirror is cloned once, under a file lock, into a temporary folder that
// is renamed into place, so a crash never leaves a half-cloned mirror; a
// commit the mirror lacks triggers one fetch, under the same lock. Reading
// a tree (git archive) needs no lock: git's object store only grows.
//
// The URLs come from plugins, so git runs with prompts off, only the file,
// https, http, ssh and git transports allowed, and the URL after "--".
// Archives ignore the repository's export-ignore and export-subst
// attributes, so the tree is the commit's tree, every file of it.
package repocache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
)

// Cache is a folder of bare mirrors.
type Cache struct {
	dir string

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// New returns the cache kept in dir (created when needed).
func New(dir string) *Cache { return &Cache{dir: dir, locks: map[string]*sync.Mutex{}} }

// ErrNoCommit: the repository has no such commit, even after a fetch.
var ErrNoCommit = errors.New("commit not found")

var safeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// mirror is the folder of url's mirror.
func (c *Cache) mirror(url string) string {
	sum := sha256.Sum256([]byte(url))
	base := safeName.ReplaceAllString(strings.TrimSuffix(filepath.Base(strings.TrimRight(url, "/")), ".git"), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return filepath.Join(c.dir, base+"-"+hex.EncodeToString(sum[:8])+".git")
}

func checkURL(url string) error {
	switch {
	case url == "":
		return errors.New("empty repository URL")
	case strings.HasPrefix(url, "-"):
		return fmt.Errorf("repository URL %q starts with '-'", url)
	case strings.Contains(url, "::"):
		return fmt.Errorf("repository URL %q names a remote helper, which is not allowed", url)
	}
	return nil
}

var commitRE = regexp.MustCompile(`^[A-Za-z0-9._/^~-]{1,200}$`)

// Archive returns the tree of url at commit as a tar stream, and the full
// id of the commit. The caller closes the stream; a failure of git shows
// in the stream's Close.
func (c *Cache) Archive(ctx context.Context, url, commit string) (io.ReadCloser, string, error) {
	if err := checkURL(url); err != nil {
		return nil, "", err
	}
	if !commitRE.MatchString(commit) || strings.HasPrefix(commit, "-") {
		return nil, "", fmt.Errorf("commit %q is not a commit id or ref", commit)
	}
	dir := c.mirror(url)
	id, err := c.resolve(ctx, dir, url, commit)
	if err != nil {
		return nil, "", err
	}
	cmd := git(ctx, dir, "archive", "--format=tar", id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	stderr := &tail{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("git archive: %w", err)
	}
	return &stream{ReadCloser: out, cmd: cmd, stderr: stderr}, id, nil
}

type stream struct {
	io.ReadCloser
	cmd    *exec.Cmd
	stderr *tail
}

func (s *stream) Close() error {
	io.Copy(io.Discard, s.ReadCloser)
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("git archive: %v: %s", err, strings.TrimSpace(s.stderr.String()))
	}
	return nil
}

// resolve makes sure the mirror exists and holds commit, and returns its
// full id.
func (c *Cache) resolve(ctx context.Context, dir, url, commit string) (string, error) {
	if _, err := os.Stat(dir); err == nil {
		if id, err := revParse(ctx, dir, commit); err == nil {
			return id, nil
		}
	}
	unlock, err := c.lock(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := clone(ctx, dir, url); err != nil {
			return "", err
		}
	} else if _, err := revParse(ctx, dir, commit); err != nil {
		// Another process may have fetched while this one waited.
		if out, err := run(git(ctx, dir, "fetch", "--quiet", "--prune", "origin")); err != nil {
			return "", fmt.Errorf("fetch %s: %v: %s", url, err, out)
		}
	}
	id, err := revParse(ctx, dir, commit)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", url, ErrNoCommit, commit)
	}
	return id, nil
}

func clone(ctx context.Context, dir, url string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".clone-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if out, err := run(git(ctx, "", "clone", "--mirror", "--quiet", "--", url, tmp)); err != nil {
		return fmt.Errorf("clone %s: %v: %s", url, err, out)
	}
	// info/attributes outranks the repository's own .gitattributes.
	if err := os.MkdirAll(filepath.Join(tmp, "info"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "info", "attributes"), []byte("* -export-ignore -export-subst\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func revParse(ctx context.Context, dir, commit string) (string, error) {
	cmd := git(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", commit+"^{commit}")
	out := &tail{}
	cmd.Stdout = out
	if err := cmd.Run(); err != nil {
		return "", ErrNoCommit
	}
	return out.String(), nil
}

// run runs cmd and returns the tail of what it printed: a remote
// repository decides what git prints, so it is bounded.
func run(cmd *exec.Cmd) (string, error) {
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	return out.String(), err
}

// maxTail is what a tail keeps of a git command's output.
const maxTail = 16 << 10

// tail keeps the last maxTail bytes written to it, and whether it dropped
// any.
type tail struct {
	mu      sync.Mutex
	b       []byte
	dropped bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - maxTail; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
		t.dropped = true
	}
	return len(p), nil
}

// String is the kept tail, trimmed, with a marker when more was written.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if t.dropped {
		s = "[earlier output cut] ..." + s
	}
	return s
}

func git(ctx context.Context, dir string, args ...string) *exec.Cmd {
	if dir != "" {
		args = append([]string{"--git-dir", dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = append(os.Environ(),
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ALLOW_PROTOCOL=file:https:http:ssh:git",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_ASKPASS=true",
	)
	return cmd
}

// lock takes the in-process and the cross-process lock of one mirror.
func (c *Cache) lock(dir string) (func(), error) {
	c.mu.Lock()
	m := c.locks[dir]
	if m == nil {
		m = &sync.Mutex{}
		c.locks[dir] = m
	}
	c.mu.Unlock()
	m.Lock()
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		m.Unlock()
		return nil, fmt.Errorf("repository cache %s: %w", c.dir, err)
	}
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		m.Unlock()
		return nil, fmt.Errorf("repository cache: %w", err)
	}
	// A clone in another process holds this for as long as it takes.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		m.Unlock()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		m.Unlock()
	}, nil
}
