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
//
// The scan of the code finds whether an instance's whole state is its
// linear memory and globals: not if the code writes a table or drops a
// segment, whose state the host cannot read back.

// globalExport prefixes the name of the exports the host adds.
const globalExport = "proctor.global."

// moduleInfo is what the host learned of a plugin's code.
type moduleInfo struct {
	globals []int // indices of the mutable globals, each exported as globalExport+index
	// unparkable says why an instance's state is more than its memory
	// and globals; "" when it is not.
	unparkable string
}

// Wasm binary section ids.
const (
	secImport    = 2
	secGlobal    = 6
	secExport    = 7
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
	hasDataCount := false
	for _, s := range secs {
		var err error
		switch s.id {
		case secImport:
			imported, err = readImports(s.body)
		case secGlobal:
			defined, err = readGlobals(s.body)
		case secExport:
			err = readExports(s.body, exports)
		case secCode:
			err = scanCode(s.body)
		case secDataCount:
			hasDataCount = true
		}
		if err != nil && info.unparkable == "" {
			info.unparkable = err.Error()
		}
	}
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
	var out bytes.Buffer
	out.Write(code[:8])
	for _, s := range secs {
		body := s.body
		switch {
		case s.id == secExport && len(info.globals) > 0:
			body = addGlobalExports(body, info.globals)
		case s.id == secData && !hasDataCount:
			body = mergeData(body)
		}
		out.WriteByte(s.id)
		out.Write(uleb(uint64(len(body))))
		out.Write(body)
	}
	if len(info.globals) > 0 && !slices.ContainsFunc(secs, func(s section) bool { return s.id == secExport }) {
		// Without an export section the module is no plugin; the
		// compiler or the ABI check says so.
		info.unparkable = "no export section"
		return code, info, nil
	}
	return out.Bytes(), info, nil
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

// readImports returns the imported globals, and refuses imported tables
// and memories, whose state is shared with whoever provides them.
func readImports(b []byte) ([]global, error) {
	r := &reader{b: b}
	var globals []global
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0x00:
			r.u32()
		case 0x01, 0x02:
			return nil, errors.New("the plugin imports a table or a memory")
		case 0x03:
			globals = append(globals, global{typ: r.byte(), mutable: r.byte() == 1})
		default:
			return nil, fmt.Errorf("import of unknown kind %#x", kind)
		}
	}
	return globals, r.err
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

// addGlobalExports adds an export of each global in idx to an export
// section's body.
func addGlobalExports(body []byte, idx []int) []byte {
	r := &reader{b: body}
	n := r.u32()
	var out bytes.Buffer
	out.Write(uleb(uint64(n) + uint64(len(idx))))
	out.Write(body[r.i:])
	for _, g := range idx {
		name := globalExport + strconv.Itoa(g)
		out.Write(uleb(uint64(len(name))))
		out.WriteString(name)
		out.WriteByte(0x03)
		out.Write(uleb(uint64(g)))
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
