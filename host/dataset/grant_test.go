package dataset

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestLinksStayInTheGrant: every file is read under the folder the config
// names. A link inside it that leads out (to a host file, to /dev/zero) is
// that row's error and the host file's rows never come back; a link that
// stays inside is read; a named file that is a link out of its own folder
// is refused the same way. Task folders store links as links.
func TestLinksStayInTheGrant(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	ds := filepath.Join(dir, "cfg", "ds")
	os.MkdirAll(outside, 0o755)
	os.MkdirAll(filepath.Join(ds, "sub"), 0o755)
	os.WriteFile(filepath.Join(outside, "secret.jsonl"), []byte(`{"secret":"HOST-ROWS"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(ds, "a.jsonl"), []byte(`{"task":"a"}`+"\n"), 0o644)
	os.Symlink(filepath.Join(outside, "secret.jsonl"), filepath.Join(ds, "b-abs.jsonl"))
	os.Symlink("../../outside/secret.jsonl", filepath.Join(ds, "c-rel.jsonl"))
	os.Symlink("../a.jsonl", filepath.Join(ds, "sub", "d-inside.jsonl"))
	os.Symlink("/dev/zero", filepath.Join(ds, "e-zero.jsonl"))
	os.Symlink(filepath.Join(outside, "secret.jsonl"), filepath.Join(dir, "cfg", "named-link.jsonl"))

	r := &Reader{BaseDir: filepath.Join(dir, "cfg"), Named: []string{"ds", "named-link.jsonl"}}
	rows, errs := readAll(t, r, "ds")
	if len(rows) != 5 || string(rows[0]) != `{"task":"a"}` || string(rows[4]) != `{"task":"a"}` {
		t.Fatalf("rows %q, errors %v", rows, errs)
	}
	for i, name := range map[int]string{1: "ds/b-abs.jsonl", 2: "ds/c-rel.jsonl", 3: "ds/e-zero.jsonl"} {
		if want := "dataset " + name + ": a link that leads out of the folder the run config names"; !strings.HasPrefix(errs[i], want) {
			t.Errorf("row %d: %q, want %q", i, errs[i], want)
		}
	}
	_, errs = readAll(t, r, "named-link.jsonl")
	if !strings.Contains(errs[0], "a link that leads out of the folder") {
		t.Errorf("a named link out of its folder: %v", errs)
	}
	for _, e := range errs {
		if strings.Contains(e, "HOST-ROWS") {
			t.Fatal("a host file's row came back")
		}
	}

	// Task folders: a link in one is stored as a link; a task folder that
	// is a link is not listed.
	tasks := filepath.Join(dir, "tasks")
	os.MkdirAll(filepath.Join(tasks, "t1"), 0o755)
	os.Symlink(filepath.Join(outside, "secret.jsonl"), filepath.Join(tasks, "t1", "task.toml"))
	os.Symlink(outside, filepath.Join(tasks, "t2"))
	rows, errs = readAll(t, &Reader{BaseDir: dir, Named: []string{"tasks"}}, "tasks")
	// The row's name, not a search of its bytes: its base64 tar holds
	// "t2" now and then.
	var task struct{ Name string }
	if len(rows) == 1 {
		json.Unmarshal(rows[0], &task)
	}
	if len(rows) != 1 || len(errs) != 0 || task.Name != "t1" {
		t.Fatalf("task folders: %d rows %s %v", len(rows), rows, errs)
	}
}

// TestSpecialFiles: a FIFO or a device where a data file should be is
// that row's error at once; nothing waits on it.
func TestSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.jsonl"), 0o644); err != nil {
		t.Skip(err)
	}
	os.WriteFile(filepath.Join(dir, "ok.jsonl"), []byte("{}\n"), 0o644)
	rows, errs := readAll(t, &Reader{BaseDir: dir, Named: []string{".", "fifo.jsonl", "/dev/zero"}}, ".")
	if len(rows) != 2 || !strings.Contains(errs[0], "dataset fifo.jsonl: not a regular file") || string(rows[1]) != "{}" {
		t.Fatalf("rows %q errors %v", rows, errs)
	}
	_, errs = readAll(t, &Reader{BaseDir: dir, Named: []string{"fifo.jsonl"}}, "fifo.jsonl")
	if !strings.Contains(errs[0], "not a regular file") {
		t.Errorf("a named FIFO: %v", errs)
	}
	_, errs = readAll(t, &Reader{BaseDir: dir, Named: []string{"/dev/zero"}}, "/dev/zero")
	if !strings.Contains(errs[0], "not a regular file") {
		t.Errorf("/dev/zero: %v", errs)
	}
}

// TestBadRowsFailAlone: a malformed line, a line over MaxRow and a JSON
// element over MaxRow are each their row's error, naming the file and the
// line or row; the other rows are served. What the host holds meanwhile
// is a row, never the file.
func TestBadRowsFailAlone(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	for i := 1; i <= 8; i++ {
		switch i {
		case 3:
			b.WriteString(`{"broken": ` + "\n")
		case 5:
			fmt.Fprintf(&b, "{\"big\":%q}\n", strings.Repeat("x", MaxRow))
		default:
			fmt.Fprintf(&b, "{\"i\":%d}\n", i)
		}
	}
	os.WriteFile(filepath.Join(dir, "rows.jsonl"), b.Bytes(), 0o644)
	rows, errs := readAll(t, &Reader{BaseDir: dir, Named: []string{"rows.jsonl"}}, "rows.jsonl")
	if len(rows) != 8 || string(rows[7]) != `{"i":8}` {
		t.Fatalf("%d rows, errors %v", len(rows), errs)
	}
	if errs[2] != "dataset rows.jsonl: line 3 is not a JSON object (is the file truncated, or not JSONL?)" ||
		errs[4] != "dataset rows.jsonl: line 5 is over 32 MiB, the most a row may be" || len(errs) != 2 {
		t.Errorf("errors %v", errs)
	}

	b.Reset()
	fmt.Fprintf(&b, `{"meta": %q, "rows": [{"i":1}, {"big":%q}, {"i":3}]}`, strings.Repeat("m", 1<<20), strings.Repeat("x", MaxRow+2<<20))
	os.WriteFile(filepath.Join(dir, "rows.json"), b.Bytes(), 0o644)
	rows, errs = readAll(t, &Reader{BaseDir: dir, Named: []string{"rows.json"}}, "rows.json")
	if len(rows) != 2 || string(rows[0]) != `{"i":1}` || !strings.HasPrefix(errs[1], "dataset rows.json: row 2 and the rows after it cannot be read: it is over 32 MiB") {
		t.Errorf("rows %q errors %v", rows, errs)
	}
}

// TestManyTinyRows: a dataset holds at most MaxRows rows; the rest are one
// row's error.
func TestManyTinyRows(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tiny.jsonl"), bytes.Repeat([]byte("{}\n"), MaxRows+10), 0o644)
	r := &Reader{BaseDir: dir, Named: []string{"tiny.jsonl"}}
	page, err := r.Read(context.Background(), abi.DatasetRequest{Source: "tiny.jsonl", Offset: MaxRows - 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != 2 || !page.EOF || len(page.Errors) != 1 || page.Errors[0].Row != MaxRows ||
		!strings.Contains(page.Errors[0].Error, "line 2000001 and the lines after it are not read: a dataset holds at most 2000000 rows") {
		t.Fatalf("%d rows, eof %v, errors %+v", len(page.Rows), page.EOF, page.Errors)
	}
}

// TestParquetFooterIsChecked: a parquet file whose last bytes claim 4 GiB
// of metadata is refused before anything is allocated for it.
func TestParquetFooterIsChecked(t *testing.T) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf)
	w.Write([]row{{"p1", nil, 1}})
	w.Close()
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[len(b)-8:], 0xffffffff)
	if _, err := openParquet(bytes.NewReader(b), int64(len(b))); err == nil || !strings.Contains(err.Error(), "its metadata says it is 4294967295 bytes") {
		t.Fatalf("got %v", err)
	}
}
