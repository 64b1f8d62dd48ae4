package wasm

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestMemoryImage: a plugin that carries a memory image starts every
// instance in the state the image holds, and the compiled code is shared
// with the plugin without it.
func TestMemoryImage(t *testing.T) {
	ctx := context.Background()
	mod, err := os.ReadFile(wasmtest.Build(t, "./host/plugin/wasm/testdata/files"))
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, Config{})
	p, err := r.Load(ctx, "counter", mod)
	if err != nil {
		t.Fatal(err)
	}
	image, err := p.Snapshot(ctx, "count")
	if err != nil {
		t.Fatal(err)
	}
	primed, err := r.Load(ctx, "primed", withSection(mod, abi.MemorySection, image))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		inst, err := primed.Instantiate(ctx, InstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := inst.CallRaw(ctx, "count", []byte("{}"))
		inst.Close(ctx)
		if err != nil || string(got) != "2" {
			t.Fatalf("the first call on an instance of the image counted %s (%v); want 2", got, err)
		}
	}
	plain, _ := p.Instantiate(ctx, InstanceConfig{})
	defer plain.Close(ctx)
	if got, _ := plain.CallRaw(ctx, "count", []byte("{}")); string(got) != "1" {
		t.Errorf("the plugin without the image counted %s", got)
	}

	// An image larger than the memory cap refuses the plugin at load.
	small := newRuntime(t, Config{MemoryLimitMiB: 1})
	if _, err := small.Load(ctx, "big", withSection(mod, abi.MemorySection, rawImage(64, nil))); !errors.Is(err, ErrNotWasm) || !strings.Contains(err.Error(), "needs 4 MiB of memory, over the cap of 1 MiB") {
		t.Errorf("an image over the cap: %v", err)
	}
}

// TestSnapshotSameBytes: the same plugin gives the same image, also when
// its start and its initialization read the clock. Before, snapshots ran
// on the real clocks: the time an initialization kept landed in the image
// (a Python plugin built twice differed on a loaded machine, where two
// fresh instances read times that shared a byte the primed one did not),
// and a new instance started from a clock reading of the build.
func TestSnapshotSameBytes(t *testing.T) {
	ctx := context.Background()
	mod, err := os.ReadFile(wasmtest.Build(t, "./host/plugin/wasm/testdata/files"))
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, Config{})
	p, err := r.Load(ctx, "stamp", mod)
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Snapshot(ctx, "stamp")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := p.Snapshot(ctx, "stamp")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatal("two snapshots of the same plugin differ")
		}
	}
	// An instance of the image reads the host's clock, not the build's.
	primed, err := r.Load(ctx, "primed", withSection(mod, abi.MemorySection, first))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := primed.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	got, err := inst.CallRaw(ctx, "now", []byte("{}"))
	host := time.Now().UnixNano()
	var ns int64
	if err != nil || json.Unmarshal(got, &ns) != nil || ns < host-int64(time.Hour) || ns > host+int64(time.Hour) {
		t.Errorf("an instance of the image reads the time %s (%v); the host's is %d", got, err, host)
	}
}

// rawImage encodes an image of pages with the given runs.
func rawImage(pages uint32, runs []memRun) []byte {
	var raw bytes.Buffer
	binary.Write(&raw, binary.LittleEndian, pages)
	binary.Write(&raw, binary.LittleEndian, uint32(len(runs)))
	for _, r := range runs {
		binary.Write(&raw, binary.LittleEndian, r.off)
		binary.Write(&raw, binary.LittleEndian, uint32(len(r.data)))
		raw.Write(r.data)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw.Bytes())
	zw.Close()
	return buf.Bytes()
}

func TestParseImage(t *testing.T) {
	base := make([]byte, 2*pageSize)
	base[70000] = 9 // zeroed since
	base[500] = 5   // set by each instance's start
	other := bytes.Clone(base)
	other[500] = 6
	cur := make([]byte, 3*pageSize)
	copy(cur, base)
	cur[10], cur[pageSize+300], cur[2*pageSize+5], cur[70000] = 1, 2, 3, 0
	cur[480], cur[500], cur[520] = 7, 8, 9
	img, err := parseImage(encodeImage(base, other, cur), 16)
	if err != nil {
		t.Fatal(err)
	}
	// A new instance sets byte 500 its own way; the image keeps it.
	fresh := bytes.Clone(base)
	fresh[500] = 42
	got := append(fresh, make([]byte, pageSize)...)
	for _, r := range img.runs {
		copy(got[r.off:], r.data)
	}
	want := bytes.Clone(cur)
	want[500] = 42
	if img.pages != 3 || !bytes.Equal(got, want) {
		t.Errorf("decoded image: %d pages, equal %v", img.pages, bytes.Equal(got, want))
	}
	for name, section := range map[string][]byte{
		"not gzip":    []byte("image"),
		"overlapping": rawImage(1, []memRun{{off: 10, data: []byte("ab")}, {off: 11, data: []byte("c")}}),
		"outside":     rawImage(1, []memRun{{off: pageSize - 1, data: []byte("ab")}}),
		"truncated":   rawImage(1, []memRun{{off: 0, data: []byte("ab")}})[:20],
	} {
		if _, err := parseImage(section, 16); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseImage(f *testing.F) {
	f.Add(rawImage(1, []memRun{{off: 3, data: []byte("abc")}}))
	f.Add(encodeImage(make([]byte, pageSize), make([]byte, pageSize), append(make([]byte, pageSize-1), 7)))
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := parseImage(b, 4)
		if err != nil {
			return
		}
		end := uint64(0)
		for _, r := range img.runs {
			if uint64(r.off) < end || uint64(r.off)+uint64(len(r.data)) > uint64(img.pages)*pageSize {
				t.Fatalf("run at %d of %d bytes in %d pages", r.off, len(r.data), img.pages)
			}
			end = uint64(r.off) + uint64(len(r.data))
		}
	})
}
