package rundir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sdk/abi"
)

func rec(task string, attempt int) Record {
	return Record{RolloutID: fmt.Sprintf("%s#%d", task, attempt), TaskID: task, Attempt: attempt, Outcome: OutcomePassed,
		Reward: 1, StartedAt: time.Unix(0, 0).UTC(), FinishedAt: time.Unix(1, 0).UTC(), Phases: map[string]float64{"agent": 1}}
}

func TestAppendReopenAndDuplicates(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Append(rec("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append(rec("t", 1)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate: want ErrDuplicate, got %v", err)
	}
	s.Close()
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Records()) != 3 || !s.Done("t", 2) || s.Done("t", 3) {
		t.Fatalf("reopened store: %d records", len(s.Records()))
	}
}

func TestTornLastLineIsCut(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	s.Append(rec("a", 0))
	s.Close()
	path := filepath.Join(dir, ResultsFile)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"rollout_id":"b#0","task_id":"b","att`) // killed mid-write
	f.Close()

	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Records()) != 1 || s.Done("b", 0) {
		t.Fatalf("torn line not dropped: %+v", s.Records())
	}
	if err := s.Append(rec("b", 0)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], `{"rollout_id":"b#0"`) {
		t.Fatalf("file after resume:\n%s", b)
	}
}

func TestCorruptMiddleLineIsAnError(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ResultsFile), []byte("{\"task_id\":\"a\"}\nnot json\n{\"task_id\":\"b\"}\n"), 0o644)
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want an error naming line 2, got %v", err)
	}
}

func FuzzOpen(f *testing.F) {
	f.Add([]byte("{\"task_id\":\"a\",\"attempt\":0}\n{\"task_id\":\"b\""))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, ResultsFile), data, 0o644)
		s, err := Open(dir)
		if err != nil {
			return
		}
		n := len(s.Records())
		if err := s.Append(rec("fuzz-new-task", 0)); err != nil && !errors.Is(err, ErrDuplicate) {
			t.Fatal(err)
		}
		s.Close()
		s2, err := Open(dir)
		if err != nil {
			t.Fatalf("reopen after append: %v", err)
		}
		if len(s2.Records()) < n {
			t.Fatalf("lost records: %d then %d", n, len(s2.Records()))
		}
		s2.Close()
	})
}

// BenchmarkOpen10k measures a resume's start: reading a 10,000-line
// results.jsonl and building its index.
func BenchmarkOpen10k(b *testing.B) {
	dir := b.TempDir()
	s, _ := Open(dir)
	for i := range 10000 {
		r := rec(fmt.Sprintf("task-%05d", i/5), i%5)
		r.Tests = []abi.TestResult{{Name: "test_one", Status: "passed"}, {Name: "test_two", Status: "failed"}}
		r.Error = strings.Repeat("e", 100)
		b, _ := jsonLine(r)
		s.f.WriteAt(b, s.size)
		s.size += int64(len(b))
	}
	s.Close()
	b.ResetTimer()
	for b.Loop() {
		s, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if len(s.Records()) != 10000 {
			b.Fatal(len(s.Records()))
		}
		s.Close()
	}
}

func TestReadLeavesALineBeingWrittenAlone(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	s.Append(rec("a", 0))
	s.Close()
	path := filepath.Join(dir, ResultsFile)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"rollout_id":"b#0","task_id":"b","att`) // still being written
	f.Close()
	before, _ := os.Stat(path)

	recs, err := Read(dir)
	if err != nil || len(recs) != 1 || recs[0].TaskID != "a" {
		t.Fatalf("Read = %+v, %v", recs, err)
	}
	if after, _ := os.Stat(path); after.Size() != before.Size() {
		t.Fatalf("Read changed the file: %d -> %d bytes", before.Size(), after.Size())
	}
	if _, err := Read(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read of an empty directory: want ErrNotExist, got %v", err)
	}
}

// TestWriteFileAtomicMode: files written whole (manifest, summary,
// transcripts, reports) are readable by others, like results.jsonl.
func TestWriteFileAtomicMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "manifest.json")
	if err := WriteFileAtomic(p, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644 (%v)", fi.Mode().Perm(), err)
	}
}

// TestAtomicFile: nothing is at the path until Commit, which puts the whole
// file there readable by others; Abort leaves the folder as it was.
func TestAtomicFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "groups.jsonl")
	f, err := CreateAtomic(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort() // after Commit it does nothing
	for _, line := range []string{"a\n", "b\n"} {
		if _, err := f.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("before Commit: want no file, got %v", err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "a\nb\n" {
		t.Fatalf("committed file: %q, %v", b, err)
	}
	if fi, err := os.Stat(p); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", fi.Mode().Perm())
	}
	if _, err := f.Write([]byte("c\n")); err == nil {
		t.Fatal("Write after Commit: want an error")
	}
	if err := f.Commit(); err == nil {
		t.Fatal("second Commit: want an error")
	}

	g, err := CreateAtomic(filepath.Join(dir, "sft.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	g.Abort()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != "groups.jsonl" {
		t.Fatalf("after Abort the folder holds %v, want only groups.jsonl", names)
	}
}
