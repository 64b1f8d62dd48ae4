package wasm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
)

// module assembles a module from sections (id, body).
func module(secs ...section) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range secs {
		b = append(b, s.id)
		b = append(b, uleb(uint64(len(s.body)))...)
		b = append(b, s.body...)
	}
	return b
}

// vec is a vector of n items already encoded.
func vec(items ...[]byte) []byte {
	b := uleb(uint64(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

// withCode is a module of one function () -> () with body (locals and
// instructions, ending in 0x0b), a funcref table, a memory, a mutable i32
// global, an element and a data segment, exported so that it stays.
func withCode(body []byte) []byte {
	return module(
		section{1, vec([]byte{0x60, 0, 0})},                                                             // type () -> ()
		section{3, vec([]byte{0})},                                                                      // one function of type 0
		section{4, vec([]byte{0x70, 0, 1})},                                                             // table funcref min 1
		section{5, vec([]byte{0, 1})},                                                                   // memory min 1
		section{6, vec([]byte{0x7f, 1, 0x41, 5, 0x0b})},                                                 // global mut i32 = 5
		section{7, vec(append(append(uleb(1), 'f'), 0, 0))},                                             // export "f" func 0
		section{9, vec([]byte{0, 0x41, 0, 0x0b, 1, 0})},                                                 // elem: table 0 at 0: func 0
		section{10, vec(append(uleb(uint64(len(body))), body...))},                                      // code
		section{11, vec([]byte{0, 0x41, 8, 0x0b, 3, 'a', 'b', 'c'}, []byte{0, 0x41, 16, 0x0b, 1, 'd'})}, // data
	)
}

// compiles reports whether wazero accepts the module.
func compiles(t testing.TB, code []byte) error {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	_, err := r.CompileModule(ctx, code)
	return err
}

func TestScanCode(t *testing.T) {
	for name, tc := range map[string]struct {
		body   []byte
		refuse string // part of the reason; "" when instances park
	}{
		"plain": {body: []byte{0, 0x41, 1, 0x1a, 0x0b}},
		"everyday": {body: []byte{1, 1, 0x7f, // one i32 local
			0x02, 0x40, 0x41, 0, 0x0e, 1, 0, 0, 0x0b, // block; br_table
			0x41, 0, 0x28, 2, 4, 0x21, 0, // i32.load offset 4; local.set
			0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 11, 0, // memory.fill
			0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 10, 0, 0, // memory.copy
			0xfd, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0x1a, // v128.const; drop
			0x23, 0, 0x41, 1, 0x6a, 0x24, 0, // global.set
			0x41, 0, 0x25, 0, 0x1a, // table.get
			0xfc, 16, 0, 0x1a, // table.size
			0x0b}},
		"table.set":  {body: []byte{0, 0x41, 0, 0xd0, 0x70, 0x26, 0, 0x0b}, refuse: "writes a table"},
		"table.grow": {body: []byte{0, 0xd0, 0x70, 0x41, 1, 0xfc, 15, 0, 0x1a, 0x0b}, refuse: "writes a table"},
		"table.fill": {body: []byte{0, 0x41, 0, 0xd0, 0x70, 0x41, 1, 0xfc, 17, 0, 0x0b}, refuse: "writes a table"},
		"table.init": {body: []byte{0, 0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 12, 0, 0, 0x0b}, refuse: "writes a table"},
		"data.drop":  {body: []byte{0, 0xfc, 9, 0, 0x0b}, refuse: "drops a segment"},
		"elem.drop":  {body: []byte{0, 0xfc, 13, 0, 0x0b}, refuse: "drops a segment"},
		"unknown":    {body: []byte{0, 0x41, 0, 0x1a, 0xff, 0x0b}, refuse: "unknown instruction"},
		"cut":        {body: []byte{0, 0x41}, refuse: "end"},
	} {
		code := withCode(tc.body)
		_, info, err := prepare(code)
		if name == "unknown" || name == "cut" {
			// Code the host cannot read it cannot make stoppable.
			if err == nil || !strings.Contains(err.Error(), tc.refuse) {
				t.Errorf("%s: prepare says %v, want %q", name, err, tc.refuse)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tc.refuse == "" && info.unparkable != "" || tc.refuse != "" && !strings.Contains(info.unparkable, tc.refuse) {
			t.Errorf("%s: unparkable %q, want %q", name, info.unparkable, tc.refuse)
		}
		// The modules are real: wazero takes the valid ones.
		if err := compiles(t, code); (err == nil) != (name != "unknown" && name != "cut" && name != "data.drop") {
			t.Errorf("%s: wazero says %v", name, err)
		}
	}
}

// prepare merges the data segments and exports the mutable globals; the
// module's memory and behaviour stay as they were.
func TestPrepareRewrites(t *testing.T) {
	code := withCode([]byte{0, 0x0b})
	got, info, err := prepare(code)
	if err != nil || info.unparkable != "" || len(info.globals) != 1 || info.globals[0] != 0 {
		t.Fatalf("info %+v, %v", info, err)
	}
	secs, err := sections(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secs {
		switch s.id {
		case secData:
			r := &reader{b: s.body}
			if n := r.u32(); n != 1 {
				t.Errorf("%d data segments after merging, want 1", n)
			}
		case secExport:
			if !bytes.Contains(s.body, []byte(globalExport+"0")) {
				t.Error("the mutable global is not exported")
			}
		}
	}
	ctx := context.Background()
	mem := func(code []byte) []byte {
		r := wazero.NewRuntime(ctx)
		defer r.Close(ctx)
		m, err := r.Instantiate(ctx, code)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(memBytes(m.Memory()))
	}
	if !bytes.Equal(mem(code), mem(got)) {
		t.Error("the merged data segments give another memory")
	}
}

// A Go plugin's tens of thousands of data segments merge into a few that
// write the same bytes.
func TestPrepareGoPlugin(t *testing.T) {
	code, err := os.ReadFile(wasmtest.Build(t, "./plugins/example"))
	if err != nil {
		t.Fatal(err)
	}
	got, info, err := prepare(code)
	if err != nil || info.unparkable != "" || len(info.globals) == 0 {
		t.Fatalf("info %+v", info)
	}
	// data applies a module's active data segments, in order, to an
	// empty memory, and counts them.
	data := func(code []byte) ([]byte, int) {
		secs, err := sections(code)
		if err != nil {
			t.Fatal(err)
		}
		var mem []byte
		n := 0
		for _, s := range secs {
			if s.id != secData {
				continue
			}
			r := &reader{b: s.body}
			for k := r.u32(); k > 0 && r.err == nil; k-- {
				r.u32()
				r.byte()
				off := int(uint32(r.s32()))
				r.byte()
				b := r.bytes(int(r.u32()))
				if len(mem) < off+len(b) {
					mem = append(mem, make([]byte, off+len(b)-len(mem))...)
				}
				copy(mem[off:], b)
				n++
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
		}
		return mem, n
	}
	before, n := data(code)
	after, m := data(got)
	if m == 0 || m*100 > n {
		t.Errorf("%d data segments merged into %d", n, m)
	}
	if !bytes.Equal(before, after) {
		t.Error("the merged data segments write other bytes")
	}
}

// A module that states more entries than its bytes hold is refused before
// the compiler makes room for them: 18 bytes stating 2^31 data segments
// made wazero ask for 112 GB, and the process died.
func TestLoadRefusesHugeCounts(t *testing.T) {
	r := newRuntime(t, Config{})
	for name, code := range map[string][]byte{
		"data segments": []byte("\x00asm\x01\x00\x00\x00\x0b\x06\x80\x80\x80\x80\x08\x00"),
		"data bytes":    module(section{11, vec([]byte{0, 0x41, 0, 0x0b, 0xff, 0xff, 0xff, 0xff, 0x0f})}),
		"locals":        withCode([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x7f, 0x0b}),
		"type params":   module(section{1, vec([]byte{0x60, 0xff, 0xff, 0xff, 0x7f})}),
		"section size":  []byte("\x00asm\x01\x00\x00\x00\x00\xff\xff\xff\xff\x0f\x01a"),
		"custom name":   module(section{0, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}}),
	} {
		_, err := r.Load(context.Background(), name, code)
		if !errors.Is(err, ErrNotWasm) || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzPrepare: untrusted module bytes never crash the rewrite or the
// compiler behind it, and a module wazero takes is still taken once
// rewritten.
func FuzzPrepare(f *testing.F) {
	f.Add(withCode([]byte{0, 0x0b}))
	f.Add(withCode([]byte{0, 0x41, 0, 0xd0, 0x70, 0x26, 0, 0x0b}))
	f.Add(module(section{11, vec([]byte{0, 0x41, 0x80, 0x80, 0x80, 0x80, 0x08, 0x0b, 1, 1})}))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x0b\x06\x80\x80\x80\x80\x08\x00"))
	f.Fuzz(func(t *testing.T, code []byte) {
		got, _, err := prepare(code)
		if err != nil {
			// The walk of the code knows every instruction wazero does.
			// (A module refused for its counts is not compiled here:
			// wazero would ask for the memory they claim.)
			if strings.HasPrefix(err.Error(), "read the code") && compiles(t, code) == nil {
				t.Fatalf("wazero takes the module, prepare refuses it: %v", err)
			}
			return
		}
		// A loop's two bytes gain a check of at most 49.
		if len(got) > 26*len(code)+64<<10 {
			t.Fatalf("%d bytes became %d", len(code), len(got))
		}
		if compiles(t, code) == nil {
			if err := compiles(t, got); err != nil {
				t.Fatalf("wazero takes the module but not its rewrite: %v", err)
			}
		}
	})
}

// The stop flag prepare adds: code with loops computes what it did, a
// raised flag stops a loop that would never end (here the start section's
// function, which prepare turned into an export the host calls), and a
// flag raised as the call returned on its own is lowered again. On one
// thread, the endless loop lets the Go scheduler in: the timer that
// raises the flag runs, and so does a garbage collection, which stops the
// world.
func TestStopFlag(t *testing.T) {
	count := []byte{1, 1, 0x7f, // a local i32
		0x02, 0x40, 0x03, 0x40, // block, loop
		0x20, 1, 0x20, 0, 0x4f, 0x0d, 1, // local.get 1, local.get 0, i32.ge_u, br_if 1
		0x20, 1, 0x41, 1, 0x6a, 0x21, 1, // local.get 1, i32.const 1, i32.add, local.set 1
		0x0c, 0, 0x0b, 0x0b, // br 0, end, end
		0x20, 1, 0x0b} // local.get 1, end
	forever := []byte{0, 0x03, 0x40, 0x0c, 0, 0x0b, 0x0b} // loop, br 0, end, end
	code := module(
		section{1, vec([]byte{0x60, 0, 0}, []byte{0x60, 1, 0x7f, 1, 0x7f})}, // () -> (), (i32) -> i32
		section{3, vec([]byte{0}, []byte{1})},
		section{5, vec([]byte{0, 1})},
		section{7, vec(append(append(uleb(5), "count"...), 0, 1))},
		section{8, uleb(0)}, // start: function 0, which never returns
		section{10, vec(append(uleb(uint64(len(forever))), forever...), append(uleb(uint64(len(count))), count...))},
	)
	ctx := context.Background()
	mod := instantiatePrepared(t, code)
	call := func(ctx context.Context, name string, args ...uint64) ([]uint64, error) {
		var res []uint64
		err := interruptible(ctx, mod, func() (err error) {
			res, err = mod.ExportedFunction(name).Call(ctx, args...)
			return err
		})
		return res, err
	}
	// Past yieldEvery turns: the checks run, and find the flag down.
	if res, err := call(ctx, "count", 3*yieldEvery); err != nil || res[0] != 3*yieldEvery {
		t.Fatalf("count(%d) = %v, %v", 3*yieldEvery, res, err)
	}
	// Raised while the call ends on its own: lowered, the next call runs.
	s, err := newStopper(mod)
	if err != nil {
		t.Fatal(err)
	}
	s.raise()
	s.end(nil)
	if v := mod.ExportedGlobal(stopExport).Get(); v != 0 {
		t.Fatalf("the flag of a call that ended on its own is %d", v)
	}
	if res, err := call(ctx, "count", 3*yieldEvery); err != nil || res[0] != 3*yieldEvery {
		t.Fatalf("count after a flag raised late = %v, %v", res, err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	ended := make(chan error)
	go func() {
		_, err := call(short, startExport)
		ended <- err
	}()
	runtime.Gosched()
	runtime.GC()
	if err := <-ended; err == nil || short.Err() == nil {
		t.Fatalf("the endless start function returned %v before its deadline", err)
	}
}

// The host's globals come after every global the module imports, even
// beside an import the host refuses; and a memory section with no memory
// gets the check without the pass through memory.grow, which would need
// one.
func TestStopFlagPlace(t *testing.T) {
	loop := []byte{0, 0x03, 0x40, 0x0b, 0x0b}
	code := module(
		section{1, vec([]byte{0x60, 0, 0})},
		section{2, vec(
			append(append(append(uleb(1), 'm'), append(uleb(1), 't')...), 0x01, 0x70, 0x00, 0x01), // table
			append(append(append(uleb(1), 'm'), append(uleb(1), 'g')...), 0x03, 0x7f, 0x00),       // global i32
		)},
		section{3, vec([]byte{0})},
		section{5, vec()},
		section{6, vec([]byte{0x7f, 1, 0x41, 5, 0x0b})},
		section{7, vec(append(append(uleb(1), 'f'), 0, 0))},
		section{10, vec(append(uleb(uint64(len(loop))), loop...))},
	)
	got, _, err := prepare(code)
	if err != nil {
		t.Fatal(err)
	}
	secs, _ := sections(got)
	for _, s := range secs {
		if s.id != secExport {
			continue
		}
		r := &reader{b: s.body}
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			name, kind, idx := string(r.name()), r.byte(), r.u32()
			if name == stopExport && (kind != 0x03 || idx != 2) {
				t.Errorf("%s is export kind %#x index %d, want global 2", stopExport, kind, idx)
			}
		}
	}
	if err := compiles(t, got); err != nil {
		t.Errorf("wazero refuses the rewrite: %v", err)
	}
}

// A loop that fills memory in bulk counts a turn per page it fills: raised
// before the call, the stop flag ends a loop of a hundred 1 MiB fills,
// which makes far fewer than yieldEvery turns of its own. (Filling fresh
// memory costs the kernel's commit of every page: counted by turns alone,
// such a loop ran for seconds between two checks, and a Python hook that
// hoarded memory ran 34 s past a 10 s deadline.)
func TestStopFlagCountsBulkMemory(t *testing.T) {
	fill := []byte{1, 1, 0x7f, // a local i32
		0x02, 0x40, 0x03, 0x40, // block, loop
		0x20, 1, 0x20, 0, 0x4f, 0x0d, 1, // local.get 1, local.get 0, i32.ge_u, br_if 1
		0x41, 0, 0x41, 0, 0x41, 0x80, 0x80, 0xc0, 0, 0xfc, 0x0b, 0, // memory.fill(0, 0, 1 MiB)
		0x41, 0, 0x41, 0x80, 0x80, 0x20, 0x41, 0x80, 0x80, 0x20, 0xfc, 0x0a, 0, 0, // memory.copy(0, 512 KiB, 512 KiB)
		0x20, 1, 0x41, 1, 0x6a, 0x21, 1, // local.get 1, i32.const 1, i32.add, local.set 1
		0x0c, 0, 0x0b, 0x0b, // br 0, end, end
		0x20, 1, 0x0b} // local.get 1, end
	code := module(
		section{1, vec([]byte{0x60, 1, 0x7f, 1, 0x7f})}, // (i32) -> i32
		section{3, vec([]byte{0})},
		section{5, vec([]byte{0, 16})}, // 1 MiB
		section{7, vec(append(append(uleb(4), "fill"...), 0, 0))},
		section{10, vec(append(uleb(uint64(len(fill))), fill...))},
	)
	ctx := context.Background()
	mod := instantiatePrepared(t, code)
	f := mod.ExportedFunction("fill")
	// The flag down: the checks pass, the fills all happen.
	if res, err := f.Call(ctx, 100); err != nil || res[0] != 100 {
		t.Fatalf("fill(100) = %v, %v", res, err)
	}
	s, err := newStopper(mod)
	if err != nil {
		t.Fatal(err)
	}
	s.raise()
	if res, err := f.Call(ctx, 100); err == nil {
		t.Fatalf("fill(100) with the flag raised ran to its end (%v): its fills were not counted", res)
	}
}

// instantiatePrepared prepares code and instantiates it, without running
// its start functions, on a runtime closed when the test ends.
func instantiatePrepared(t *testing.T, code []byte) api.Module {
	t.Helper()
	got, _, err := prepare(code)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	mod, err := r.InstantiateWithConfig(ctx, got, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	return mod
}
