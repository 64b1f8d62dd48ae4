package serve

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
)

// FuzzIndex: whatever serve.jsonl holds (a torn tail, garbage, lines of
// another shape), opening it never panics, keeps only whole lines before
// the first bad one, and leaves the file ending where they end, so what
// is appended next is a line of its own.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(`{"task_id":"a","epoch":0,"state":"sent","group_size":2,"post":1,"scored_at":"2026-01-01T00:00:00Z"}` + "\n"))
	f.Add([]byte(`{"task_id":"a","epoch":0,"state":"sending","group_size":2}` + "\n" + `{"task_id":"a","ep`))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"task_id":"b","epoch":-1,"post":-5}` + "\nnot json\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, rundir.ServeIndexFile)
		os.WriteFile(path, b, 0o644)
		x, err := openIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := len(x.last)
		if err := x.append(entry{TaskID: "z", Epoch: 1, State: stateSent}); err != nil {
			t.Fatal(err)
		}
		x.close()
		y, err := openIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer y.close()
		if e, ok := y.last[key{"z", 1}]; !ok || e.State != stateSent || len(y.last) > n+1 {
			t.Fatalf("after an append: %d groups (was %d), z@1 %+v", len(y.last), n, e)
		}
	})
}

// FuzzEnvLog: whatever serve-envs.jsonl holds, opening it never panics,
// and a registration appended after it is read back as the newest, with
// a number of its own.
func FuzzEnvLog(f *testing.F) {
	f.Add([]byte(`{"reg":1,"state":"registered","api":"http://x","env_id":0,"name":"rl_0","step":0,"at":"2026-01-01T00:00:00Z"}` + "\n"))
	f.Add([]byte(`{"reg":1,"state":"registered","env_id":0}` + "\n" + `{"reg":1,"sta`))
	f.Add([]byte(`{"reg":-3}` + "\n\n"))
	f.Add([]byte(`{"reg":9223372036854775807,"state":"registered"}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, rundir.ServeEnvsFile), b, 0o644)
		l, err := openEnvLog(dir)
		if err != nil {
			t.Fatal(err)
		}
		e, err := l.add(envLine{State: envRegistered, API: "http://x", EnvID: 7})
		l.close()
		if err != nil || e.Reg <= 0 {
			t.Fatalf("append: %+v %v", e, err)
		}
		m, err := openEnvLog(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.close()
		if got := m.last[e.Reg]; got.EnvID != 7 || got.State != envRegistered || m.regs != e.Reg {
			t.Fatalf("after an append: reg %d is %+v, %d registrations", e.Reg, got, m.regs)
		}
	})
}
