package repocache

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// repo makes a git repository with one commit per tree and returns its
// path and the commit ids.
func repo(t testing.TB, trees ...map[string]string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	var ids []string
	for _, tree := range trees {
		commitTree(t, dir, tree)
		run("add", "-A")
		run("commit", "-q", "--allow-empty", "-m", "c")
		ids = append(ids, run("rev-parse", "HEAD"))
	}
	return dir, ids
}

func commitTree(t testing.TB, dir string, tree map[string]string) {
	for name, body := range tree {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func files(t testing.TB, c *Cache, url, commit string) (map[string]string, string) {
	t.Helper()
	rc, id, err := c.Archive(context.Background(), url, commit)
	if err != nil {
		t.Fatalf("Archive(%s, %s): %v", url, commit, err)
	}
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			got[h.Name] = string(b)
		}
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	return got, id
}

func keys(m map[string]string) string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

func TestArchiveEachCommitAndFetch(t *testing.T) {
	src, ids := repo(t,
		map[string]string{"a.py": "one", ".gitattributes": "tests/ export-ignore\n", "tests/test_a.py": "t"},
		map[string]string{"a.py": "two", "b.py": "b"})
	c := New(t.TempDir())
	got, id := files(t, c, src, ids[0])
	if id != ids[0] || got["a.py"] != "one" || keys(got) != ".gitattributes,a.py,tests/test_a.py" {
		t.Fatalf("first commit: id %s files %v", id, got)
	}
	got, _ = files(t, c, src, ids[1][:10])
	if got["a.py"] != "two" || got["b.py"] != "b" {
		t.Fatalf("second commit by short id: %v", got)
	}
	// A commit made after the mirror was cloned is fetched.
	commitTree(t, src, map[string]string{"a.py": "three"})
	exec.Command("git", "-C", src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "c3").Run()
	head, _ := exec.Command("git", "-C", src, "rev-parse", "HEAD").Output()
	got, id = files(t, c, src, strings.TrimSpace(string(head)))
	if got["a.py"] != "three" || id != strings.TrimSpace(string(head)) {
		t.Fatalf("fetched commit: %s %v", id, got)
	}
	entries, _ := os.ReadDir(c.dir)
	var mirrors int
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".git") {
			mirrors++
		}
	}
	if mirrors != 1 {
		t.Fatalf("%d mirrors in the cache, want 1", mirrors)
	}
}

func TestConcurrentRolloutsShareOneClone(t *testing.T) {
	src, ids := repo(t, map[string]string{"a.py": "one"})
	dir := t.TempDir()
	// Two caches on one folder stand for two proctor processes: only the
	// file lock keeps them from cloning twice.
	caches := []*Cache{New(dir), New(dir)}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _ := files(t, caches[i%2], src, ids[0])
			if got["a.py"] != "one" {
				t.Errorf("rollout %d: %v", i, got)
			}
		}()
	}
	wg.Wait()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".clone-") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

func TestBadRequests(t *testing.T) {
	src, _ := repo(t, map[string]string{"a.py": "one"})
	c := New(t.TempDir())
	ctx := context.Background()
	if _, _, err := c.Archive(ctx, src, "0123456789abcdef0123456789abcdef01234567"); !errors.Is(err, ErrNoCommit) {
		t.Errorf("unknown commit: %v", err)
	}
	for _, url := range []string{"", "--upload-pack=touch /tmp/x", "ext::sh -c touch% /tmp/pwned"} {
		if _, _, err := c.Archive(ctx, url, "main"); err == nil {
			t.Errorf("url %q accepted", url)
		}
	}
	if _, _, err := c.Archive(ctx, src, "--output=/tmp/x"); err == nil {
		t.Error("option as commit accepted")
	}
	if _, _, err := c.Archive(ctx, filepath.Join(t.TempDir(), "nothing"), "main"); err == nil || !strings.Contains(err.Error(), "clone") {
		t.Errorf("missing repository: %v", err)
	}
}

func BenchmarkArchiveCached(b *testing.B) {
	tree := map[string]string{}
	for i := range 200 {
		tree[filepath.Join("pkg", strings.Repeat("d", i%5+1), "f"+string(rune('a'+i%26))+strings.Repeat("x", i)+".py")] = strings.Repeat("line\n", 100)
	}
	src, ids := repo(b, tree)
	c := New(b.TempDir())
	files(b, c, src, ids[0])
	b.ResetTimer()
	for b.Loop() {
		files(b, c, src, ids[0])
	}
}

// TestTailIsBounded: what git prints (a remote decides much of it) is kept
// only as its last maxTail bytes, with a marker.
func TestTailIsBounded(t *testing.T) {
	var tl tail
	for range 100 {
		tl.Write([]byte(strings.Repeat("x", 1024) + "\n"))
	}
	tl.Write([]byte("fatal: the end\n"))
	s := tl.String()
	if len(s) > maxTail+64 || !strings.HasPrefix(s, "[earlier output cut]") || !strings.HasSuffix(s, "fatal: the end") {
		t.Fatalf("tail of %d bytes: %.60q ... %q", len(s), s, s[len(s)-20:])
	}
}
