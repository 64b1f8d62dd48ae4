// Package python builds plugins written in Python into one .wasm file: the
// Python runtime (CPython for WASI, speaking ABI v1 itself; see runtime/),
// with the SDK (proctor/) and the plugin's own files carried in the module's
// abi.FilesSection. The runtime's bytes are the same for every plugin, so
// the host compiles it once per machine, not once per plugin.
//
// The runtime is built by runtime/build.sh (make python-runtime) into a
// cache folder named by the CPython version and a digest of the recipe;
// RuntimeDir finds it. It uses only the standard library.
package python

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/sdk/abi"
)

//go:embed runtime
var recipe embed.FS

//go:embed proctor/*.py
var sdkFiles embed.FS

// SDK is the Python SDK's own files (the proctor package, as proctor/*.py),
// for tools that copy it next to a plugin for its native tests (proctor
// plugin new --python). Built plugins carry it from here too.
func SDK() fs.FS { return sdkFiles }

// Files of the runtime in its cache folder.
const (
	RuntimeWasm   = "python.wasm"
	RuntimeStdlib = "python313.zip"
)

// ErrNoRuntime: the runtime for this recipe has not been built on this
// machine.
var ErrNoRuntime = errors.New("python runtime not built")

// Version is the CPython version the recipe builds (PY_VERSION in
// runtime/build.sh).
func Version() string {
	b, _ := recipe.ReadFile("runtime/build.sh")
	m := regexp.MustCompile(`(?m)^PY_VERSION=([0-9.]+)$`).FindSubmatch(b)
	if m == nil {
		return "unknown"
	}
	return string(m[1])
}

// Key names the runtime a recipe builds: the CPython version and the first
// 12 hex digits of a sha256 over the recipe's files (each file's name, a
// NUL, its bytes, a NUL, in name order), as runtime/build.sh computes it.
func Key() string {
	names, _ := fs.Glob(recipe, "runtime/*")
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, _ := recipe.ReadFile(n)
		h.Write([]byte(path.Base(n)))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	return Version() + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// RuntimeDir is where the runtime of this recipe lives:
// $PROCTOR_PYTHON_RUNTIME if set, else <cache>/python/<Key> where <cache>
// is $PROCTOR_CACHE_DIR or the user's cache folder + /proctor.
func RuntimeDir() string {
	if d := os.Getenv("PROCTOR_PYTHON_RUNTIME"); d != "" {
		return d
	}
	base := os.Getenv("PROCTOR_CACHE_DIR")
	if base == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(d, "proctor")
	}
	return filepath.Join(base, "python", Key())
}

// Runtime is a built Python runtime: the reactor module and its standard
// library.
type Runtime struct {
	Dir    string
	Wasm   []byte
	Stdlib []byte
}

// LoadRuntime reads the runtime in dir (RuntimeDir when empty), first
// waiting for its build when one is under way on this machine (Building).
// A missing runtime matches ErrNoRuntime.
func LoadRuntime(dir string) (*Runtime, error) {
	if dir == "" {
		dir = RuntimeDir()
	}
	waitBuild(dir)
	r := &Runtime{Dir: dir}
	var err error
	if r.Wasm, err = os.ReadFile(filepath.Join(dir, RuntimeWasm)); err == nil {
		r.Stdlib, err = os.ReadFile(filepath.Join(dir, RuntimeStdlib))
	}
	if errors.Is(err, fs.ErrNotExist) {
		if log := filepath.Join(filepath.Dir(dir), "build.log"); fileExists(log) {
			return nil, fmt.Errorf("%w in %s (the log of the last background build: %s)", ErrNoRuntime, dir, log)
		}
		return nil, fmt.Errorf("%w in %s", ErrNoRuntime, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("python runtime: %w", err)
	}
	if !bytes.HasPrefix(r.Wasm, []byte("\x00asm")) {
		return nil, fmt.Errorf("python runtime %s: not a WebAssembly file", filepath.Join(dir, RuntimeWasm))
	}
	return r, nil
}

// InitHook is the method that starts a Python plugin without running a
// hook: the interpreter started, the plugin imported. Run it on a fresh
// instance and keep the memory it leaves (wasm.Plugin.Snapshot), then
// WithImage, and every instance of the plugin starts there.
const InitHook = "proctor.init"

// WithImage returns the plugin with a memory image (abi.MemorySection)
// appended.
func WithImage(wasm, image []byte) []byte {
	return appendCustomSection(bytes.Clone(wasm), abi.MemorySection, image)
}

// Limits of what a plugin carries.
const (
	MaxFiles     = 10_000
	MaxFileBytes = 64 << 20
	MaxBytes     = 128 << 20
)

// Options tune Build.
type Options struct {
	// Entry is the module the runtime imports first (it registers the
	// plugin), as a file path inside the plugin's folder; default: the
	// file given, or plugin.py, or __init__.py, or the folder's only .py
	// file.
	Entry string
}

// Build turns the plugin at src (a .py file, or a folder of Python files
// and the pure-Python packages it vendors) into a .wasm: the runtime with
// the SDK and the plugin's files. The same inputs give the same bytes.
func Build(rt *Runtime, src string, opt Options) ([]byte, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("plugin source: %w", err)
	}
	var files map[string][]byte
	var entry string
	if st.IsDir() {
		files, err = readFolder(src)
		if err == nil {
			entry, err = pickEntry(src, files, opt.Entry)
		}
	} else {
		if !strings.HasSuffix(src, ".py") {
			return nil, fmt.Errorf("%s: not a .py file: give a Python file or a folder", src)
		}
		if opt.Entry != "" {
			return nil, fmt.Errorf("--entry names a file inside a folder; %s is a single file", src)
		}
		var b []byte
		b, err = os.ReadFile(src)
		entry = filepath.Base(src)
		files = map[string][]byte{entry: b}
	}
	if err != nil {
		return nil, err
	}
	module := strings.TrimSuffix(strings.TrimSuffix(entry, ".py"), "/__init__")
	module = strings.ReplaceAll(module, "/", ".")
	if err := checkNames(src, files, module, rt.Stdlib); err != nil {
		return nil, err
	}
	section, err := filesSection(rt, files, module)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(rt.Wasm)+len(section)+16)
	out = append(out, rt.Wasm...)
	return appendCustomSection(out, abi.FilesSection, section), nil
}

// readFolder reads the files a plugin folder carries: everything but
// dot-files, __pycache__, compiled bytecode and built plugins.
func readFolder(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	total := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		base := d.Name()
		if rel != "." && (strings.HasPrefix(base, ".") || base == "__pycache__") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		switch ext := path.Ext(base); {
		case ext == ".pyc" || ext == ".pyo" || ext == ".wasm":
			return nil
		case ext == ".so" || ext == ".pyd" || ext == ".dylib":
			return fmt.Errorf("%s: a compiled extension cannot run in the WASI runtime: vendor pure-Python packages only", p)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (links are not carried): copy the file into the folder", p)
		}
		if !fs.ValidPath(rel) {
			return fmt.Errorf("%s: a path the runtime cannot carry", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if len(b) > MaxFileBytes {
			return fmt.Errorf("%s: %d bytes, over the limit of %d for one file", p, len(b), MaxFileBytes)
		}
		total += len(b)
		if total > MaxBytes || len(files) >= MaxFiles {
			return fmt.Errorf("%s: the folder carries more than %d files or %d bytes: leave out what the plugin does not need", dir, MaxFiles, MaxBytes)
		}
		files[rel] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}

func pickEntry(dir string, files map[string][]byte, entry string) (string, error) {
	if entry != "" {
		entry = filepath.ToSlash(filepath.Clean(entry))
		if _, ok := files[entry]; !ok || !strings.HasSuffix(entry, ".py") {
			return "", fmt.Errorf("--entry %s: no such .py file in %s", entry, dir)
		}
		return entry, nil
	}
	for _, e := range []string{"plugin.py", "__init__.py"} {
		if _, ok := files[e]; ok {
			return e, nil
		}
	}
	var top []string
	for name := range files {
		if !strings.Contains(name, "/") && strings.HasSuffix(name, ".py") && !strings.HasPrefix(name, "test_") {
			top = append(top, name)
		}
	}
	if len(top) == 1 {
		return top[0], nil
	}
	return "", fmt.Errorf("%s: which file is the plugin? name it plugin.py, or pass --entry FILE", dir)
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkNames refuses a plugin whose entry cannot be imported, or whose
// top-level modules have the name of a standard library module or of the
// SDK: the runtime would import those instead.
func checkNames(src string, files map[string][]byte, module string, stdlib []byte) error {
	for _, part := range strings.Split(module, ".") {
		if part != "__init__" && !identifier.MatchString(part) {
			return fmt.Errorf("%s: %q is not a name Python can import: rename the file", src, module)
		}
	}
	if module == "__init__" {
		return fmt.Errorf("%s: a folder's __init__.py is its package: build the folder that contains it", src)
	}
	taken, err := stdlibNames(stdlib)
	if err != nil {
		return err
	}
	taken["proctor"] = true
	taken["_proctor"] = true
	for name := range files {
		top, _, _ := strings.Cut(name, "/")
		top = strings.TrimSuffix(top, ".py")
		if taken[top] {
			return fmt.Errorf("%s: %s has the name of a module of Python's standard library or the SDK, which the runtime imports instead: rename it", src, name)
		}
	}
	return nil
}

// stdlibNames lists the top-level modules and packages of the standard
// library zip.
func stdlibNames(stdlib []byte) (map[string]bool, error) {
	zr, err := zip.NewReader(bytes.NewReader(stdlib), int64(len(stdlib)))
	if err != nil {
		return nil, fmt.Errorf("python runtime: the standard library zip: %w", err)
	}
	names := map[string]bool{}
	for _, f := range zr.File {
		top, _, _ := strings.Cut(f.Name, "/")
		names[strings.TrimSuffix(strings.TrimSuffix(top, ".pyc"), ".py")] = true
	}
	return names, nil
}

// filesSection is the plugin's file tree as the runtime expects it
// (runtime/proctor_runtime.c): the standard library at
// /lib/python313.zip, the SDK under /lib/sdk, the plugin's files under
// /app, and /proctor.json naming the entry module. Entries are stored,
// sorted and dated 1980-01-01, so the same inputs give the same bytes.
func filesSection(rt *Runtime, files map[string][]byte, module string) ([]byte, error) {
	all := map[string][]byte{"lib/" + RuntimeStdlib: rt.Stdlib}
	sdk, _ := fs.Glob(sdkFiles, "proctor/*.py")
	for _, n := range sdk {
		if n == "proctor/testing.py" || n == "proctor/_wasi.py" {
			continue // native tests only
		}
		b, _ := sdkFiles.ReadFile(n)
		all["lib/sdk/"+n] = b
	}
	for name, b := range files {
		all["app/"+name] = b
	}
	meta, _ := json.Marshal(map[string]string{"entry": module, "runtime": Key()})
	all["proctor.json"] = meta
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	epoch := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Store, Modified: epoch})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(all[n]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendCustomSection appends a custom section (id 0) to a module. Sizes
// are unsigned LEB128, which is what binary.AppendUvarint writes.
func appendCustomSection(mod []byte, name string, payload []byte) []byte {
	body := binary.AppendUvarint(nil, uint64(len(name)))
	body = append(body, name...)
	mod = append(mod, 0)
	mod = binary.AppendUvarint(mod, uint64(len(body)+len(payload)))
	mod = append(mod, body...)
	return append(mod, payload...)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
