package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-dev/proctor/sdk/abi"
)

type row struct {
	Name string `parquet:"task_name"`
	Tar  []byte `parquet:"environment_tar"`
	N    int64  `parquet:"n"`
}

func writeParquet(t testing.TB, path string, rows []row) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	w.Close()
	os.WriteFile(path, buf.Bytes(), 0o644)
}

func TestFormatsAndPaging(t *testing.T) {
	dir := t.TempDir()
	writeParquet(t, filepath.Join(dir, "a.parquet"), []row{{"p1", []byte("text"), 1}, {"p2", []byte{0xff, 0}, 2}})
	os.WriteFile(filepath.Join(dir, "b.jsonl"), []byte("{\"task_name\":\"j1\"}\n\n{\"task_name\":\"j2\"}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "c.json"), []byte(`{"rows":[{"task_name":"o1"}]}`), 0o644)
	r := &Reader{BaseDir: dir, Named: []string{"."}}
	ctx := context.Background()
	var names []string
	off := 0
	for {
		page, err := r.Read(ctx, abi.DatasetRequest{Source: ".", Offset: off, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range page.Rows {
			var m map[string]any
			json.Unmarshal(row, &m)
			names = append(names, m["task_name"].(string))
			if m["task_name"] == "p2" && m["environment_tar"] != "/wA=" {
				t.Errorf("binary column not base64: %v", m["environment_tar"])
			}
		}
		if page.EOF {
			break
		}
		off = page.Next
	}
	if strings.Join(names, ",") != "p1,p2,j1,j2,o1" {
		t.Fatalf("rows %v", names)
	}
}

// TestBadFiles: a file that cannot be read is one row's error naming it;
// the rows of the other files, and the good lines of a file, are served.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf)
	w.Write([]row{{"p1", nil, 1}})
	w.Close()
	os.WriteFile(filepath.Join(dir, "cut.parquet"), buf.Bytes()[:buf.Len()/2], 0o644)
	os.WriteFile(filepath.Join(dir, "lies.parquet"), []byte(`{"task_name":"x"}`), 0o644)
	os.WriteFile(filepath.Join(dir, "cut.jsonl"), []byte("{\"a\":1}\n{\"a\":"), 0o644)
	os.WriteFile(filepath.Join(dir, "good.jsonl"), []byte("{\"a\":2}\n"), 0o644)
	rows, errs := readAll(t, &Reader{BaseDir: dir, Named: []string{"."}}, ".")
	// Files in order: cut.jsonl, cut.parquet, good.jsonl, lies.parquet.
	if len(rows) != 5 || string(rows[0]) != `{"a":1}` || rows[1] != nil || string(rows[3]) != `{"a":2}` {
		t.Fatalf("rows %q", rows)
	}
	for i, want := range map[int]string{1: "dataset cut.jsonl: line 2 is not a JSON object", 2: "dataset cut.parquet: not a", 4: "dataset lies.parquet: not a"} {
		if !strings.Contains(errs[i], want) {
			t.Errorf("row %d: %q, want %q", i, errs[i], want)
		}
	}
}

// readAll reads every row of source, page by page: the rows (nil for one
// that could not be read) and the errors by row.
func readAll(t testing.TB, r *Reader, source string) ([]json.RawMessage, map[int]string) {
	t.Helper()
	var rows []json.RawMessage
	errs := map[int]string{}
	for off := 0; ; {
		page, err := r.Read(context.Background(), abi.DatasetRequest{Source: source, Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Errors {
			errs[e.Row] = e.Error
		}
		for i, row := range page.Rows {
			if string(row) == "null" {
				if _, ok := errs[off+i]; !ok {
					t.Fatalf("row %d is null without an error", off+i)
				}
				row = nil
			}
			rows = append(rows, row)
		}
		if page.EOF || page.Next <= off {
			return rows, errs
		}
		off = page.Next
	}
}

func TestTaskFolders(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "t1", "tests"), 0o755)
	os.WriteFile(filepath.Join(dir, "t1", "task.toml"), []byte("x=1"), 0o644)
	rows, errs := readAll(t, &Reader{BaseDir: dir, Named: []string{"."}}, ".")
	if len(rows) != 1 || len(errs) != 0 {
		t.Fatalf("%v %d", errs, len(rows))
	}
	var m struct{ Name, Tar string }
	json.Unmarshal(rows[0], &m)
	if m.Name != "t1" || m.Tar == "" {
		t.Fatalf("%+v", m)
	}
}

func TestHub(t *testing.T) {
	dir := t.TempDir()
	var pq bytes.Buffer
	w := parquet.NewGenericWriter[row](&pq)
	w.Write([]row{{"hf1", nil, 1}})
	w.Close()
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		hits++
		switch r.URL.Path {
		case "/api/datasets/org/ds/tree/v1":
			w.Write([]byte(`[{"type":"file","path":"data/train-0.parquet"},{"type":"file","path":"README.md"}]`))
		case "/datasets/org/ds/resolve/v1/data/train-0.parquet":
			w.Write(pq.Bytes())
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	hub := &Hub{Endpoint: srv.URL, Token: "tok", CacheDir: dir, Client: srv.Client()}
	r := &Reader{Hub: hub, Named: []string{"hf://org/ds"}}
	page, err := r.Read(context.Background(), abi.DatasetRequest{Source: "hf://org/ds@v1"})
	if err != nil || len(page.Rows) != 1 || !strings.Contains(string(page.Rows[0]), "hf1") {
		t.Fatalf("%v %s", err, page.Rows)
	}
	// Cached: a second reader works with the server gone.
	srv.Close()
	r2 := &Reader{Hub: hub, Named: []string{"hf://org/ds@v1"}}
	if _, err := r2.Read(context.Background(), abi.DatasetRequest{Source: "hf://org/ds@v1"}); err != nil {
		t.Fatalf("offline from cache: %v", err)
	}
	hub.Token = "wrong"
	if _, err := (&Reader{Hub: &Hub{Endpoint: "http://127.0.0.1:1", CacheDir: t.TempDir(), Client: http.DefaultClient}, Named: []string{"hf://org/other"}}).Read(context.Background(), abi.DatasetRequest{Source: "hf://org/other"}); err == nil {
		t.Fatal("unreachable hub gave no error")
	}
}

// TestOnlyNamedDatasets: a reader serves the paths the config names
// (relative to its folder, however the plugin spells them) and the hf://
// datasets it names, at any revision; anything else is refused, saying
// what was asked and how to allow it. The root and the home folder are
// never served whole.
func TestOnlyNamedDatasets(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "cfg"), 0o755)
	os.WriteFile(filepath.Join(dir, "cfg", "rows.jsonl"), []byte("{\"a\":1}\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "fakehome", ".ssh"), 0o755)
	os.WriteFile(filepath.Join(dir, "fakehome", ".ssh", "id_rsa"), []byte("secret"), 0o600)
	home, _ := os.UserHomeDir()
	r := &Reader{BaseDir: filepath.Join(dir, "cfg"), Named: []string{"rows.jsonl", "hf://org/ds", "/", home, "", "not a path"}}
	ctx := context.Background()
	for _, ok := range []string{"rows.jsonl", "./rows.jsonl", filepath.Join(dir, "cfg", "rows.jsonl"), "../cfg/rows.jsonl"} {
		if _, err := r.Read(ctx, abi.DatasetRequest{Source: ok}); err != nil {
			t.Errorf("named %q: %v", ok, err)
		}
	}
	for _, tc := range []struct{ source, want string }{
		{"/etc/apt", `dataset "/etc/apt" is not named in the run config: a plugin reads only the datasets [env.config] names (paths relative to the config file's folder, hf://owner/name); to allow this one, name it there, e.g. dataset = "/etc/apt"`},
		{"../fakehome", `dataset "../fakehome" (` + filepath.Join(dir, "fakehome") + `) is not named in the run config`},
		{"hf://org/private", `dataset "hf://org/private" is not named`},
		{"/", `dataset "/" is the file system's root, your home folder or a folder that holds it`},
		{home, `is the file system's root, your home folder or a folder that holds it`},
		{"", `is not named`},
	} {
		_, err := r.Read(ctx, abi.DatasetRequest{Source: tc.source})
		var de *DeniedError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a DeniedError saying %q", tc.source, err, tc.want)
		}
	}
	// The hf:// check comes before anything is fetched.
	if _, err := r.Read(ctx, abi.DatasetRequest{Source: "hf://org/ds@v2"}); err == nil || strings.Contains(err.Error(), "not named") {
		t.Errorf("a named hf:// dataset at another revision: %v", err)
	}
}

// FuzzJSONRows indexes arbitrary bytes as JSONL and as JSON: every row
// indexed lies within the file and is the JSON it claims, never over
// MaxRow.
func FuzzJSONRows(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n"))
	f.Add([]byte("  {\"a\":1}  \r\n\nnot json\n{}"))
	f.Add([]byte(`[{"a":1}, 2, "x"]`))
	f.Add([]byte(`{"meta":{"x":[1,{"y":2}]},"rows":[{"a":1}],"data":[{"b":2}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, index := range []func(io.Reader, string, string, int) (part, error){indexJSONL, indexJSON} {
			p, err := index(bytes.NewReader(data), "f", "f", 100)
			if err != nil {
				continue
			}
			s, ok := p.(*spans)
			if !ok {
				t.Fatalf("%T", p)
			}
			for i := range s.off {
				if s.errs[i] != nil {
					continue
				}
				end := s.off[i] + int64(s.n[i])
				if s.off[i] < 0 || end > int64(len(data)) || !json.Valid(data[s.off[i]:end]) || s.object && data[s.off[i]] != '{' {
					t.Fatalf("row %d at %d+%d is not a row of %q", i, s.off[i], s.n[i], data)
				}
			}
		}
	})
}

// FuzzParquet feeds mutated parquet files to the reader: it must return an
// error, never panic. (Some mutations make the parquet library itself spin
// for a long time; run it with -fuzztime and watch the exec rate.)
func FuzzParquet(f *testing.F) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf)
	w.Write([]row{{"p1", []byte("x"), 1}})
	w.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		pf, err := openParquet(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		p := &pqRows{n: int(min(pf.NumRows(), 16))}
		rd := parquet.NewGenericReader[map[string]any](pf, pf.Schema())
		defer rd.Close()
		func() {
			defer func() { recover() }()
			for i := range p.n {
				p.row(rd, i)
			}
		}()
	})
}

// TestBoundedReads: a line over the cap is refused without being held, and
// a page ends early once it holds MaxPage, at a row boundary.
func TestBoundedReads(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("short\n"+strings.Repeat("x", 100)+"\nlast"), 16)
	if l, n, err := readLine(br, 10); err != nil || string(l) != "short\n" || n != 6 {
		t.Fatalf("first line: %q %d %v", l, n, err)
	}
	if _, n, err := readLine(br, 10); !errors.Is(err, errLineTooLong) || n != 101 {
		t.Fatalf("long line: %d %v", n, err)
	}
	if l, n, err := readLine(br, 10); err != io.EOF || string(l) != "last" || n != 4 {
		t.Fatalf("last line: %q %d %v", l, n, err)
	}

	dir := t.TempDir()
	big := strings.Repeat("y", MaxPage/2)
	var lines strings.Builder
	for i := range 5 {
		fmt.Fprintf(&lines, "{\"i\":%d,\"pad\":%q}\n", i, big)
	}
	os.WriteFile(filepath.Join(dir, "big.jsonl"), []byte(lines.String()), 0o644)
	r := &Reader{BaseDir: dir, Named: []string{"big.jsonl"}}
	seen, off := 0, 0
	for {
		page, err := r.Read(context.Background(), abi.DatasetRequest{Source: "big.jsonl", Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, row := range page.Rows {
			size += len(row)
		}
		if len(page.Rows) == 0 || len(page.Rows) > 1 && size > MaxPage {
			t.Fatalf("page of %d rows, %d bytes", len(page.Rows), size)
		}
		seen += len(page.Rows)
		if page.EOF {
			break
		}
		off = page.Next
	}
	if seen != 5 {
		t.Fatalf("read %d rows, want 5", seen)
	}
}
