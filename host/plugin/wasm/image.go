package wasm

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/tetratelabs/wazero/api"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// memImage is a plugin's memory image (abi.MemorySection): the linear
// memory of an instance that ran its initialization, as the runs of bytes
// that differ from a fresh instance's. Writing it over a fresh instance
// gives that initialized state without running the initialization again.
type memImage struct {
	pages uint32 // memory size, in 64 KiB pages
	runs  []memRun
}

type memRun struct {
	off  uint32
	data []byte
}

const pageSize = 65536

// imageGap is the longest stretch of unchanged bytes a run spans rather
// than start another (each run costs 8 bytes of header).
const imageGap = 32

// parseImage reads a memory image section: gzip of the little-endian u32
// page count, u32 run count, then each run's u32 offset, u32 length and
// bytes, in increasing offsets that do not overlap and lie within the pages.
// An image over maxPages is refused.
func parseImage(section []byte, maxPages uint32) (*memImage, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s section: %s", abi.MemorySection, fmt.Sprintf(format, args...))
	}
	zr, err := gzip.NewReader(bytes.NewReader(section))
	if err != nil {
		return nil, fail("%v", err)
	}
	// Nothing can be larger than the whole memory plus the run headers.
	limit := int64(maxPages)*pageSize*2 + 16
	r := io.LimitReader(zr, limit)
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fail("%v", err)
	}
	img := &memImage{pages: binary.LittleEndian.Uint32(head[:4])}
	n := binary.LittleEndian.Uint32(head[4:])
	if img.pages > maxPages {
		return nil, fail("needs %d MiB of memory, over the cap of %d MiB: raise [env] memory_mb", img.pages/16, maxPages/16)
	}
	end := uint64(0)
	size := uint64(img.pages) * pageSize
	for i := uint32(0); i < n; i++ {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return nil, fail("run %d: %v", i, err)
		}
		off, ln := binary.LittleEndian.Uint32(head[:4]), binary.LittleEndian.Uint32(head[4:])
		if uint64(off) < end || uint64(off)+uint64(ln) > size {
			return nil, fail("run %d at %d (%d bytes) overlaps another or lies outside %d pages", i, off, ln, img.pages)
		}
		data := make([]byte, ln)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, fail("run %d: %v", i, err)
		}
		end = uint64(off) + uint64(ln)
		img.runs = append(img.runs, memRun{off: off, data: data})
	}
	if extra, _ := io.Copy(io.Discard, io.LimitReader(r, 1)); extra != 0 {
		return nil, fail("bytes after the last run")
	}
	return img, nil
}

// apply writes the image over a fresh instance's memory.
func (img *memImage) apply(mem api.Memory) error {
	if mem == nil {
		return errors.New("the module has no memory to restore")
	}
	if have := mem.Size() / pageSize; have < img.pages {
		if _, ok := mem.Grow(img.pages - have); !ok {
			return fmt.Errorf("grow memory to %d MiB for the image: over the cap", img.pages/16)
		}
	}
	for _, run := range img.runs {
		if !mem.Write(run.off, run.data) {
			return fmt.Errorf("image run at %d out of range", run.off)
		}
	}
	return nil
}

// encodeImage is the image section that turns a fresh instance's memory
// into cur. base and other are the memories of two fresh instances: a byte
// they differ in was set by the instance's own start (a clock reading, a
// random seed) and is left as each new instance sets it.
func encodeImage(base, other, cur []byte) []byte {
	fresh := func(i int) byte {
		if i < len(base) {
			return base[i]
		}
		return 0
	}
	volatile := func(i int) bool { return i < len(base) && (i >= len(other) || base[i] != other[i]) }
	var runs []memRun
	start, last := -1, -1 // the open run, and its last byte that must be written
	flush := func() {
		if start >= 0 {
			runs = append(runs, memRun{off: uint32(start), data: cur[start : last+1]})
		}
		start, last = -1, -1
	}
	for i := range cur {
		switch {
		case volatile(i):
			flush()
		case cur[i] != fresh(i):
			if start < 0 {
				start = i
			}
			last = i
		case start >= 0 && i-last > imageGap:
			flush()
		}
	}
	flush()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	var head [8]byte
	binary.LittleEndian.PutUint32(head[:4], uint32(len(cur)/pageSize))
	binary.LittleEndian.PutUint32(head[4:], uint32(len(runs)))
	zw.Write(head[:])
	for _, run := range runs {
		binary.LittleEndian.PutUint32(head[:4], run.off)
		binary.LittleEndian.PutUint32(head[4:], uint32(len(run.data)))
		zw.Write(head[:])
		zw.Write(run.data)
	}
	zw.Close()
	return buf.Bytes()
}

// Snapshot runs the hook prime on a fresh instance (with no host
// operations, seed 0) and returns the memory image of the state it leaves:
// the payload of an abi.MemorySection, so that a plugin which carries it
// starts every instance in that state. A plugin's build uses it to do its
// initialization once (the Python runtime starts the interpreter and
// imports the plugin), not once per rollout. The plugin must leave nothing
// but its memory changed: no open files, the stack unwound.
//
// The same plugin gives the same image: the instances run on clocks of
// their own (stepClock), so what the initialization keeps of the time is
// the same every time, and the primed instance starts as the first fresh
// one does. The second fresh one starts at another time; the bytes it sets
// differently (a clock reading of the instance's start) are left out, so
// each new instance keeps its own.
func (p *Plugin) Snapshot(ctx context.Context, prime string) ([]byte, error) {
	var fresh [2][]byte
	for i := range fresh {
		inst, err := p.instantiate(ctx, InstanceConfig{clock: snapshotClocks[i]}, nil, true)
		if err != nil {
			return nil, err
		}
		fresh[i] = bytes.Clone(memBytes(inst.mod.Memory()))
		inst.Close(ctx)
	}
	inst, err := p.instantiate(ctx, InstanceConfig{clock: snapshotClocks[0]}, nil, true)
	if err != nil {
		return nil, err
	}
	defer inst.Close(ctx)
	if _, err := inst.CallRaw(ctx, prime, []byte("{}")); err != nil {
		return nil, err
	}
	return encodeImage(fresh[0], fresh[1], memBytes(inst.mod.Memory())), nil
}

// snapshotClocks are where the clocks of a snapshot's instances start, in
// nanoseconds (as wall time: December 2008 and April 2047). The two differ
// in every byte, and go on differing as both tick alike.
var snapshotClocks = [2]int64{0x1111111111111111, 0x2222222222222222}

// stepClock is a clock that moves by stepClockTick each time it is read,
// so the same code reads the same times, and a loop that waits for time
// to pass ends. It serves as both the wall clock and the monotonic one.
type stepClock struct{ now int64 }

const stepClockTick = 1000 // nanoseconds

func (c *stepClock) nanotime() int64 {
	c.now += stepClockTick
	return c.now
}

func (c *stepClock) walltime() (int64, int32) {
	n := c.nanotime()
	return n / 1e9, int32(n % 1e9)
}

func memBytes(m api.Memory) []byte {
	if m == nil {
		return nil
	}
	b, _ := m.Read(0, m.Size())
	return b
}
