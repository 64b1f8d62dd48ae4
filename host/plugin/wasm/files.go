package wasm

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// splitSections takes the custom sections a plugin carries for the host
// (abi.FilesSection, abi.MemorySection) out of a module: code is the
// module without them (what is compiled, so plugins that share a runtime
// share its compilation), sections their payloads by name. Bytes that are
// not a well-formed module come back as code untouched, for the compiler
// to refuse.
func splitSections(wasm []byte) (code []byte, sections map[string][]byte, err error) {
	const header = 8 // "\0asm" and the version
	if len(wasm) < header {
		return wasm, nil, nil
	}
	type span struct{ start, end int }
	var cut []span
	found := map[string][]byte{}
	for off := header; off < len(wasm); {
		id := wasm[off]
		size, n := uleb32(wasm[off+1:])
		body := off + 1 + n
		if n == 0 || uint64(body)+uint64(size) > uint64(len(wasm)) {
			return wasm, nil, nil
		}
		next := body + int(size)
		if id == 0 {
			nameLen, m := uleb32(wasm[body:next])
			if m > 0 && uint64(body+m)+uint64(nameLen) <= uint64(next) {
				name := string(wasm[body+m : body+m+int(nameLen)])
				if name == abi.FilesSection || name == abi.MemorySection {
					if _, dup := found[name]; dup {
						return nil, nil, fmt.Errorf("two %s sections: rebuild the plugin", name)
					}
					found[name] = wasm[body+m+int(nameLen) : next]
					cut = append(cut, span{off, next})
				}
			}
		}
		off = next
	}
	if len(cut) == 0 {
		return wasm, nil, nil
	}
	code = make([]byte, 0, len(wasm))
	prev := 0
	for _, c := range cut {
		code = append(code, wasm[prev:c.start]...)
		prev = c.end
	}
	return append(code, wasm[prev:]...), found, nil
}

// uleb32 decodes an unsigned LEB128 number of at most 32 bits; n is 0 when
// b does not start with one.
func uleb32(b []byte) (v uint32, n int) {
	for i := 0; i < 5 && i < len(b); i++ {
		v |= uint32(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if i == 4 && b[i] > 0x0f {
				return 0, 0
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// maxFiles bounds the entries of a files section.
const maxFiles = 100_000

// filesFS is the read-only file tree of a files section: a zip archive
// whose entries are stored (not compressed), each file a window on the
// plugin's own bytes.
type filesFS struct {
	files map[string]*bytes.Reader // by path, without a leading slash
	dirs  map[string][]fs.DirEntry // by path; "." is the root
}

// newFilesFS reads a files section.
func newFilesFS(section []byte) (*filesFS, error) {
	zr, err := zip.NewReader(bytes.NewReader(section), int64(len(section)))
	if err != nil {
		return nil, fmt.Errorf("%s section: %w", abi.FilesSection, err)
	}
	if len(zr.File) > maxFiles {
		return nil, fmt.Errorf("%s section: %d files, over the limit of %d", abi.FilesSection, len(zr.File), maxFiles)
	}
	f := &filesFS{files: map[string]*bytes.Reader{}, dirs: map[string][]fs.DirEntry{".": nil}}
	for _, e := range zr.File {
		name := strings.TrimSuffix(e.Name, "/")
		if !fs.ValidPath(name) || name == "." {
			return nil, fmt.Errorf("%s section: bad path %q", abi.FilesSection, e.Name)
		}
		if strings.HasSuffix(e.Name, "/") {
			if err := f.mkdirs(name); err != nil {
				return nil, err
			}
			continue
		}
		if e.Method != zip.Store || e.CompressedSize64 != e.UncompressedSize64 {
			return nil, fmt.Errorf("%s section: %s is compressed; files are stored as they are", abi.FilesSection, name)
		}
		off, err := e.DataOffset()
		if err != nil || off < 0 || uint64(off)+e.UncompressedSize64 > uint64(len(section)) {
			return nil, fmt.Errorf("%s section: %s lies outside the section", abi.FilesSection, name)
		}
		if _, dup := f.files[name]; dup {
			return nil, fmt.Errorf("%s section: %s twice", abi.FilesSection, name)
		}
		if _, dir := f.dirs[name]; dir {
			return nil, fmt.Errorf("%s section: %s is both a file and a folder", abi.FilesSection, name)
		}
		if err := f.mkdirs(path.Dir(name)); err != nil {
			return nil, err
		}
		f.files[name] = bytes.NewReader(section[off : off+int64(e.UncompressedSize64)])
		f.dirs[path.Dir(name)] = append(f.dirs[path.Dir(name)], entry{name: path.Base(name), size: int64(e.UncompressedSize64)})
	}
	for _, d := range f.dirs {
		slices.SortFunc(d, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	}
	return f, nil
}

// mkdirs records dir and its parents as folders.
func (f *filesFS) mkdirs(dir string) error {
	var missing []string // dir and the parents not yet known, innermost first
	for ; dir != "."; dir = path.Dir(dir) {
		if _, ok := f.dirs[dir]; ok {
			break
		}
		if _, file := f.files[dir]; file {
			return fmt.Errorf("%s section: %s is both a file and a folder", abi.FilesSection, dir)
		}
		missing = append(missing, dir)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		f.dirs[d] = nil
		parent := path.Dir(d)
		f.dirs[parent] = append(f.dirs[parent], entry{name: path.Base(d), dir: true})
	}
	return nil
}

// Open implements fs.FS.
func (f *filesFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if r, ok := f.files[name]; ok {
		// A reader of its own over the same bytes: each open file has its
		// own offset.
		b := io.NewSectionReader(r, 0, r.Size())
		return &file{SectionReader: b, info: entry{name: path.Base(name), size: r.Size()}}, nil
	}
	if d, ok := f.dirs[name]; ok {
		return &dir{info: entry{name: path.Base(name), dir: true}, entries: d}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// entry is a file's or folder's fs.FileInfo and fs.DirEntry.
type entry struct {
	name string
	size int64
	dir  bool
}

func (e entry) Name() string { return e.name }
func (e entry) Size() int64  { return e.size }
func (e entry) Mode() fs.FileMode {
	if e.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (e entry) ModTime() time.Time         { return time.Time{} }
func (e entry) IsDir() bool                { return e.dir }
func (e entry) Sys() any                   { return nil }
func (e entry) Type() fs.FileMode          { return e.Mode().Type() }
func (e entry) Info() (fs.FileInfo, error) { return e, nil }
func (e entry) String() string             { return fs.FormatFileInfo(e) }
func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *file) Close() error               { return nil }
func (d *dir) Stat() (fs.FileInfo, error)  { return d.info, nil }
func (d *dir) Close() error                { return nil }
func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errIsDir}
}
func (d *dir) Seek(int64, int) (int64, error) { d.next = 0; return 0, nil }

var errIsDir = errors.New("is a directory")

// file is an open file: seekable, readable at any offset.
type file struct {
	*io.SectionReader
	info entry
}

// dir is an open folder.
type dir struct {
	info    entry
	entries []fs.DirEntry
	next    int
}

// instanceFiles is one instance's view of its plugin's files. It counts
// the files the plugin holds open, which a parked instance would lose.
// wazero's own handle on the root, which it opens when first used, is not
// the plugin's: wazero opens it with no permission bits, and every file
// the plugin opens (path_open) with 0o600.
type instanceFiles struct {
	experimentalsys.FS
	open atomic.Int64
}

func newInstanceFiles(f *filesFS) *instanceFiles {
	return &instanceFiles{FS: &sysfs.AdaptFS{FS: f}}
}

// OpenFile implements experimentalsys.FS.
func (t *instanceFiles) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	f, errno := t.FS.OpenFile(path, flag, perm)
	if errno != 0 || perm == 0 {
		return f, errno
	}
	t.open.Add(1)
	return &openFile{File: f, open: &t.open}, 0
}

// openFile is a file the plugin opened; its Close counts once.
type openFile struct {
	experimentalsys.File
	open   *atomic.Int64
	closed atomic.Bool
}

func (f *openFile) Close() experimentalsys.Errno {
	if !f.closed.Swap(true) {
		f.open.Add(-1)
	}
	return f.File.Close()
}

// ReadDir implements fs.ReadDirFile.
func (d *dir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.next:]
	if n <= 0 {
		d.next = len(d.entries)
		return slices.Clone(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	rest = rest[:min(n, len(rest))]
	d.next += len(rest)
	return slices.Clone(rest), nil
}
