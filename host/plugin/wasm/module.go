package wasm

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// What the host changes in a plugin's code before compiling it, and what
// it learns. Neither change is visible to the plugin:
//
//   - Active data segments at constant offsets are merged into a few: Go's
//     linker writes tens of thousands, and each instance kept a table of
//     them (about a megabyte per Go plugin instance).
//   - Every mutable global is exported as globalExport+index, so that a
//     parked instance (park.go) can keep its globals and get them back.
//   - Every loop counts its turns and, every yieldEvery turns, passes
//     through the host and checks a global of the host's, exported as
//     stopExport: the code traps when it is set, which is how the host
//     stops a hook past its time (interruptible). A start section becomes
//     an export, startExport, that the host calls the same way. Debug
//     sections, whose code offsets this moves, are left out.
//
// The scan of the code finds whether an instance's whole state is its
// linear memory and globals: not if the code writes a table or drops a
// segment, whose state the host cannot read back.

// The names of the exports the host adds.
const (
	globalExport = "proctor.global." // a prefix
	stopExport   = "proctor.stop"
	startExport  = "proctor.start"
)

// moduleInfo is what the host learned of a plugin's code.
type moduleInfo struct {
	globals []int // indices of the mutable globals, each exported as globalExport+index
	// unparkable says why an instance's state is more than its memory
	// and globals; "" when it is not.
	unparkable string
}

// Wasm binary section ids.
const (
	secCustom    = 0
	secImport    = 2
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secCode      = 10
	secData      = 11
	secDataCount = 12
)

// dataGap is the longest run of zeros merged data segments span rather
// than stay apart.
const dataGap = 4096

// prepare returns the code to compile and what it learned. It refuses a
// module whose sections do not add up, or whose counts would make the
// compiler ask for more memory than the module could fill (bounds.go).
func prepare(code []byte) ([]byte, moduleInfo, error) {
	info := moduleInfo{}
	secs, err := sections(code)
	if err == nil {
		err = checkBounds(secs)
	}
	if err != nil {
		return nil, info, err
	}
	var imported, defined []global
	exports := map[string]bool{}
	hasDataCount, hasMemory := false, false
	start := -1
	var instrumented []byte
	for _, s := range secs {
		var err error
		switch s.id {
		case secImport:
			var bad error
			if imported, err, bad = readImports(s.body); bad != nil {
				// Without the count of imported globals, the host's
				// own would take another's index.
				return nil, info, fmt.Errorf("read the imports: %w", bad)
			}
		case secGlobal:
			defined, err = readGlobals(s.body)
		case secExport:
			err = readExports(s.body, exports)
		case secStart:
			r := &reader{b: s.body}
			start = int(r.u32())
			err = r.err
		case secMemory:
			hasMemory = (&reader{b: s.body}).u32() > 0
		case secCode:
			// Imports, globals and memory come before the code (the
			// compiler refuses another order).
			var bad error
			if instrumented, err, bad = instrument(s.body, uint64(len(imported)+len(defined)), hasMemory); bad != nil {
				return nil, info, fmt.Errorf("read the code: %w", bad)
			}
		case secDataCount:
			hasDataCount = true
		}
		if err != nil && info.unparkable == "" {
			info.unparkable = err.Error()
		}
	}
	for _, name := range []string{stopExport, startExport} {
		if exports[name] {
			return nil, info, fmt.Errorf("the plugin exports %s itself, a name the host keeps for its own", name)
		}
	}
	stop := uint64(len(imported) + len(defined)) // then the turn counter
	for i, g := range defined {
		idx := len(imported) + i
		if !g.mutable {
			continue
		}
		if !g.numeric() && info.unparkable == "" {
			info.unparkable = fmt.Sprintf("global %d holds a %#x, which the host cannot keep", idx, g.typ)
		}
		if exports[globalExport+strconv.Itoa(idx)] && info.unparkable == "" {
			info.unparkable = "the plugin exports " + globalExport + strconv.Itoa(idx) + " itself"
		}
		info.globals = append(info.globals, idx)
	}
	for _, g := range imported {
		if g.mutable && info.unparkable == "" {
			info.unparkable = "the plugin imports a mutable global"
		}
	}
	if info.unparkable != "" {
		info.globals = nil
	}
	if !slices.ContainsFunc(secs, func(s section) bool { return s.id == secExport }) {
		// Without an export section the module is no plugin; the
		// compiler or the ABI check says so.
		info.unparkable = "no export section"
		return code, info, nil
	}
	exps := []export{{stopExport, 0x03, stop}}
	if start >= 0 {
		exps = append(exps, export{startExport, 0x00, uint64(start)})
	}
	for _, g := range info.globals {
		exps = append(exps, export{globalExport + strconv.Itoa(g), 0x03, uint64(g)})
	}
	var out bytes.Buffer
	out.Write(code[:8])
	write := func(id byte, body []byte) {
		out.WriteByte(id)
		out.Write(uleb(uint64(len(body))))
		out.Write(body)
	}
	hasGlobals := slices.ContainsFunc(secs, func(s section) bool { return s.id == secGlobal })
	for _, s := range secs {
		body := s.body
		if !hasGlobals && after(s.id, secGlobal) {
			write(secGlobal, addGlobals(nil))
			hasGlobals = true
		}
		switch {
		case s.id == secCustom && debugSection(body), s.id == secStart:
			continue
		case s.id == secGlobal:
			body = addGlobals(body)
		case s.id == secExport:
			body = addExports(body, exps)
		case s.id == secCode:
			body = instrumented
		case s.id == secData && !hasDataCount:
			body = mergeData(body)
		}
		write(s.id, body)
	}
	return out.Bytes(), info, nil
}

// after reports whether a section of id comes after one of id other in a
// module's order (custom sections go anywhere).
func after(id, other byte) bool {
	order := func(id byte) int {
		switch id {
		case secCustom:
			return -1
		case 13: // tags
			return 55
		case secDataCount:
			return 95
		}
		return int(id) * 10
	}
	return order(id) > order(other)
}

// debugSection reports whether a custom section's body is DWARF's
// (.debug_*), whose code offsets instrument moves.
func debugSection(body []byte) bool {
	r := &reader{b: body}
	return bytes.HasPrefix(r.name(), []byte(".debug_")) && r.err == nil
}

// yieldEvery is how many turns of its loops the code makes between two
// passes through the host.
const yieldEvery = 4096

// bulkTurn is how many bytes a memory.fill or memory.copy counts as one
// turn of a loop: a page.
const bulkTurn = 12 // log2(4096)

// addGlobals adds to a global section's body (nil: none) the stop flag, a
// mutable i32 at 0, the turn counter, a mutable i32 at yieldEvery, and a
// mutable i32 the count of a bulk memory instruction passes through.
func addGlobals(body []byte) []byte {
	var n uint32
	r := &reader{b: body}
	if body != nil {
		n = r.u32()
	}
	out := append(uleb(uint64(n)+3), body[r.i:]...)
	out = append(out, 0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41)
	out = append(append(out, sleb(yieldEvery)...), 0x0b)
	return append(out, 0x7f, 0x01, 0x41, 0x00, 0x0b)
}

// bulk reports whether code starts with memory.copy or memory.fill.
func bulk(code []byte) bool {
	return len(code) > 1 && code[0] == 0xfc && (code[1] == 0x0a || code[1] == 0x0b)
}

// instrument returns a code section's body with, at the head of every
// loop (where code can run for ever; calls without a loop end, if only in
// a stack overflow), a count of the loop's turns, global stop+1, and every
// yieldEvery turns a pass through the host and a check of global stop:
//
//	counter -= 1
//	if counter <= 0 { memory.grow(0); if stop { unreachable }; counter = yieldEvery }
//
// and before every memory.fill and memory.copy, which write as many bytes
// as they are told to in one instruction, a count of one turn per page
// they write (counter -= n >> bulkTurn). Otherwise a loop that fills fresh
// memory, as a Python plugin's bytearray(1 << 20) does, makes a few turns
// for megabytes whose first writes the kernel must commit, and the check
// waited for thousands of them: a hook with a 10 s deadline ran 34 s.
//
// Native code is never preempted: without the pass through the host (a
// memory.grow of 0 pages is one, and the cheapest), a loop would keep its
// thread from the Go scheduler, and a garbage collection that must stop
// the world, or the timer that raises the flag, would wait for it for
// ever. wazero's own check (WithCloseOnContextDone) passes through the
// host at every turn, which made Go plugins up to 10 times slower. A
// module without memory, which no plugin is, gets the check alone.
//
// The same walk finds whether an instance's whole state is its memory
// and globals: unparkable says why not (an instruction that writes a
// table or drops a segment); bad is code it cannot read.
func instrument(b []byte, stop uint64, memory bool) (out []byte, unparkable, bad error) {
	get, set := func(g uint64) []byte { return append([]byte{0x23}, uleb(g)...) }, func(g uint64) []byte { return append([]byte{0x24}, uleb(g)...) }
	var check []byte
	check = append(check, get(stop+1)...)
	check = append(check, 0x41, 0x01, 0x6b) // i32.const 1, i32.sub
	check = append(check, set(stop+1)...)
	check = append(check, get(stop+1)...)
	check = append(check, 0x41, 0x00, 0x4c, 0x04, 0x40) // i32.const 0, i32.le_s, if
	if memory {
		check = append(check, 0x41, 0x00, 0x40, 0x00, 0x1a) // i32.const 0, memory.grow 0, drop
	}
	check = append(check, get(stop)...)
	check = append(check, 0x04, 0x40, 0x00, 0x0b, 0x41) // if, unreachable, end, i32.const
	check = append(check, sleb(yieldEvery)...)
	check = append(check, set(stop+1)...)
	check = append(check, 0x0b) // end
	// The count a bulk instruction's length (on top of the stack) adds.
	var weigh []byte
	weigh = append(weigh, set(stop+2)...)
	weigh = append(weigh, get(stop+1)...)
	weigh = append(weigh, get(stop+2)...)
	weigh = append(weigh, 0x41, bulkTurn, 0x76, 0x6b) // i32.const bulkTurn, i32.shr_u, i32.sub
	weigh = append(weigh, set(stop+1)...)
	weigh = append(weigh, get(stop+2)...)
	r := &reader{b: b}
	n := r.u32()
	var code, body bytes.Buffer
	code.Write(uleb(uint64(n)))
	for ; n > 0 && r.err == nil; n-- {
		f := &reader{b: r.bytes(int(r.u32()))}
		for m := f.u32(); m > 0 && f.err == nil; m-- {
			f.u32()
			f.valtype()
		}
		body.Reset()
		last := 0
		for f.i < len(f.b) && f.err == nil {
			loop := f.b[f.i] == 0x03
			if bulk(f.b[f.i:]) {
				body.Write(f.b[last:f.i])
				body.Write(weigh)
				last = f.i
			}
			if err := f.instr(); err != nil && unparkable == nil {
				unparkable = err
			}
			if loop && f.err == nil {
				body.Write(f.b[last:f.i])
				body.Write(check)
				last = f.i
			}
		}
		if f.err != nil {
			return nil, nil, f.err
		}
		body.Write(f.b[last:])
		code.Write(uleb(uint64(body.Len())))
		code.Write(body.Bytes())
	}
	if r.err == nil && r.i != len(r.b) {
		r.fail("%d bytes past the last function", len(r.b)-r.i)
	}
	if r.err != nil {
		return nil, nil, r.err
	}
	return code.Bytes(), unparkable, nil
}

type section struct {
	id   byte
	body []byte
}

// sections splits a module into its sections.
func sections(code []byte) ([]section, error) {
	if len(code) < 8 {
		return nil, errors.New("shorter than a module's header")
	}
	r := &reader{b: code, i: 8}
	var out []section
	for r.i < len(r.b) && r.err == nil {
		id := r.byte()
		n := r.u32()
		body := r.bytes(int(n))
		out = append(out, section{id, body})
	}
	return out, r.err
}

type global struct {
	typ     byte
	mutable bool
}

// numeric: i32, i64, f32 or f64, whose value the host reads and sets.
func (g global) numeric() bool { return g.typ >= 0x7c && g.typ <= 0x7f }

// readImports returns the imported globals, all of them (their count
// places the host's own), and, as refused, imported tables and memories,
// whose state is shared with whoever provides them; bad is a section it
// cannot read.
func readImports(b []byte) (globals []global, refused, bad error) {
	r := &reader{b: b}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		switch kind, g := r.importEntry(); kind {
		case 0x01, 0x02:
			refused = errors.New("the plugin imports a table or a memory")
		case 0x03:
			globals = append(globals, g)
		}
	}
	return globals, refused, r.err
}

func readGlobals(b []byte) ([]global, error) {
	r := &reader{b: b}
	var globals []global
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		g := global{typ: r.byte(), mutable: r.byte() == 1}
		if err := r.expr(); err != nil {
			return nil, err
		}
		globals = append(globals, g)
	}
	return globals, r.err
}

func readExports(b []byte, names map[string]bool) error {
	r := &reader{b: b}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		names[string(r.name())] = true
		r.byte()
		r.u32()
	}
	return r.err
}

type export struct {
	name string
	kind byte // 0x00 a function, 0x03 a global
	idx  uint64
}

// addExports adds exports to an export section's body.
func addExports(body []byte, exps []export) []byte {
	r := &reader{b: body}
	n := r.u32()
	var out bytes.Buffer
	out.Write(uleb(uint64(n) + uint64(len(exps))))
	out.Write(body[r.i:])
	for _, e := range exps {
		out.Write(uleb(uint64(len(e.name))))
		out.WriteString(e.name)
		out.WriteByte(e.kind)
		out.Write(uleb(e.idx))
	}
	return out.Bytes()
}

type segment struct {
	off  uint32
	data []byte
}

// mergeData merges the segments of a data section that are all active, in
// memory 0, at constant offsets, and apart (so the order they are written
// in does not matter), across gaps of zeros up to dataGap. Any other
// section comes back as it was.
func mergeData(body []byte) []byte {
	r := &reader{b: body}
	n := r.u32()
	segs := make([]segment, 0, min(n, 1<<16))
	for ; n > 0 && r.err == nil; n-- {
		if r.u32() != 0 || r.byte() != 0x41 {
			return body
		}
		off := uint32(r.s32())
		if r.byte() != 0x0b {
			return body
		}
		segs = append(segs, segment{off, r.bytes(int(r.u32()))})
	}
	if r.err != nil || r.i != len(r.b) {
		return body
	}
	slices.SortStableFunc(segs, func(a, b segment) int { return cmp.Compare(a.off, b.off) })
	for k := 1; k < len(segs); k++ {
		if uint64(segs[k].off) < uint64(segs[k-1].off)+uint64(len(segs[k-1].data)) {
			return body // overlapping: the later one wins, keep the order
		}
	}
	var merged []segment
	for _, s := range segs {
		if k := len(merged) - 1; k >= 0 && uint64(s.off)-(uint64(merged[k].off)+uint64(len(merged[k].data))) <= dataGap {
			last := &merged[k]
			gap := int(s.off - last.off - uint32(len(last.data)))
			last.data = append(append(last.data, make([]byte, gap)...), s.data...)
			continue
		}
		// A copy: the merged bytes are appended to it, never to the
		// module's own.
		merged = append(merged, segment{s.off, bytes.Clone(s.data)})
	}
	var out bytes.Buffer
	out.Write(uleb(uint64(len(merged))))
	for _, s := range merged {
		out.Write([]byte{0x00, 0x41})
		out.Write(sleb(int64(int32(s.off))))
		out.WriteByte(0x0b)
		out.Write(uleb(uint64(len(s.data))))
		out.Write(s.data)
	}
	return out.Bytes()
}

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// reader reads the binary format; the first error sticks and every read
// after it returns zeros.
type reader struct {
	b   []byte
	i   int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	r.i = len(r.b)
}

func (r *reader) byte() byte {
	if r.i >= len(r.b) {
		r.fail("unexpected end at byte %d", r.i)
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || n > len(r.b)-r.i {
		r.fail("%d bytes past the end at byte %d", n, r.i)
		return nil
	}
	b := r.b[r.i : r.i+n]
	r.i += n
	return b
}

func (r *reader) name() []byte { return r.bytes(int(r.u32())) }

// u32 reads an unsigned LEB128 number of at most 32 bits.
func (r *reader) u32() uint32 {
	var v uint64
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			if v > 1<<32-1 {
				r.fail("number over 32 bits at byte %d", r.i)
				return 0
			}
			return uint32(v)
		}
	}
	r.fail("number over 5 bytes at byte %d", r.i)
	return 0
}

// s32 reads a signed LEB128 number of at most 32 bits.
func (r *reader) s32() int32 {
	var v int64
	shift := 0
	for ; shift < 35; shift += 7 {
		c := r.byte()
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			shift += 7
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			if v < -1<<31 || v > 1<<31-1 {
				r.fail("number over 32 bits at byte %d", r.i)
				return 0
			}
			return int32(v)
		}
	}
	r.fail("number over 5 bytes at byte %d", r.i)
	return 0
}

// skipLEB skips a LEB128 number of at most max bytes.
func (r *reader) skipLEB(max int) {
	for range max {
		if r.byte()&0x80 == 0 {
			return
		}
	}
	r.fail("number over %d bytes at byte %d", max, r.i)
}
