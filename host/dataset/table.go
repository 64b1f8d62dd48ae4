package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// table is a dataset's index: its parts (a data file, a task folder, or a
// file that could not be read) and where each starts. It holds no row.
type table struct {
	root  string // the folder every file is opened under
	parts []part
	start []int // start[i] is the first row of parts[i]; one more entry: the end
}

// part is one file's (or task folder's) rows.
type part interface {
	len() int
	// read calls f with the part's rows from i on, in order, each with
	// its error when it cannot be read, until f returns false or the rows
	// end; it returns the index after the last row f took.
	read(root *os.Root, i int, f func(row json.RawMessage, err error) bool) int
}

func (t *table) len() int { return t.start[len(t.parts)] }

// read calls f with the rows from off on (as Read's f), and returns the
// index after the last row f took.
func (t *table) read(off int, f func(i int, row json.RawMessage, err error) bool) int {
	p := sort.Search(len(t.parts), func(p int) bool { return t.start[p+1] > off })
	if p == len(t.parts) {
		return off
	}
	root, err := os.OpenRoot(t.root)
	if err != nil {
		// The folder went away since it was indexed: every row asked is
		// that error, one page at a time.
		i := off
		for i < t.len() && f(i, nil, fmt.Errorf("dataset %s: %w", t.root, err)) {
			i++
		}
		return i
	}
	defer root.Close()
	i := off
	for ; p < len(t.parts); p++ {
		from := i - t.start[p]
		took := 0
		end := t.parts[p].read(root, from, func(row json.RawMessage, err error) bool {
			if !f(i+took, row, err) {
				return false
			}
			took++
			return true
		})
		i = t.start[p] + end
		if end < t.parts[p].len() {
			return i
		}
	}
	return i
}

// index builds the table of name (a file, or "." for the folder root
// itself) under root, as the user knows it by shown, at split.
func index(root, name, shown, split string) (*table, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", shown, err)
	}
	defer r.Close()
	t := &table{root: root}
	if name != "." {
		t.add(openPart(r, name, shown, MaxRows))
		return t.done(), nil
	}
	files, err := dataFiles(r, split)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", shown, err)
	}
	if len(files) == 0 {
		dirs, err := taskFolders(r)
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", shown, err)
		}
		if len(dirs) == 0 {
			return nil, fmt.Errorf("dataset %s: no .json, .jsonl or .parquet files and no task folders", shown)
		}
		for _, d := range dirs {
			t.add(&folder{name: d, shown: path.Join(shown, d)})
		}
		return t.done(), nil
	}
	for _, f := range files {
		left := MaxRows - t.rows()
		if left <= 0 {
			t.add(bad(fmt.Errorf("dataset %s: not read: a dataset holds at most %d rows; name a part of it", path.Join(shown, f), MaxRows)))
			break
		}
		t.add(openPart(r, f, path.Join(shown, f), left))
	}
	return t.done(), nil
}

// add appends a part; start is filled by done.
func (t *table) add(p part) { t.parts = append(t.parts, p) }

// rows is how many rows the parts added so far hold.
func (t *table) rows() int {
	n := 0
	for _, p := range t.parts {
		n += p.len()
	}
	return n
}

// done fills start.
func (t *table) done() *table {
	t.start = make([]int, 0, len(t.parts)+1)
	n := 0
	for _, p := range t.parts {
		t.start = append(t.start, n)
		n += p.len()
	}
	t.start = append(t.start, n)
	return t
}

// dataFiles lists the data files under r (sorted, relative, slash
// separated), leaving out folders whose name starts with a dot; with a
// split, only those whose path holds it. Links are listed as files: they
// are opened under r, which a link that leaves it cannot pass.
func dataFiles(r *os.Root, split string) ([]string, error) {
	var files []string
	err := fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil // an unreadable folder holds no file this run can read
		case d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != ".":
			return fs.SkipDir
		case d.IsDir() || !isData(p) || split != "" && !strings.Contains("/"+p, split):
			return nil
		case len(files) == MaxFiles:
			return fmt.Errorf("over %d data files: name a folder that holds fewer", MaxFiles)
		}
		files = append(files, p)
		return nil
	})
	sort.Strings(files)
	return files, err
}

// taskFolders lists the folders of r whose names do not start with a dot.
func taskFolders(r *os.Root) ([]string, error) {
	f, err := r.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			if len(dirs) == MaxFiles {
				return nil, fmt.Errorf("over %d task folders: name a folder that holds fewer", MaxFiles)
			}
			dirs = append(dirs, e.Name())
		}
	}
	sort.Strings(dirs)
	return dirs, nil
}

func isData(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json", ".jsonl", ".parquet":
		return true
	}
	return false
}

// openFile opens name under r for reading: a regular file, never a FIFO
// or a device (opened without blocking, then refused), never through a
// link that leaves r.
func openFile(r *os.Root, name string) (*os.File, error) {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if strings.Contains(err.Error(), "path escapes from parent") {
			return nil, errors.New("a link that leads out of the folder the run config names: name the file it leads to, or a folder that holds both")
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openPart indexes one data file, by its extension, up to left rows (the
// rest are one row's error); a file that cannot be read is one row's
// error.
func openPart(r *os.Root, name, shown string, left int) part {
	fail := func(err error) part { return bad(fmt.Errorf("dataset %s: %w", shown, err)) }
	f, err := openFile(r, name)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	var p part
	switch strings.ToLower(filepath.Ext(name)) {
	case ".jsonl":
		p, err = indexJSONL(f, name, shown, left)
	case ".json":
		p, err = indexJSON(f, name, shown, left)
	case ".parquet":
		p, err = indexParquet(f, name, shown, left)
	default:
		err = errors.New("unknown format: want .json, .jsonl or .parquet")
	}
	if err != nil {
		return fail(err)
	}
	return p
}

// broken is a part of one row that could not be read: a file that did
// not open or parse.
type broken struct{ err error }

func bad(err error) part { return broken{err} }

func (broken) len() int { return 1 }

func (b broken) read(_ *os.Root, i int, f func(json.RawMessage, error) bool) int {
	if i == 0 && f(nil, b.err) {
		return 1
	}
	return i
}
