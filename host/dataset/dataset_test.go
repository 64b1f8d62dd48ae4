package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf)
	w.Write([]row{{"p1", nil, 1}})
	w.Close()
	os.WriteFile(filepath.Join(dir, "cut.parquet"), buf.Bytes()[:buf.Len()/2], 0o644)
	os.WriteFile(filepath.Join(dir, "lies.parquet"), []byte(`{"task_name":"x"}`), 0o644)
	os.WriteFile(filepath.Join(dir, "cut.jsonl"), []byte("{\"a\":1}\n{\"a\":"), 0o644)
	for _, f := range []string{"cut.parquet", "lies.parquet", "cut.jsonl"} {
		_, err := ReadFile(filepath.Join(dir, f))
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("%s: want an error naming the file, got %v", f, err)
		}
	}
}

func TestTaskFolders(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "t1", "tests"), 0o755)
	os.WriteFile(filepath.Join(dir, "t1", "task.toml"), []byte("x=1"), 0o644)
	rows, err := ReadPath(dir, "")
	if err != nil || len(rows) != 1 {
		t.Fatalf("%v %d", err, len(rows))
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

func FuzzJSONRows(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n"))
	f.Add([]byte(`[{"a":1}]`))
	f.Add([]byte(`{"rows":[{"a":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if rows, err := decodeJSONL(bytes.NewReader(data)); err == nil {
			for _, r := range rows {
				if !json.Valid(r) {
					t.Fatalf("invalid row %q", r)
				}
			}
		}
		decodeJSON(bytes.NewReader(data))
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
		decodeParquet(bytes.NewReader(data), int64(len(data)))
	})
}

// TestBoundedReads: a line over the cap is refused without being held, and
// a page ends early once it holds MaxPage, at a row boundary.
func TestBoundedReads(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("short\n"+strings.Repeat("x", 100)+"\nlast"), 16)
	if l, err := readLine(br, 10); err != nil || string(l) != "short\n" {
		t.Fatalf("first line: %q %v", l, err)
	}
	if _, err := readLine(br, 10); !errors.Is(err, errLineTooLong) {
		t.Fatalf("long line: %v", err)
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
