package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/internal/poll"
)

type entry struct {
	name, link, body string
	typ              byte
}

func build(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body))}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		bad     string // offending entry, "" when the archive is safe
	}{
		{"plain files", []entry{{name: "a/", typ: tar.TypeDir}, {name: "a/b.txt", body: "hi"}, {name: "./c"}}, ""},
		{"inner symlink", []entry{{name: "a/b"}, {name: "a/l", link: "b", typ: tar.TypeSymlink}}, ""},
		{"symlink up but inside", []entry{{name: "a/b/l", link: "../c", typ: tar.TypeSymlink}}, ""},
		{"hard link inside", []entry{{name: "a"}, {name: "b", link: "a", typ: tar.TypeLink}}, ""},
		{"absolute path", []entry{{name: "/etc/passwd"}}, "/etc/passwd"},
		{"dotdot", []entry{{name: "ok"}, {name: "a/../../evil"}}, "a/../../evil"},
		{"dotdot inside name", []entry{{name: "a/.."}}, "a/.."},
		{"backslash dotdot", []entry{{name: `a\..\..\evil`}}, `a\..\..\evil`},
		{"symlink absolute", []entry{{name: "l", link: "/etc", typ: tar.TypeSymlink}}, "l"},
		{"symlink escapes", []entry{{name: "a/l", link: "../../x", typ: tar.TypeSymlink}}, "a/l"},
		{"hard link escapes", []entry{{name: "l", link: "../x", typ: tar.TypeLink}}, "l"},
		{"hard link absolute", []entry{{name: "l", link: "/etc/shadow", typ: tar.TypeLink}}, "l"},
		{"char device", []entry{{name: "null", typ: tar.TypeChar}}, "null"},
		{"block device", []entry{{name: "sda", typ: tar.TypeBlock}}, "sda"},
		{"fifo", []entry{{name: "p", typ: tar.TypeFifo}}, "p"},
		// Each link stays inside on its own; followed, they climb out.
		{"symlink chain", []entry{{name: "b", link: ".", typ: tar.TypeSymlink}, {name: "a", link: "b/..", typ: tar.TypeSymlink}, {name: "a/x"}}, "a"},
		{"write through an escaping chain", []entry{{name: "d/", typ: tar.TypeDir}, {name: "d/up", link: "..", typ: tar.TypeSymlink}, {name: "d/up/up2", link: "..", typ: tar.TypeSymlink}}, "d/up/up2"},
		{"file under a link to the root's parent", []entry{{name: "s/", typ: tar.TypeDir}, {name: "s/p", link: "..", typ: tar.TypeSymlink}, {name: "s/p/x"}}, ""},
		{"hard link through a link", []entry{{name: "s/p", link: "..", typ: tar.TypeSymlink}, {name: "h", link: "s/p/../etc", typ: tar.TypeLink}}, "h"},
		{"chain that stays inside", []entry{{name: "b", link: ".", typ: tar.TypeSymlink}, {name: "d/l", link: "../b/f", typ: tar.TypeSymlink}, {name: "b/f"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(bytes.NewReader(build(t, tt.entries...)))
			if tt.bad == "" {
				if err != nil {
					t.Fatalf("safe archive refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("err = %v, want ErrUnsafe", err)
			}
			var ee *EntryError
			if !errors.As(err, &ee) || ee.Name != tt.bad {
				t.Fatalf("err = %v, want it to name %q", err, tt.bad)
			}
			if !strings.Contains(err.Error(), strconv.Quote(tt.bad)) {
				t.Fatalf("message %q does not name the entry", err)
			}
		})
	}
}

func TestCheckGzip(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(build(t, entry{name: "../x"}))
	zw.Close()
	if err := Check(&buf); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("gzip archive with ../x: err = %v, want ErrUnsafe", err)
	}
}

func TestCheckCorrupt(t *testing.T) {
	err := Check(strings.NewReader(strings.Repeat("x", 1024)))
	if err == nil || errors.Is(err, ErrUnsafe) {
		t.Fatalf("corrupt archive: err = %v, want a read error", err)
	}
}

func TestExtract(t *testing.T) {
	dir := t.TempDir()
	data := build(t,
		entry{name: "d/", typ: tar.TypeDir},
		entry{name: "d/f.txt", body: "hello"},
		entry{name: "deep/er/g", body: "g"},
		entry{name: "d/l", link: "f.txt", typ: tar.TypeSymlink},
		entry{name: "h", link: "d/f.txt", typ: tar.TypeLink},
	)
	if err := Extract(bytes.NewReader(data), dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"d/f.txt": "hello", "deep/er/g": "g", "d/l": "hello", "h": "hello"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
}

func TestExtractRefusesBeforeWriting(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "root")
	os.Mkdir(dir, 0o755)
	err := Extract(bytes.NewReader(build(t, entry{name: "../escaped", body: "x"})), dir)
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("err = %v, want ErrUnsafe", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "escaped")); err == nil {
		t.Fatal("file written outside the root")
	}
}

// A symlink that is safe by itself must not let a later entry write
// through it to outside the root.
func TestExtractSymlinkThenWriteThrough(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "root")
	os.Mkdir(dir, 0o755)
	os.Mkdir(filepath.Join(parent, "outside"), 0o755)
	data := build(t,
		entry{name: "a/", typ: tar.TypeDir},
		entry{name: "a/up", link: "..", typ: tar.TypeSymlink},
		entry{name: "a/up/up2", link: "..", typ: tar.TypeSymlink},
		entry{name: "a/up/up2/outside/pwned", body: "x"},
	)
	_ = Extract(bytes.NewReader(data), dir)
	if _, err := os.Stat(filepath.Join(parent, "outside", "pwned")); err == nil {
		t.Fatal("a chain of symlinks let an entry escape the root")
	}
}

// What is at an entry's name is replaced, as the engine replaces it: a
// FIFO must not hold the write, a link must not lead it elsewhere, a hard
// link must not change the file's other names. A folder stays for a
// folder; a file over a folder, or a folder over a file, is refused, as
// the engine's copy refuses them.
func TestExtractReplaces(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "target")
	os.WriteFile(outside, []byte("outside"), 0o644)
	os.WriteFile(filepath.Join(dir, "kept"), []byte("kept"), 0o644)
	os.WriteFile(filepath.Join(dir, "other"), []byte("other"), 0o644)
	for _, err := range []error{
		syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644),
		os.Symlink("kept", filepath.Join(dir, "inlink")),
		os.Symlink(outside, filepath.Join(dir, "outlink")),
		os.Link(filepath.Join(dir, "other"), filepath.Join(dir, "hard")),
		os.MkdirAll(filepath.Join(dir, "stays", "old"), 0o755),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	data := build(t,
		entry{name: "fifo", body: "f"},
		entry{name: "inlink", body: "i"},
		entry{name: "outlink", body: "o"},
		entry{name: "hard", body: "h"},
		entry{name: "stays/", typ: tar.TypeDir},
		entry{name: "kept", link: "other", typ: tar.TypeSymlink},
	)
	within(t, "the extraction", func() error { return Extract(bytes.NewReader(data), dir) })
	for p, want := range map[string]string{"fifo": "f", "inlink": "i", "outlink": "o", "hard": "h", "other": "other", "kept": "other"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "outside" {
		t.Errorf("the file a link pointed to outside became %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "inlink")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("inlink is still a link: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stays", "old")); err != nil {
		t.Errorf("a folder entry over a folder emptied it: %v", err)
	}
	for _, e := range []entry{{name: "stays", body: "file over a folder"}, {name: "other/", typ: tar.TypeDir}} {
		if err := Extract(bytes.NewReader(build(t, e)), dir); err == nil {
			t.Errorf("%s over what is there: no error", e.name)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stays", "old")); err != nil {
		t.Errorf("a file entry over a folder removed it: %v", err)
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(build(f, entry{name: "a/b", body: "x"}))
	f.Add(build(f, entry{name: "a/l", link: "../b", typ: tar.TypeSymlink}))
	f.Add(build(f, entry{name: "../x"}))
	f.Add(build(f, entry{name: "h", link: "a", typ: tar.TypeLink}))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Check(bytes.NewReader(data))
		if err != nil {
			return
		}
		// Whatever Check accepts must extract without leaving the root.
		parent := t.TempDir()
		dir := filepath.Join(parent, "root")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = Extract(bytes.NewReader(data), dir)
		ents, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 {
			t.Fatalf("extract wrote outside the root: %v", ents)
		}
		// Every header Check accepted passes CheckEntry, and names stay
		// relative.
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if filepath.IsAbs(h.Name) {
				t.Fatalf("absolute name %q accepted", h.Name)
			}
		}
	})
}

// Pack stores links as links and special files as headers, in lexical
// order, and reads nothing it would wait on.
func TestPack(t *testing.T) {
	base := t.TempDir()
	d := filepath.Join(base, "d")
	os.MkdirAll(filepath.Join(d, "sub"), 0o755)
	os.WriteFile(filepath.Join(d, "sub", "f"), []byte("hello"), 0o644)
	for _, err := range []error{
		os.Symlink("/proc/1/root", filepath.Join(d, "magic")),
		os.Symlink("../..", filepath.Join(d, "up")),
		syscall.Mkfifo(filepath.Join(d, "fifo"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	within(t, "Pack", func() error { return Pack(tw, d, base) })
	tw.Close()
	var got []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, fmt.Sprintf("%s %c %s %s", h.Name, h.Typeflag, h.Linkname, body))
	}
	want := []string{"d/ 5  ", "d/fifo 6  ", "d/magic 2 /proc/1/root ", "d/sub/ 5  ", "d/sub/f 0  hello", "d/up 2 ../.. "}
	if !slices.Equal(got, want) {
		t.Errorf("packed:\n%q\nwant:\n%q", got, want)
	}
}

// within runs f and fails the test when it errs, or when it has not
// returned by the test's deadline: it waits on a FIFO.
func within(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-poll.After(t):
		t.Fatalf("%s waits on the FIFO", what)
	}
}
