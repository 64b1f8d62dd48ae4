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
	mem  []byte    // the whole memory
	runs *memImage // mem as it differs from a module's memory before its start function
}

// parkedState is what a parked instance keeps.
type parkedState struct {
	mem     *memImage // its memory as it differs from the base
	globals []uint64
}

// newParkBase takes the base from inst, an instance just started, and the
// memory of the module before its start function from a module
// instantiated without it.
func (p *Plugin) newParkBase(ctx context.Context, inst *Instance) (*parkBase, error) {
	raw, err := p.newModule(ctx, newInstanceEnv(p, 0, p.r.cfg.Log), false)
	if err != nil {
		return nil, err
	}
	defer raw.Close(ctx)
	mem := bytes.Clone(memBytes(inst.mod.Memory()))
	return &parkBase{mem: mem, runs: &memImage{pages: uint32(len(mem) / pageSize), runs: diffRuns(memBytes(raw.Memory()), mem)}}, nil
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
	st := &parkedState{mem: &memImage{pages: uint32(len(mem) / pageSize), runs: diffRuns(base.mem, mem)}}
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

// unpark re-creates a parked instance. The caller holds i.mu.
func (i *Instance) unpark(ctx context.Context) error {
	mod, err := i.p.newModule(ctx, i.env, false)
	if err != nil {
		return err
	}
	st := i.parked
	if err := i.p.base.runs.apply(mod.Memory()); err != nil {
		mod.Close(ctx)
		return err
	}
	if err := st.mem.apply(mod.Memory()); err != nil {
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
	var runs []memRun
	start, last := -1, -1
	mark := func(first, end int) { // bytes first..end differ
		if start >= 0 && first-last > imageGap {
			runs = append(runs, memRun{off: uint32(start), data: bytes.Clone(cur[start : last+1])})
			start = -1
		}
		if start < 0 {
			start = first
		}
		last = end
	}
	for i := 0; i < len(cur); i += diffBlock {
		j := min(i+diffBlock, len(cur))
		if sameBlock(base, cur, i, j) {
			continue
		}
		for k := i; k < j; k += 8 {
			if k+8 > j { // a tail shorter than a word
				for m := k; m < j; m++ {
					if cur[m] != at(base, m) {
						mark(m, m)
					}
				}
				break
			}
			x := binary.LittleEndian.Uint64(cur[k:]) ^ word(base, k)
			if x != 0 {
				mark(k+bits.TrailingZeros64(x)/8, k+7-bits.LeadingZeros64(x)/8)
			}
		}
	}
	if start >= 0 {
		runs = append(runs, memRun{off: uint32(start), data: bytes.Clone(cur[start : last+1])})
	}
	return runs
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
