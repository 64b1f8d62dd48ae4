// Package dataset serves the plugin host operation dataset.read: rows from
// local JSON, JSONL and parquet files, from folders, and from Hugging Face
// datasets (hf://owner/name[@revision]) downloaded into an on-disk cache.
//
// A folder is read as the data files in it (sorted; a split name selects
// the files whose path contains it). A folder without data files is read as
// a folder of task folders: one row per subfolder, {"name": ..., "tar":
// base64 of a gzip tar of it}, the same shape dataset rows use to ship task
// environments, so a plugin reads both the same way.
package dataset

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-dev/proctor/sandbox/archive"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// DefaultLimit is the page size when a request gives none.
const DefaultLimit = 1000

// Bounds on what a dataset may make the host hold: a dataset comes from
// people the user may not know.
const (
	// MaxRow bounds one row: a JSONL line, a decoded parquet row, the
	// tar of a task folder.
	MaxRow = 256 << 20
	// MaxJSONFile bounds a .json file, which is decoded whole (JSONL and
	// parquet are read row by row).
	MaxJSONFile = 1 << 30
	// MaxPage bounds the rows of one answer: a page ends early, at a row
	// boundary (Next says where to go on), once it holds this much.
	MaxPage = 32 << 20
)

// Reader reads datasets for one run. It serves only the datasets the run
// names (Named): a plugin, which may come from anywhere, must not read the
// user's files. It caches decoded files in memory so paging through a
// large file decodes it once.
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
	cache map[string][]json.RawMessage
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
	rows, err := r.rows(ctx, req.Source, req.Split)
	if err != nil {
		return abi.DatasetResponse{}, err
	}
	limit := req.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	off := min(max(req.Offset, 0), len(rows))
	end, size := off, 0
	for end < len(rows) && end-off < limit && (end == off || size+len(rows[end]) <= MaxPage) {
		size += len(rows[end])
		end++
	}
	page := rows[off:end]
	if len(req.Columns) > 0 {
		page = project(page, req.Columns)
	}
	return abi.DatasetResponse{Rows: page, Next: end, EOF: end >= len(rows)}, nil
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

func project(rows []json.RawMessage, cols []string) []json.RawMessage {
	out := make([]json.RawMessage, len(rows))
	for i, row := range rows {
		var m map[string]json.RawMessage
		if json.Unmarshal(row, &m) != nil {
			out[i] = row
			continue
		}
		keep := map[string]json.RawMessage{}
		for _, c := range cols {
			if v, ok := m[c]; ok {
				keep[c] = v
			}
		}
		out[i], _ = json.Marshal(keep)
	}
	return out
}

func (r *Reader) rows(ctx context.Context, source, split string) ([]json.RawMessage, error) {
	key := source + "\x00" + split
	r.mu.Lock()
	if rows, ok := r.cache[key]; ok {
		r.mu.Unlock()
		return rows, nil
	}
	r.mu.Unlock()
	path := source
	if strings.HasPrefix(source, "hf://") {
		if r.Hub == nil {
			return nil, fmt.Errorf("dataset %s: Hugging Face datasets are not enabled", source)
		}
		dir, err := r.Hub.Fetch(ctx, source)
		if err != nil {
			return nil, err
		}
		path = dir
	} else if !filepath.IsAbs(path) {
		path = filepath.Join(r.BaseDir, path)
	}
	rows, err := ReadPath(path, split)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string][]json.RawMessage{}
	}
	r.cache[key] = rows
	r.mu.Unlock()
	return rows, nil
}

func isData(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json", ".jsonl", ".parquet":
		return true
	}
	return false
}

// ReadPath reads every row of a file or folder.
func ReadPath(path, split string) ([]json.RawMessage, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	if !fi.IsDir() {
		return ReadFile(path)
	}
	var files []string
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && isData(p) && (split == "" || strings.Contains(filepath.ToSlash(p[len(path):]), split)) {
			files = append(files, p)
		}
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != path {
			return filepath.SkipDir
		}
		return nil
	})
	if len(files) == 0 {
		return taskFolders(path)
	}
	sort.Strings(files)
	var rows []json.RawMessage
	for _, f := range files {
		rs, err := ReadFile(f)
		if err != nil {
			return nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, nil
}

// ReadFile reads one data file by its extension.
func ReadFile(path string) ([]json.RawMessage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	defer f.Close()
	var rows []json.RawMessage
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl":
		rows, err = decodeJSONL(f)
	case ".json":
		rows, err = decodeJSON(f)
	case ".parquet":
		fi, serr := f.Stat()
		if serr != nil {
			return nil, serr
		}
		rows, err = decodeParquet(f, fi.Size())
	default:
		err = errors.New("unknown format: want .json, .jsonl or .parquet")
	}
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	return rows, nil
}

func decodeJSONL(r io.Reader) ([]json.RawMessage, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var rows []json.RawMessage
	for n := 1; ; n++ {
		line, err := readLine(br, MaxRow)
		if errors.Is(err, errLineTooLong) {
			return nil, fmt.Errorf("line %d is over %d MiB, the most a row may be", n, MaxRow>>20)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if !json.Valid(t) || t[0] != '{' {
				return nil, fmt.Errorf("line %d is not a JSON object (is the file truncated, or not JSONL?)", n)
			}
			rows = append(rows, json.RawMessage(bytes.Clone(t)))
		}
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// errLineTooLong: a line over the most readLine reads.
var errLineTooLong = errors.New("line too long")

// readLine reads up to and including the next '\n' (or to EOF), at most
// max bytes of it: a longer line is errLineTooLong, and what was read of
// it is dropped as it goes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

func decodeJSON(r io.Reader) ([]json.RawMessage, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxJSONFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxJSONFile {
		return nil, fmt.Errorf("a .json file is read whole, and this one is over %d MiB: write it as JSONL or parquet, which are read row by row", MaxJSONFile>>20)
	}
	var rows []json.RawMessage
	if err := json.Unmarshal(b, &rows); err == nil {
		return rows, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("not JSON (is the file truncated?): %v", err)
	}
	for _, k := range []string{"rows", "data", "tasks", "instances"} {
		if v, ok := obj[k]; ok {
			if err := json.Unmarshal(v, &rows); err == nil {
				return rows, nil
			}
		}
	}
	return nil, errors.New(`want an array of objects, or an object with one under "rows", "data", "tasks" or "instances"`)
}

func decodeParquet(r io.ReaderAt, size int64) (rows []json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("not a readable parquet file: %v", p)
		}
	}()
	f, err := parquet.OpenFile(r, size)
	if err != nil {
		return nil, fmt.Errorf("not a parquet file (truncated, or another format?): %w", err)
	}
	rd := parquet.NewGenericReader[map[string]any](f, f.Schema())
	defer rd.Close()
	for {
		batch := make([]map[string]any, 256)
		for i := range batch {
			batch[i] = map[string]any{}
		}
		n, err := rd.Read(batch)
		for _, m := range batch[:n] {
			b, merr := json.Marshal(clean(m))
			if merr != nil {
				return nil, merr
			}
			if len(b) > MaxRow {
				return nil, fmt.Errorf("row %d is over %d MiB, the most a row may be", len(rows)+1, MaxRow>>20)
			}
			rows = append(rows, b)
		}
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read parquet rows: %w", err)
		}
	}
}

// clean makes parquet values JSON-friendly: byte strings that are not UTF-8
// become base64.
func clean(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = clean(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = clean(e)
		}
		return x
	case string:
		if !utf8.ValidString(x) {
			return base64.StdEncoding.EncodeToString([]byte(x))
		}
		return x
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return base64.StdEncoding.EncodeToString(x)
	}
	return v
}

// taskFolders reads a folder of folders as one row per subfolder.
func taskFolders(dir string) ([]json.RawMessage, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", dir, err)
	}
	var rows []json.RawMessage
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		tgz, err := TarGz(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", dir, err)
		}
		b, _ := json.Marshal(map[string]any{"name": e.Name(), "tar": tgz})
		rows = append(rows, b)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("dataset %s: no .json, .jsonl or .parquet files and no task folders", dir)
	}
	return rows, nil
}

// TarGz packs a folder (its contents, relative names) as a gzip tar, of
// at most MaxRow bytes.
func TarGz(dir string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&capped{w: &buf, left: MaxRow, what: dir})
	tw := tar.NewWriter(zw)
	err := archive.Pack(tw, dir, dir)
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// capped writes to w until left bytes are written, then fails saying what
// was too large.
type capped struct {
	w    io.Writer
	left int
	what string
}

func (c *capped) Write(p []byte) (int, error) {
	if len(p) > c.left {
		return 0, fmt.Errorf("%s packs to over %d MiB, the most a row may be", c.what, MaxRow>>20)
	}
	c.left -= len(p)
	return c.w.Write(p)
}
