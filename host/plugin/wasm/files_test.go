package wasm

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// storedZip is a zip of files, each stored; names ending in / are folders.
func storedZip(t testing.TB, files map[string]string, method uint16) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withSection appends a custom section to a module (sizes in unsigned
// LEB128, as binary.AppendUvarint writes them).
func withSection(mod []byte, name string, payload []byte) []byte {
	body := append(binary.AppendUvarint(nil, uint64(len(name))), name...)
	out := binary.AppendUvarint(append(bytes.Clone(mod), 0), uint64(len(body)+len(payload)))
	return append(append(out, body...), payload...)
}

func TestSplitSections(t *testing.T) {
	mod, err := os.ReadFile(wasmtest.Build(t, "./host/plugin/wasm/testdata/files"))
	if err != nil {
		t.Fatal(err)
	}
	payload := storedZip(t, map[string]string{"a.txt": "A"}, zip.Store)
	both := withSection(withSection(withSection(mod, abi.FilesSection, payload), "other", []byte("keep")), abi.MemorySection, []byte("image"))
	code, sections, err := splitSections(both)
	if err != nil || !bytes.Equal(sections[abi.FilesSection], payload) || string(sections[abi.MemorySection]) != "image" || !bytes.Equal(code, withSection(mod, "other", []byte("keep"))) {
		t.Fatalf("split: err %v, sections %d, code %d bytes (module %d)", err, len(sections), len(code), len(mod))
	}
	if code, sections, err := splitSections(mod); err != nil || sections != nil || !bytes.Equal(code, mod) {
		t.Errorf("a module without files changed: %v", err)
	}
	if _, _, err := splitSections(withSection(withSection(mod, abi.FilesSection, payload), abi.FilesSection, payload)); err == nil {
		t.Error("two files sections were accepted")
	}
	// Not a well-formed module: handed on untouched for the compiler to refuse.
	bad := append(withSection(mod, abi.FilesSection, payload), 0, 0xff)
	if code, sections, err := splitSections(bad); err != nil || sections != nil || !bytes.Equal(code, bad) {
		t.Errorf("a truncated module: sections %v, err %v", sections != nil, err)
	}
}

func TestFilesFS(t *testing.T) {
	section := storedZip(t, map[string]string{"proctor.json": "{}", "lib/a.py": "a", "lib/pkg/b.py": "bb", "app/": "", "app/empty/": ""}, zip.Store)
	fsys, err := newFilesFS(section)
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(fsys, "proctor.json", "lib/a.py", "lib/pkg/b.py", "app/empty"); err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string]map[string]string{
		"compressed":        {"a.txt": strings.Repeat("a", 100)},
		"bad path":          {"../up": "x"},
		"file and a folder": {"a": "x", "a/b": "y"},
	} {
		method := uint16(zip.Store)
		if name == "compressed" {
			method = zip.Deflate
		}
		if _, err := newFilesFS(storedZip(t, files, method)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := newFilesFS([]byte("not a zip")); err == nil {
		t.Error("a section that is not a zip was accepted")
	}
}

// TestPluginFiles: a plugin sees the files it carries, read-only, and
// nothing else; plugins that differ only in their files share one
// compilation in the on-disk cache.
func TestPluginFiles(t *testing.T) {
	ctx := context.Background()
	mod, err := os.ReadFile(wasmtest.Build(t, "./host/plugin/wasm/testdata/files"))
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	r := newRuntime(t, Config{CacheDir: cache})
	one := withSection(mod, abi.FilesSection, storedZip(t, map[string]string{"data/hello.txt": "hello", "data/b.txt": "b"}, zip.Store))
	p, err := r.Load(ctx, "one", one)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := p.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	for _, c := range []struct{ hook, arg, want string }{
		{"read", "/data/hello.txt", `"hello"`},
		{"list", "/data", `["b.txt","hello.txt"]`},
		{"read", "/etc/passwd", "No such file"},
		{"write", "/data/new.txt", "error: "},
		{"write", "/data/hello.txt", "error: "},
	} {
		in, _ := json.Marshal(c.arg)
		got, err := inst.CallRaw(ctx, c.hook, in)
		if err != nil || !strings.Contains(string(got), c.want) {
			t.Errorf("%s %s: %s, %v; want %s", c.hook, c.arg, got, err, c.want)
		}
	}
	if got, _ := inst.CallRaw(ctx, "read", []byte(`"/data/hello.txt"`)); string(got) != `"hello"` {
		t.Errorf("a refused write changed the file: %s", got)
	}

	// The same code without files sees nothing.
	bare, err := r.Load(ctx, "bare", mod)
	if err != nil {
		t.Fatal(err)
	}
	bi, _ := bare.Instantiate(ctx, InstanceConfig{})
	defer bi.Close(ctx)
	if got, _ := bi.CallRaw(ctx, "read", []byte(`"/data/hello.txt"`)); !strings.Contains(string(got), "error") {
		t.Errorf("a plugin without files read one: %s", got)
	}

	// Another plugin on the same code, in a new process: one compilation.
	two := withSection(mod, abi.FilesSection, storedZip(t, map[string]string{"other.txt": "2"}, zip.Store))
	r2 := newRuntime(t, Config{CacheDir: cache})
	if _, err := r2.Load(ctx, "two", two); err != nil {
		t.Fatal(err)
	}
	var compiled int
	filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			compiled++
		}
		return nil
	})
	if compiled != 1 {
		t.Errorf("%d compiled modules in the cache for plugins that share their code; want 1", compiled)
	}
	if p.SHA256() == bare.SHA256() {
		t.Error("the sha256 is not of the whole file")
	}

	// A broken files section refuses the plugin at load.
	_, err = r.Load(ctx, "broken", withSection(mod, abi.FilesSection, []byte("PK junk")))
	if !errors.Is(err, ErrNotWasm) || !strings.Contains(err.Error(), abi.FilesSection) {
		t.Errorf("broken files section: %v", err)
	}
}

func FuzzSplitSections(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(withSection([]byte("\x00asm\x01\x00\x00\x00"), abi.FilesSection, []byte("PK")))
	f.Add(withSection([]byte("\x00asm\x01\x00\x00\x00\x01\x02\x00\x00"), "name", []byte{1, 2, 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		code, sections, err := splitSections(b)
		if err != nil {
			return
		}
		if sections == nil && !bytes.Equal(code, b) {
			t.Fatal("no sections, but the module changed")
		}
		n := len(code)
		for _, s := range sections {
			n += len(s)
		}
		if n > len(b) {
			t.Fatal("more bytes out than in")
		}
	})
}

func FuzzFilesFS(f *testing.F) {
	f.Add(storedZip(f, map[string]string{"a/b.txt": "x", "c/": ""}, zip.Store))
	f.Add(storedZip(f, map[string]string{"a": "x"}, zip.Deflate))
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Fuzz(func(t *testing.T, b []byte) {
		fsys, err := newFilesFS(b)
		if err != nil {
			return
		}
		fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				fs.ReadFile(fsys, p)
			}
			return nil
		})
	})
}
