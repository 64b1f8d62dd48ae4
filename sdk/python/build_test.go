package python

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// fakeRuntime is a runtime folder with an empty module and a standard
// library of two modules: enough for Build, which never runs it.
func fakeRuntime(t *testing.T) *Runtime {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range []string{"json/__init__.pyc", "os.pyc", "_sysconfigdata__wasi_wasm32-wasi.pyc"} {
		w, _ := zw.Create(n)
		w.Write([]byte("bytecode"))
	}
	zw.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, RuntimeWasm), []byte("\x00asm\x01\x00\x00\x00"), 0o644)
	os.WriteFile(filepath.Join(dir, RuntimeStdlib), buf.Bytes(), 0o644)
	rt, err := LoadRuntime(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// carried opens the files section of a built plugin.
func carried(t *testing.T, rt *Runtime, wasm []byte) map[string]string {
	t.Helper()
	if !bytes.HasPrefix(wasm, rt.Wasm) {
		t.Fatal("the plugin does not start with the runtime's bytes")
	}
	rest := wasm[len(rt.Wasm):]
	if rest[0] != 0 {
		t.Fatalf("not a custom section: id %d", rest[0])
	}
	size, n := uleb(rest[1:])
	body := rest[1+n:]
	if int(size) != len(body) {
		t.Fatalf("section size %d, %d bytes follow", size, len(body))
	}
	nameLen, m := uleb(body)
	if name := string(body[m : m+int(nameLen)]); name != abi.FilesSection {
		t.Fatalf("section %q", name)
	}
	payload := body[m+int(nameLen):]
	zr, err := zip.NewReader(bytes.NewReader(payload), int64(len(payload)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range zr.File {
		if f.Method != zip.Store {
			t.Errorf("%s is compressed", f.Name)
		}
		r, _ := f.Open()
		b, _ := io.ReadAll(r)
		files[f.Name] = string(b)
	}
	return files
}

func uleb(b []byte) (v uint32, n int) {
	for i, c := range b {
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildFile(t *testing.T) {
	rt := fakeRuntime(t)
	dir := t.TempDir()
	write(t, dir, map[string]string{"judge.py": "import proctor\n", "other.py": "not carried"})
	wasm, err := Build(rt, filepath.Join(dir, "judge.py"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	files := carried(t, rt, wasm)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{"app/judge.py", "lib/python313.zip", "lib/sdk/proctor/__init__.py", "lib/sdk/proctor/_config.py", "lib/sdk/proctor/_runtime.py", "proctor.json"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("carried %v\nwant    %v", names, want)
	}
	var meta struct{ Entry, Runtime string }
	json.Unmarshal([]byte(files["proctor.json"]), &meta)
	if meta.Entry != "judge" || meta.Runtime != Key() || files["lib/python313.zip"] != string(rt.Stdlib) {
		t.Errorf("proctor.json %s", files["proctor.json"])
	}
	again, _ := Build(rt, filepath.Join(dir, "judge.py"), Options{})
	if !bytes.Equal(wasm, again) {
		t.Error("the same inputs gave other bytes")
	}
}

func TestBuildFolder(t *testing.T) {
	rt := fakeRuntime(t)
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"plugin.py": "x", "items.py": "y", "data/words.txt": "w", "vendor_pkg/__init__.py": "z",
		"test_plugin.py": "t", "__pycache__/plugin.cpython-313.pyc": "c", ".git/config": "g", ".env": "secret", "old.wasm": "w", "x.pyc": "c",
	})
	wasm, err := Build(rt, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	files := carried(t, rt, wasm)
	for _, n := range []string{"app/plugin.py", "app/items.py", "app/data/words.txt", "app/vendor_pkg/__init__.py", "app/test_plugin.py"} {
		if _, ok := files[n]; !ok {
			t.Errorf("%s not carried", n)
		}
	}
	for n := range files {
		if strings.Contains(n, "pycache") || strings.Contains(n, ".git") || strings.HasSuffix(n, ".env") || strings.HasSuffix(n, ".wasm") || strings.HasSuffix(n, ".pyc") {
			t.Errorf("%s carried", n)
		}
	}
	if !strings.Contains(files["proctor.json"], `"entry":"plugin"`) {
		t.Errorf("entry: %s", files["proctor.json"])
	}
	wasm, err = Build(rt, dir, Options{Entry: "vendor_pkg/__init__.py"})
	if err != nil || !strings.Contains(carried(t, rt, wasm)["proctor.json"], `"entry":"vendor_pkg"`) {
		t.Errorf("--entry of a package: %v", err)
	}
}

func TestBuildRefuses(t *testing.T) {
	rt := fakeRuntime(t)
	cases := []struct {
		files map[string]string
		src   string
		opt   Options
		want  string
	}{
		{map[string]string{"json.py": "x"}, "json.py", Options{}, "json.py has the name of a module of Python's standard library"},
		{map[string]string{"plugin.py": "x", "os/__init__.py": "y"}, ".", Options{}, "os/__init__.py has the name of a module"},
		{map[string]string{"proctor.py": "x"}, "proctor.py", Options{}, "or the SDK"},
		{map[string]string{"my-plugin.py": "x"}, "my-plugin.py", Options{}, `"my-plugin" is not a name Python can import`},
		{map[string]string{"a.py": "x", "b.py": "y"}, ".", Options{}, "which file is the plugin? name it plugin.py, or pass --entry FILE"},
		{map[string]string{"plugin.py": "x", "fast.so": "elf"}, ".", Options{}, "a compiled extension cannot run in the WASI runtime"},
		{map[string]string{"plugin.py": "x"}, ".", Options{Entry: "nope.py"}, "--entry nope.py: no such .py file"},
		{map[string]string{"plugin.txt": "x"}, "plugin.txt", Options{}, "not a .py file"},
		{map[string]string{}, "missing.py", Options{}, "no such file"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		write(t, dir, c.files)
		_, err := Build(rt, filepath.Join(dir, c.src), c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %s: %v; want %q", c.files, c.src, err, c.want)
		}
	}
	dir := t.TempDir()
	write(t, dir, map[string]string{"plugin.py": "x"})
	os.Symlink("/etc/passwd", filepath.Join(dir, "link.txt"))
	if _, err := Build(rt, dir, Options{}); err == nil || !strings.Contains(err.Error(), "links are not carried") {
		t.Errorf("a link in the folder: %v", err)
	}
}

func TestNoRuntime(t *testing.T) {
	_, err := LoadRuntime(t.TempDir())
	if !errors.Is(err, ErrNoRuntime) {
		t.Errorf("%v", err)
	}
}

// TestKeyMatchesTheScript: build.sh and RuntimeDir name the same folder,
// so proctor finds the runtime make python-runtime built.
func TestKeyMatchesTheScript(t *testing.T) {
	cache := t.TempDir()
	cmd := exec.Command("bash", "runtime/build.sh", "--print-dir")
	cmd.Env = append(os.Environ(), "PROCTOR_CACHE_DIR="+cache)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROCTOR_CACHE_DIR", cache)
	t.Setenv("PROCTOR_PYTHON_RUNTIME", "")
	if got := strings.TrimSpace(string(out)); got != RuntimeDir() || !strings.HasSuffix(got, "/python/"+Version()+"-"+Key()[len(Version())+1:]) {
		t.Errorf("build.sh says %s, RuntimeDir %s", got, RuntimeDir())
	}
	if Version() != "3.13.5" {
		t.Errorf("Version %q", Version())
	}
}
