package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"

	"github.com/tetratelabs/wazero/api"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// A rollout's instance waits most of the rollout: while the agent works,
// no hook runs. Park lets go of it meanwhile. What an instance is between
// two calls is its linear memory and its mutable globals (prepare checks
// that the code keeps no other state: no table writes, no segment drops;
// an instance holding one of its files open stays as it is), so Park keeps
// the bytes of memory that differ from the plugin's base, an instance just
// started, and the globals' values, and closes the module. The next call
// instantiates the module without running its start function, writes the
// base and the kept bytes over the fresh memory, sets the globals, and
// goes on: the plugin sees its own state, byte for byte. The host side of
// the instance (its random source, its log streams, its operations) is
// the same objects throughout. A Go plugin parked after its prompt hook
// keeps about 50 KB instead of the 2 MB its memory holds.

// parkBase is the memory every parked instance of a plugin is kept
// relative to: an instance's right after it started.
type parkBase struct {
	img *image // the whole memory, which a parked instance is re-created on
	mem []byte // img's bytes
	// pages are the OS pages where mem differs from the memory before
	// the start function: those an instance started from that memory
	// changed, whether or not the kernel saw it write them.
	pages []bool
}

// parkedState is what a parked instance keeps.
type parkedState struct {
	mem     *memImage // its memory as it differs from the base
	globals []uint64
}

// newParkBase takes the base from inst, an instance just started, and the
// memory of the module before its start function from the plugin's start
// image, or else from a module instantiated without its start function.
func (p *Plugin) newParkBase(ctx context.Context, inst *Instance) (*parkBase, error) {
	mem := memBytes(inst.mod.Memory())
	raw := []byte(nil)
	if p.start != nil {
		raw = p.start.view
	} else {
		m, _, err := p.newModule(ctx, newInstanceEnv(p, 0, p.r.cfg.Log), nil, false)
		if err != nil {
			return nil, err
		}
		defer m.Close(ctx)
		raw = memBytes(m.Memory())
	}
	img := newImage(len(mem), []segment{{0, mem}})
	base := &parkBase{img: img, mem: img.view[:len(mem)], pages: make([]bool, (len(mem)+osPage-1)/osPage)}
	for _, run := range diffRuns(raw, mem) {
		for q := int(run.off) / osPage; q <= (int(run.off)+len(run.data)-1)/osPage; q++ {
			base.pages[q] = true
		}
	}
	return base, nil
}

// Park lets go of the instance until its next call, when it can: it
// returns false, keeping the instance as it is, for a plugin whose state
// is more than memory and globals, or an instance that holds a file open.
func (i *Instance) Park(ctx context.Context) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.park(ctx)
}

// park parks the instance when it can. The caller holds i.mu.
func (i *Instance) park(ctx context.Context) bool {
	base := i.p.base
	if base == nil || i.broken != nil || i.mod == nil || i.env.filesOpen() {
		return false
	}
	mem := memBytes(i.mod.Memory())
	if len(mem) < len(base.mem) {
		return false // the base would give it more memory than it has
	}
	st := &parkedState{mem: &memImage{pages: uint32(len(mem) / pageSize), runs: i.changes(mem)}}
	for _, idx := range i.p.info.globals {
		g := i.mod.ExportedGlobal(globalExport + strconv.Itoa(idx))
		if g == nil {
			return false
		}
		st.globals = append(st.globals, g.Get())
	}
	i.dropModule(ctx)
	i.parked = st
	return true
}

// changes are the runs of bytes where mem, the instance's memory, differs
// from the base. Where the memory maps an image, only the pages the
// kernel says the instance wrote are compared (and, on the memory before
// the start function, those its start changed): a park then costs what
// the instance wrote, not the size of its memory.
func (i *Instance) changes(mem []byte) []memRun {
	base := i.p.base
	if i.from == nil {
		return diffRuns(base.mem, mem)
	}
	dirty, ok := dirtyPages(mem)
	if !ok {
		return diffRuns(base.mem, mem)
	}
	d := &differ{base: base.mem, cur: mem}
	for q, w := range dirty {
		if w || i.from != base.img && q < len(base.pages) && base.pages[q] {
			d.scan(q*osPage, min((q+1)*osPage, len(mem)))
		}
	}
	return d.done()
}

// unpark re-creates a parked instance. The caller holds i.mu.
func (i *Instance) unpark(ctx context.Context) error {
	base := i.p.base
	mod, mapped, err := i.p.newModule(ctx, i.env, base.img, false)
	if err != nil {
		return err
	}
	st := i.parked
	mem := mod.Memory()
	// The memory holds the base already, past the module's first pages
	// too: growing it to the base's size shows it all.
	if have, want := mem.Size()/pageSize, uint32(len(base.mem)/pageSize); have < want {
		if _, ok := mem.Grow(want - have); !ok {
			mod.Close(ctx)
			return fmt.Errorf("grow memory to the %d MiB of the base: over the cap", want/16)
		}
	}
	if err := st.mem.apply(mem); err != nil {
		mod.Close(ctx)
		return err
	}
	for k, idx := range i.p.info.globals {
		g, ok := mod.ExportedGlobal(globalExport + strconv.Itoa(idx)).(api.MutableGlobal)
		if !ok {
			mod.Close(ctx)
			return fmt.Errorf("global %d is not exported as mutable", idx)
		}
		g.Set(st.globals[k])
	}
	i.mod, i.handle, i.parked = mod, mod.ExportedFunction(abi.HandleExport), nil
	i.from = nil
	if mapped {
		i.from = base.img
	}
	i.p.r.wholeAdd()
	return nil
}

// Idle tells the instance that its rollout waits: it is parked when more
// instances are whole than Config.IdleInstances.
func (i *Instance) Idle(ctx context.Context) {
	if i.p.r.whole.Load() > int64(i.p.r.cfg.IdleInstances) {
		i.Park(ctx)
	}
}

// Parked reports whether the instance is parked.
func (i *Instance) Parked() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.parked != nil
}

// diffBlock is how many bytes diffRuns compares at once before it looks
// at single words.
const diffBlock = 64

var zeroBlock [diffBlock]byte

// diffRuns returns the runs of bytes where cur differs from base (bytes
// past the end of base count as zero), each a copy, runs less than
// imageGap apart joined into one.
func diffRuns(base, cur []byte) []memRun {
	d := &differ{base: base, cur: cur}
	d.scan(0, len(cur))
	return d.done()
}

// differ collects the runs where cur differs from base, over the ranges
// it is asked to scan, in increasing order.
type differ struct {
	base, cur   []byte
	runs        []memRun
	start, last int // the open run, when open
	open        bool
}

// mark notes that bytes first..end differ.
func (d *differ) mark(first, end int) {
	if d.open && first-d.last > imageGap {
		d.runs = append(d.runs, memRun{off: uint32(d.start), data: bytes.Clone(d.cur[d.start : d.last+1])})
		d.open = false
	}
	if !d.open {
		d.start, d.open = first, true
	}
	d.last = end
}

// scan compares cur[i:j] with base.
func (d *differ) scan(i, j int) {
	base, cur := d.base, d.cur
	for ; i < j; i += diffBlock {
		e := min(i+diffBlock, j)
		if sameBlock(base, cur, i, e) {
			continue
		}
		for k := i; k < e; k += 8 {
			if k+8 > e { // a tail shorter than a word
				for m := k; m < e; m++ {
					if cur[m] != at(base, m) {
						d.mark(m, m)
					}
				}
				break
			}
			x := binary.LittleEndian.Uint64(cur[k:]) ^ word(base, k)
			if x != 0 {
				d.mark(k+bits.TrailingZeros64(x)/8, k+7-bits.LeadingZeros64(x)/8)
			}
		}
	}
}

// done closes the open run and returns them all.
func (d *differ) done() []memRun {
	if d.open {
		d.runs = append(d.runs, memRun{off: uint32(d.start), data: bytes.Clone(d.cur[d.start : d.last+1])})
		d.open = false
	}
	return d.runs
}

// at is base[k], or zero past its end.
func at(base []byte, k int) byte {
	if k < len(base) {
		return base[k]
	}
	return 0
}

// word is the little-endian word of base at k, zeros past its end.
func word(base []byte, k int) uint64 {
	if k+8 <= len(base) {
		return binary.LittleEndian.Uint64(base[k:])
	}
	var w [8]byte
	if k < len(base) {
		copy(w[:], base[k:])
	}
	return binary.LittleEndian.Uint64(w[:])
}

// sameBlock reports whether cur[i:j] equals base there (zeros past its
// end).
func sameBlock(base, cur []byte, i, j int) bool {
	if j <= len(base) {
		return bytes.Equal(base[i:j], cur[i:j])
	}
	if i < len(base) {
		return bytes.Equal(base[i:], cur[i:len(base)]) && bytes.Equal(cur[len(base):j], zeroBlock[:j-len(base)])
	}
	return bytes.Equal(cur[i:j], zeroBlock[:j-i])
}
