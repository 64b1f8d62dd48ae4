package wasm

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// loadStateful loads the stateful test plugin with a file of its own.
func loadStateful(t testing.TB) *Plugin {
	t.Helper()
	mod, err := os.ReadFile(wasmtest.Build(t, "./host/plugin/wasm/testdata/stateful"))
	if err != nil {
		t.Fatal(err)
	}
	files := storedZip(t, map[string]string{"a.txt": "kept open"}, zip.Store)
	p, err := newRuntime(t, Config{}).Load(context.Background(), "stateful", withSection(mod, abi.FilesSection, files))
	if err != nil {
		t.Fatal(err)
	}
	if p.base == nil {
		t.Fatalf("instances of the stateful plugin cannot be parked: %s", p.info.unparkable)
	}
	return p
}

func call(t testing.TB, inst *Instance, hook string) string {
	t.Helper()
	out, err := inst.CallRaw(context.Background(), hook, []byte("{}"))
	if err != nil {
		t.Fatalf("%s: %v", hook, err)
	}
	return string(out)
}

// A parked instance answers as one never parked: the same memory, globals,
// goroutines, grown memory and random stream, across a park between every
// call.
func TestParkIsInvisible(t *testing.T) {
	ctx := context.Background()
	p := loadStateful(t)
	parked, err := p.Instantiate(ctx, InstanceConfig{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer parked.Close(ctx)
	whole, err := p.Instantiate(ctx, InstanceConfig{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close(ctx)
	var last string
	for i := range 8 {
		if !parked.Park(ctx) || !parked.Parked() {
			t.Fatalf("step %d: not parked", i)
		}
		got, want := call(t, parked, "step"), call(t, whole, "step")
		if got != want {
			t.Fatalf("step %d: the parked instance answered\n%s\nthe whole one\n%s", i, got, want)
		}
		if got == last {
			t.Fatalf("step %d: the same answer twice: %s", i, got)
		}
		last = got
	}
	var st struct{ Steps int }
	if err := json.Unmarshal([]byte(last), &st); err != nil || st.Steps != 8 {
		t.Fatalf("last answer %s: %v", last, err)
	}
}

// An instance that holds one of its files open stays whole: the file's
// offset lives in the host.
func TestParkKeepsOpenFiles(t *testing.T) {
	ctx := context.Background()
	p := loadStateful(t)
	inst, err := p.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if got := call(t, inst, "open"); got != `"opened"` {
		t.Fatal(got)
	}
	if inst.Park(ctx) {
		t.Fatal("parked with a file open")
	}
	if got := call(t, inst, "read"); got != `"kept open"` {
		t.Fatal(got)
	}
	if !inst.Park(ctx) {
		t.Fatal("not parked once the file was closed")
	}
	if got := call(t, inst, "open"); got != `"opened"` {
		t.Fatal(got)
	}
}

// A parked instance closes like a whole one; a closed one does not park.
func TestParkedClose(t *testing.T) {
	ctx := context.Background()
	p := loadStateful(t)
	inst, err := p.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	call(t, inst, "step")
	if !inst.Park(ctx) {
		t.Fatal("not parked")
	}
	if err := inst.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if inst.Park(ctx) {
		t.Fatal("a closed instance parked")
	}
	if _, err := inst.CallRaw(ctx, "step", []byte("{}")); err == nil {
		t.Fatal("a closed instance answered")
	}
}

func TestDiffRuns(t *testing.T) {
	base := bytes.Repeat([]byte{1, 2, 3, 4}, 100)
	for name, edit := range map[string]func(b []byte) []byte{
		"same":         func(b []byte) []byte { return b },
		"one byte":     func(b []byte) []byte { b[77] = 9; return b },
		"near bytes":   func(b []byte) []byte { b[3] = 0; b[3+imageGap] = 0; return b },
		"far bytes":    func(b []byte) []byte { b[0] = 0; b[399] = 0; return b },
		"longer":       func(b []byte) []byte { return append(b, make([]byte, 300)...) },
		"longer dirty": func(b []byte) []byte { b = append(b, make([]byte, 300)...); b[650] = 5; return b },
	} {
		cur := edit(bytes.Clone(base))
		runs := diffRuns(base, cur)
		got := make([]byte, len(cur))
		copy(got, base)
		for _, r := range runs {
			copy(got[r.off:], r.data)
		}
		if !bytes.Equal(got, cur) {
			t.Errorf("%s: base and runs do not give the memory back", name)
		}
		if name == "same" && len(runs) != 0 || name == "far bytes" && len(runs) != 2 || name == "near bytes" && len(runs) != 1 {
			t.Errorf("%s: %d runs", name, len(runs))
		}
	}
}

// pressedStateful loads the stateful plugin, without files, on a runtime
// of its own made with cfg.
func pressedStateful(t *testing.T, cfg Config) (*Runtime, *Plugin) {
	t.Helper()
	mod, err := os.ReadFile(wasmtest.Build(t, "./host/plugin/wasm/testdata/stateful"))
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, cfg)
	p, err := r.Load(context.Background(), "stateful", mod)
	if err != nil {
		t.Fatal(err)
	}
	return r, p
}

// wantSteps is what n calls of step answer on an instance never parked.
func wantSteps(t *testing.T, seed uint64, n int) []string {
	t.Helper()
	ctx := context.Background()
	whole, err := loadStateful(t).Instantiate(ctx, InstanceConfig{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close(ctx)
	var want []string
	for range n {
		want = append(want, call(t, whole, "step"))
	}
	return want
}

// When more instances are whole than the runtime keeps, one is parked as
// soon as its call returns, and still answers as a whole one.
func TestParkUnderPressure(t *testing.T) {
	ctx := context.Background()
	r, pressed := pressedStateful(t, Config{ResidentInstances: 2})
	want := wantSteps(t, 3, 4)
	insts := make([]*Instance, 5)
	for k := range insts {
		var err error
		if insts[k], err = pressed.Instantiate(ctx, InstanceConfig{Seed: 3}); err != nil {
			t.Fatal(err)
		}
		defer insts[k].Close(ctx)
	}
	for step := range want {
		for k, inst := range insts {
			if got := call(t, inst, "step"); got != want[step] {
				t.Fatalf("instance %d, step %d: %s, want %s", k, step, got, want[step])
			}
		}
		if n := r.whole.Load(); n > 2 {
			t.Errorf("step %d: %d instances whole, the runtime keeps 2", step, n)
		}
	}
}

// A burst of rollouts starting at once keeps at most the resident
// instances and those being started whole, and every instance answers as
// a fresh one.
func TestParkBurst(t *testing.T) {
	ctx := context.Background()
	r, p := pressedStateful(t, Config{ResidentInstances: 2, StartingInstances: 1})
	want := wantSteps(t, 5, 1)[0]
	const n = 60
	insts := make([]*Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range insts {
		wg.Go(func() { insts[k], errs[k] = p.Instantiate(ctx, InstanceConfig{Seed: 5}) })
	}
	wg.Wait()
	for k, inst := range insts {
		if errs[k] != nil {
			t.Fatal(errs[k])
		}
		defer inst.Close(ctx)
	}
	if n := r.peak.Load(); n > 3 {
		t.Errorf("%d instances whole at once, want at most 3 (2 resident, 1 starting)", n)
	}
	for k, inst := range insts {
		if got := call(t, inst, "step"); got != want {
			t.Fatalf("instance %d: %s, want %s", k, got, want)
		}
	}
}
