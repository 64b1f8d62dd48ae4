package dataset

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-dev/proctor/sandbox/archive"
)

// spans is a JSONL or JSON file's rows: where each is in the file, or why
// it cannot be read.
type spans struct {
	name, shown string
	object      bool // each row must be a JSON object (JSONL)
	off         []int64
	n           []uint32
	errs        map[int]error // rows that cannot be read
}

func (s *spans) len() int { return len(s.off) }

func (s *spans) add(off int64, n int) { s.off, s.n = append(s.off, off), append(s.n, uint32(n)) }

// fail adds a row that cannot be read, for err.
func (s *spans) fail(err error) {
	if s.errs == nil {
		s.errs = map[int]error{}
	}
	s.errs[len(s.off)] = err
	s.add(-1, 0)
}

func (s *spans) read(root *os.Root, i int, f func(json.RawMessage, error) bool) int {
	var file *os.File
	var openErr error
	for ; i < len(s.off); i++ {
		if err := s.errs[i]; err != nil {
			if !f(nil, err) {
				return i
			}
			continue
		}
		if file == nil && openErr == nil {
			if file, openErr = openFile(root, s.name); openErr == nil {
				defer file.Close()
			}
		}
		row, err := s.row(file, openErr, i)
		if !f(row, err) {
			return i
		}
	}
	return i
}

// row reads row i from file (or fails with openErr), checking it is still
// what was indexed.
func (s *spans) row(file *os.File, openErr error, i int) (json.RawMessage, error) {
	if openErr != nil {
		return nil, fmt.Errorf("dataset %s: %w", s.shown, openErr)
	}
	b := make([]byte, s.n[i])
	if _, err := file.ReadAt(b, s.off[i]); err != nil || !json.Valid(b) || s.object && b[0] != '{' {
		return nil, fmt.Errorf("dataset %s: row %d changed since the run read the file", s.shown, i+1)
	}
	return b, nil
}

// indexJSONL indexes a JSONL file, line by line, up to left rows: a line
// that is not a JSON object or is over MaxRow is that row's error, read
// without being held.
func indexJSONL(f io.Reader, name, shown string, left int) (part, error) {
	s := &spans{name: name, shown: shown, object: true}
	br := bufio.NewReaderSize(f, 1<<20)
	var pos int64
	for line := 1; ; line++ {
		b, n, err := readLine(br, MaxRow)
		start := pos
		pos += int64(n)
		if t := bytes.TrimLeftFunc(b, unicode.IsSpace); len(t) > 0 || errors.Is(err, errLineTooLong) {
			if s.len() == left {
				s.fail(fmt.Errorf("dataset %s: line %d and the lines after it are not read: a dataset holds at most %d rows", shown, line, MaxRows))
				return s, nil
			}
			t = bytes.TrimRightFunc(t, unicode.IsSpace)
			switch {
			case errors.Is(err, errLineTooLong):
				s.fail(fmt.Errorf("dataset %s: line %d is over %d MiB, the most a row may be", shown, line, MaxRow>>20))
			case !json.Valid(t) || t[0] != '{':
				s.fail(fmt.Errorf("dataset %s: line %d is not a JSON object (is the file truncated, or not JSONL?)", shown, line))
			default:
				s.add(start+int64(len(b)-len(bytes.TrimLeftFunc(b, unicode.IsSpace))), len(t))
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return s, nil
		case err != nil && !errors.Is(err, errLineTooLong):
			s.fail(fmt.Errorf("dataset %s: line %d and the lines after it cannot be read: %v", shown, line, err))
			return s, nil
		}
	}
}

// errLineTooLong: a line over the most readLine keeps.
var errLineTooLong = errors.New("line too long")

// readLine reads up to and including the next '\n' (or to EOF) and says
// how many bytes that was; a line over max is errLineTooLong, read to its
// end without being kept.
func readLine(br *bufio.Reader, max int) ([]byte, int, error) {
	var line []byte
	n, long := 0, false
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if !long && len(line)+len(chunk) > max {
			long, line = true, nil
		}
		if !long {
			line = append(line, chunk...)
		}
		if err != bufio.ErrBufferFull {
			if long && (err == nil || err == io.EOF) {
				if err == io.EOF {
					return nil, n, fmt.Errorf("%w: %w", errLineTooLong, io.EOF)
				}
				return nil, n, errLineTooLong
			}
			return line, n, err
		}
	}
}

// guard holds a JSON decoder to MaxRow (and a little of what it reads
// ahead) past the end of the last row it indexed.
type guard struct {
	r          io.Reader
	read, mark int64
}

// errRowTooLarge: a JSON value over MaxRow.
var errRowTooLarge = fmt.Errorf("a value is over %d MiB, the most a row may be", MaxRow>>20)

func (g *guard) Read(p []byte) (int, error) {
	left := MaxRow + 1<<20 - (g.read - g.mark)
	if left <= 0 {
		return 0, errRowTooLarge
	}
	n, err := g.r.Read(p[:min(int64(len(p)), left)])
	g.read += int64(n)
	return n, err
}

// arrayKeys are the keys of a .json object under which its rows may be,
// in the order they are looked for.
var arrayKeys = []string{"rows", "data", "tasks", "instances"}

// indexJSON indexes a .json file without holding it: an array of rows, or
// an object with one under one of arrayKeys. A row over MaxRow, or that
// does not parse, is an error for it and the rest of the file.
func indexJSON(f io.Reader, name, shown string, left int) (part, error) {
	g := &guard{r: f}
	dec := json.NewDecoder(g)
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON (is the file truncated?): %v", err)
	}
	if tok == json.Delim('[') {
		p, _ := indexArray(dec, g, name, shown, left)
		return p, nil
	}
	if tok != json.Delim('{') {
		return nil, errWantArray
	}
	found := map[string]part{}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON (is the file truncated?): %v", err)
		}
		if k, _ := key.(string); contains(arrayKeys, k) && found[k] == nil {
			tok, err := dec.Token()
			if err == nil && tok == json.Delim('[') {
				p, whole := indexArray(dec, g, name, shown, left)
				if !whole {
					// The decoder is lost inside the array: the rest
					// of the file is that error.
					return p, nil
				}
				found[k] = p
				continue
			}
			if err == nil {
				err = skip(dec, tok)
			}
			if err != nil {
				return nil, fmt.Errorf("not JSON (is the file truncated?): %v", err)
			}
			continue
		}
		if err := skipValue(dec); err != nil {
			return nil, fmt.Errorf("not JSON (is the file truncated?): %v", err)
		}
		g.mark = dec.InputOffset()
	}
	for _, k := range arrayKeys {
		if p := found[k]; p != nil {
			return p, nil
		}
	}
	return nil, errWantArray
}

var errWantArray = errors.New(`want an array of objects, or an object with one under "rows", "data", "tasks" or "instances"`)

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// indexArray indexes the elements of the array dec is in, up to left; a
// row the decoder cannot get through ends the array as an error. whole
// says the decoder got to the array's end.
func indexArray(dec *json.Decoder, g *guard, name, shown string, left int) (p part, whole bool) {
	s := &spans{name: name, shown: shown}
	for {
		more := dec.More()
		if !more {
			if _, err := dec.Token(); err != nil { // the closing ]
				s.fail(fmt.Errorf("dataset %s: row %d and the rows after it cannot be read: %v", shown, s.len()+1, err))
				return s, false
			}
			return s, true
		}
		if s.len() == left {
			s.fail(fmt.Errorf("dataset %s: row %d and the rows after it are not read: a dataset holds at most %d rows", shown, s.len()+1, MaxRows))
			return s, false
		}
		g.mark = dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, errRowTooLarge) {
				err = fmt.Errorf("it is over %d MiB, the most a row may be", MaxRow>>20)
			}
			s.fail(fmt.Errorf("dataset %s: row %d and the rows after it cannot be read: %v", shown, s.len()+1, err))
			return s, false
		}
		end := dec.InputOffset()
		if len(raw) > MaxRow {
			s.fail(fmt.Errorf("dataset %s: row %d is over %d MiB, the most a row may be", shown, s.len()+1, MaxRow>>20))
		} else {
			s.add(end-int64(len(raw)), len(raw))
		}
		g.mark = end
	}
}

// skipValue reads past the next value without holding it whole.
func skipValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return skip(dec, tok)
}

// skip reads past the rest of the value tok starts.
func skip(dec *json.Decoder, tok json.Token) error {
	depth := 0
	for {
		if d, ok := tok.(json.Delim); ok {
			if d == '[' || d == '{' {
				depth++
			} else {
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
		var err error
		if tok, err = dec.Token(); err != nil {
			return err
		}
	}
}

// maxParquetFooter bounds a parquet file's metadata, which the library
// reads whole: its length is what the file's last bytes say.
const maxParquetFooter = 64 << 20

// pqRows is a parquet file's rows, decoded one at a time when asked.
type pqRows struct {
	name, shown string
	n           int
	over        error // set: one more row, the rows past left
}

func (p *pqRows) len() int {
	if p.over != nil {
		return p.n + 1
	}
	return p.n
}

// indexParquet reads a parquet file's metadata: how many rows it holds.
func indexParquet(f *os.File, name, shown string, left int) (part, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := openParquet(f, fi.Size())
	if err != nil {
		return nil, err
	}
	p := &pqRows{name: name, shown: shown, n: int(min(pf.NumRows(), int64(left)))}
	if pf.NumRows() < 0 {
		return nil, errors.New("not a readable parquet file: a negative row count")
	}
	if pf.NumRows() > int64(left) {
		p.over = fmt.Errorf("dataset %s: row %d and the rows after it are not read: a dataset holds at most %d rows", shown, left+1, MaxRows)
	}
	return p, nil
}

// openParquet opens a parquet file of size bytes, refusing metadata over
// maxParquetFooter before the library allocates it.
func openParquet(f io.ReaderAt, size int64) (pf *parquet.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("not a readable parquet file: %v", p)
		}
	}()
	var tail [8]byte
	if size < 12 {
		return nil, errors.New("not a parquet file (truncated, or another format?)")
	}
	if _, err := f.ReadAt(tail[:], size-8); err != nil {
		return nil, err
	}
	if n := int64(binary.LittleEndian.Uint32(tail[:4])); n > size-12 || n > maxParquetFooter {
		return nil, fmt.Errorf("not a readable parquet file: its metadata says it is %d bytes, in a file of %d", n, size)
	}
	pf, err = parquet.OpenFile(f, size)
	if err != nil {
		return nil, fmt.Errorf("not a parquet file (truncated, or another format?): %w", err)
	}
	return pf, nil
}

func (p *pqRows) read(root *os.Root, i int, f func(json.RawMessage, error) bool) (next int) {
	var failed error
	var rd *parquet.GenericReader[map[string]any]
	defer func() {
		if rd != nil {
			rd.Close()
		}
		if r := recover(); r != nil {
			// The library panicked on the file: this row and the ones
			// after it in this page are its error.
			failed = fmt.Errorf("dataset %s: not a readable parquet file: %v", p.shown, r)
			next = p.fail(next, failed, f)
		}
	}()
	if i < p.n {
		file, err := openFile(root, p.name)
		if err != nil {
			return p.fail(i, fmt.Errorf("dataset %s: %w", p.shown, err), f)
		}
		defer file.Close()
		fi, err := file.Stat()
		if err != nil {
			return p.fail(i, fmt.Errorf("dataset %s: %w", p.shown, err), f)
		}
		pf, err := openParquet(file, fi.Size())
		if err != nil {
			return p.fail(i, fmt.Errorf("dataset %s: %w", p.shown, err), f)
		}
		rd = parquet.NewGenericReader[map[string]any](pf, pf.Schema())
		if err := rd.SeekToRow(int64(i)); err != nil {
			return p.fail(i, fmt.Errorf("dataset %s: row %d: %w", p.shown, i+1, err), f)
		}
	}
	for next = i; next < p.n; next++ {
		row, err := p.row(rd, next)
		if !f(row, err) {
			return next
		}
	}
	if next == p.n && p.over != nil && f(nil, p.over) {
		next++
	}
	return next
}

// row decodes the reader's next row, row i of the file.
func (p *pqRows) row(rd *parquet.GenericReader[map[string]any], i int) (json.RawMessage, error) {
	batch := []map[string]any{{}}
	n, err := rd.Read(batch)
	if n == 0 {
		if err == nil || err == io.EOF {
			err = errors.New("the file holds fewer rows than it says")
		}
		return nil, fmt.Errorf("dataset %s: row %d: %w", p.shown, i+1, err)
	}
	b, err := json.Marshal(clean(batch[0]))
	if err != nil {
		return nil, fmt.Errorf("dataset %s: row %d: %w", p.shown, i+1, err)
	}
	if len(b) > MaxRow {
		return nil, fmt.Errorf("dataset %s: row %d is over %d MiB, the most a row may be", p.shown, i+1, MaxRow>>20)
	}
	return b, nil
}

// fail gives the rows from i on err, as f takes them.
func (p *pqRows) fail(i int, err error, f func(json.RawMessage, error) bool) int {
	for ; i < p.len(); i++ {
		if !f(nil, err) {
			return i
		}
	}
	return i
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

// folder is a task folder: one row, {"name", "tar"}, packed when asked.
type folder struct{ name, shown string }

func (*folder) len() int { return 1 }

func (d *folder) read(root *os.Root, i int, f func(json.RawMessage, error) bool) int {
	if i > 0 {
		return i
	}
	row, err := d.row(root)
	if !f(row, err) {
		return 0
	}
	return 1
}

func (d *folder) row(root *os.Root) (json.RawMessage, error) {
	sub, err := root.OpenRoot(d.name)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", d.shown, err)
	}
	defer sub.Close()
	tgz, err := tarGz(sub, d.shown)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", d.shown, err)
	}
	return json.Marshal(map[string]any{"name": d.name, "tar": tgz})
}

// maxFolderTar bounds a task folder's gzip tar, so that its row, in
// base64, stays within MaxRow.
const maxFolderTar = MaxRow/4*3 - 4<<10

// tarGz packs everything under root as a gzip tar of at most maxFolderTar
// bytes.
func tarGz(root *os.Root, what string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&capped{w: &buf, left: maxFolderTar, what: what})
	tw := tar.NewWriter(zw)
	if err := archive.PackRoot(tw, root); err != nil {
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
