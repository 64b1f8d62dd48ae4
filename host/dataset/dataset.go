// Package dataset serves the plugin host operation dataset.read: rows from
// local JSON, JSONL and parquet files, from folders, and from Hugging Face
// datasets (hf://owner/name[@revision]) downloaded into an on-disk cache.
//
// A folder is read as the data files in it (sorted; a split name selects
// the files whose path contains it). A folder without data files is read as
// a folder of task folders: one row per subfolder, {"name": ..., "tar":
// base64 of a gzip tar of it}, the same shape dataset rows use to ship task
// environments, so a plugin reads both the same way.
//
// Every file is opened under the folder the run's config names (for a
// named file, the folder that holds it) as an os.Root: a link that leads
// out of it, a FIFO or a device is that file's error, never a read of the
// host's files. A dataset is indexed once (where each row is, not the rows)
// and each page is read from its files when asked, so what the host holds
// is a page, whatever the dataset's size. A row that cannot be read (not
// JSON, over abi.MaxRow, a file that does not open) is that row's error,
// null in the page and named in its Errors; the other rows are served.
package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// DefaultLimit is the page size when a request gives none.
const DefaultLimit = 1000

// Bounds on what a dataset may make the host hold: a dataset comes from
// people the user may not know.
const (
	// MaxRow bounds one row: a JSONL line, an element of a JSON array, a
	// decoded parquet row, the tar of a task folder.
	MaxRow = abi.MaxRow
	// MaxPage bounds the rows of one answer: a page ends early, at a row
	// boundary (Next says where to go on), once it holds this much.
	MaxPage = 32 << 20
	// MaxRows bounds the rows of a dataset (its index holds 12 bytes a
	// row); the rows past it are one row's error.
	MaxRows = 2_000_000
	// MaxFiles bounds the data files (or task folders) of a folder.
	MaxFiles = 100_000
	// MaxColumns bounds the columns a request may keep (each is looked
	// up in every row of the page).
	MaxColumns = 1000
)

// Reader reads datasets for one run. It serves only the datasets the run
// names (Named): a plugin, which may come from anywhere, must not read the
// user's files. It keeps each dataset's index, not its rows.
type Reader struct {
	// BaseDir resolves relative sources (the config file's folder).
	BaseDir string
	// Hub downloads hf:// datasets; nil refuses them.
	Hub *Hub
	// Named are what the run's config names, as written there: a local
	// path (relative to BaseDir) is served when a request resolves to the
	// same path, an hf://owner/name dataset at any revision. Nothing else
	// is served.
	Named []string

	mu    sync.Mutex
	cache map[string]*table
}

// DeniedError is a request for a dataset the run does not serve: one the
// config does not name, or a folder no run serves whole.
type DeniedError struct {
	Source string // as the plugin asked
	Path   string // where a local source resolves; "" for hf://
	Why    string
}

func (e *DeniedError) Error() string {
	s := fmt.Sprintf("dataset %q", e.Source)
	if e.Path != "" && e.Path != e.Source {
		s += " (" + e.Path + ")"
	}
	return s + " " + e.Why
}

// Read answers one dataset.read request.
func (r *Reader) Read(ctx context.Context, req abi.DatasetRequest) (abi.DatasetResponse, error) {
	if err := r.check(req.Source); err != nil {
		return abi.DatasetResponse{}, err
	}
	if len(req.Columns) > MaxColumns {
		return abi.DatasetResponse{}, fmt.Errorf("dataset %s: %d columns asked for, over the %d a request may keep", req.Source, len(req.Columns), MaxColumns)
	}
	t, err := r.table(ctx, req.Source, req.Split)
	if err != nil {
		return abi.DatasetResponse{}, err
	}
	limit := req.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	off := min(max(req.Offset, 0), t.len())
	resp := abi.DatasetResponse{Rows: []json.RawMessage{}}
	size := 0
	end := t.read(off, func(i int, row json.RawMessage, rowErr error) bool {
		if i-off >= limit || i > off && size+len(row) > MaxPage {
			return false
		}
		size += len(row)
		if rowErr != nil {
			resp.Rows = append(resp.Rows, json.RawMessage("null"))
			resp.Errors = append(resp.Errors, abi.RowError{Row: i, Error: rowErr.Error()})
			return true
		}
		if len(req.Columns) > 0 {
			row = project(row, req.Columns)
		}
		resp.Rows = append(resp.Rows, row)
		return true
	})
	resp.Next, resp.EOF = end, end >= t.len()
	return resp, nil
}

// table is the index of source (at split), built on its first request.
func (r *Reader) table(ctx context.Context, source, split string) (*table, error) {
	key := source + "\x00" + split
	r.mu.Lock()
	t, ok := r.cache[key]
	r.mu.Unlock()
	if ok {
		return t, nil
	}
	root, name, shown := r.resolve(source), "", source
	if strings.HasPrefix(source, "hf://") {
		if r.Hub == nil {
			return nil, fmt.Errorf("dataset %s: Hugging Face datasets are not enabled", source)
		}
		dir, err := r.Hub.Fetch(ctx, source)
		if err != nil {
			return nil, err
		}
		root, name = dir, "."
	} else if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", source, err)
	} else if fi.IsDir() {
		name = "."
	} else {
		// A named file is read under the folder that holds it.
		root, name = filepath.Dir(root), filepath.Base(root)
	}
	t, err := index(root, name, shown, split)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string]*table{}
	}
	r.cache[key] = t
	r.mu.Unlock()
	return t, nil
}

// check refuses a source the run does not name, and a folder no run may
// serve whole: the file system's root, the home folder and its parents.
func (r *Reader) check(source string) error {
	const allow = "is not named in the run config: a plugin reads only the datasets [env.config] names " +
		"(paths relative to the config file's folder, hf://owner/name); to allow this one, name it there, e.g. dataset = %q"
	if repo, ok := hfRepo(source); ok {
		for _, n := range r.Named {
			if named, ok := hfRepo(n); ok && named == repo {
				return nil
			}
		}
		return &DeniedError{Source: source, Why: fmt.Sprintf(allow, source)}
	}
	path := r.resolve(source)
	for _, n := range r.Named {
		if _, ok := hfRepo(n); ok || n == "" || r.resolve(n) != path {
			continue
		}
		if home, _ := os.UserHomeDir(); path == string(filepath.Separator) || home != "" && isOrHolds(path, home) {
			return &DeniedError{Source: source, Path: path, Why: "is the file system's root, your home folder or a folder that holds it: no run serves it whole; name a folder inside it"}
		}
		return nil
	}
	return &DeniedError{Source: source, Path: path, Why: fmt.Sprintf(allow, source)}
}

// resolve makes a local source absolute, relative to BaseDir.
func (r *Reader) resolve(source string) string {
	p := source
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.BaseDir, p)
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return filepath.Clean(p)
}

// isOrHolds reports whether path is dir or one of its parents.
func isOrHolds(path, dir string) bool {
	dir, path = filepath.Clean(dir), filepath.Clean(path)
	return dir == path || strings.HasPrefix(dir, strings.TrimSuffix(path, string(filepath.Separator))+string(filepath.Separator))
}

// hfRepo is the owner/name of an hf://owner/name[@revision] source.
func hfRepo(source string) (string, bool) {
	rest, ok := strings.CutPrefix(source, "hf://")
	if !ok {
		return "", false
	}
	repo, _, _ := strings.Cut(rest, "@")
	return repo, true
}

// project keeps the columns cols of row (a row that is not an object is
// kept whole).
func project(row json.RawMessage, cols []string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(row, &m) != nil {
		return row
	}
	keep := map[string]json.RawMessage{}
	for _, c := range cols {
		if v, ok := m[c]; ok {
			keep[c] = v
		}
	}
	out, _ := json.Marshal(keep)
	return out
}
