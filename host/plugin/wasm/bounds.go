package wasm

import "fmt"

// wazero's decoder makes each vector as long as the count a module states,
// before it reads an entry: a plugin of 18 bytes that stated 2^31 data
// segments made it ask for 112 GB, and the process died. checkBounds reads
// every count the decoder makes room from and refuses one larger than the
// bytes left to hold its entries (each takes at least one), so what the
// decoder makes stays within a small multiple of the plugin's size.

// maxLocals bounds the locals of one function, as other engines do
// (wasmtime and V8 take 50,000).
const maxLocals = 50_000

// checkBounds checks the counts of a module's sections.
func checkBounds(secs []section) error {
	for _, s := range secs {
		r := &reader{b: s.body}
		var err error
		switch s.id {
		case 0:
			r.name()
		case 1:
			err = r.each("types", r.functype)
		case 2:
			err = r.each("imports", func() error { r.importEntry(); return nil })
		case 3, 4, 5, 6, 13:
			r.count("entries")
		case 7:
			err = r.each("exports", func() error { r.name(); r.byte(); r.u32(); return nil })
		case 9:
			err = r.each("element segments", r.element)
		case 10:
			err = r.each("function bodies", r.body)
		case 11:
			err = r.each("data segments", r.dataSegment)
		}
		if err == nil {
			err = r.err
		}
		if err != nil {
			return fmt.Errorf("section %d: %w", s.id, err)
		}
	}
	return nil
}

// count reads a vector's length and fails when the bytes left cannot
// hold that many entries.
func (r *reader) count(what string) uint32 {
	n := r.u32()
	if r.err == nil && int64(n) > int64(len(r.b)-r.i) {
		r.fail("%d %s in %d bytes", n, what, len(r.b)-r.i)
		return 0
	}
	return n
}

// each reads a vector, checking its length, entry by entry.
func (r *reader) each(what string, entry func() error) error {
	for n := r.count(what); n > 0 && r.err == nil; n-- {
		if err := entry(); err != nil {
			return err
		}
	}
	return r.err
}

func (r *reader) functype() error {
	r.byte()
	for range 2 { // parameters, results
		for n := r.count("value types"); n > 0 && r.err == nil; n-- {
			r.byte()
		}
	}
	return nil
}

func (r *reader) limits() {
	flag := r.byte()
	if flag&4 != 0 { // 64-bit
		r.skipLEB(10)
		if flag&1 != 0 {
			r.skipLEB(10)
		}
		return
	}
	r.u32()
	if flag&1 != 0 {
		r.u32()
	}
}

// importEntry reads an import: its kind and, for a global, the global's
// type.
func (r *reader) importEntry() (byte, global) {
	r.name()
	r.name()
	kind := r.byte()
	var g global
	switch kind {
	case 0x00:
		r.u32()
	case 0x01:
		r.byte()
		r.limits()
	case 0x02:
		r.limits()
	case 0x03:
		g = global{typ: r.byte(), mutable: r.byte() == 1}
	case 0x04:
		r.byte()
		r.u32()
	default:
		r.fail("import of unknown kind %#x", kind)
	}
	return kind, g
}

// element reads an element segment in any of its eight forms.
func (r *reader) element() error {
	flags := r.u32()
	if flags > 7 {
		r.fail("element segment of unknown form %d", flags)
		return nil
	}
	if flags&3 == 2 {
		r.u32() // table index
	}
	if flags&1 == 0 {
		r.constExpr()
	}
	if flags&3 != 0 {
		r.byte() // element kind or reference type
	}
	for n := r.count("elements"); n > 0 && r.err == nil; n-- {
		if flags&4 == 0 {
			r.u32()
		} else {
			r.constExpr()
		}
	}
	return nil
}

// constExpr reads a constant expression: only instructions that change
// nothing may appear in one.
func (r *reader) constExpr() {
	if err := r.expr(); err != nil {
		r.fail("constant expression: %v", err)
	}
}

// body reads a function body's locals, whose total is bounded.
func (r *reader) body() error {
	b := &reader{b: r.bytes(int(r.u32()))}
	total := uint64(0)
	for n := b.count("local declarations"); n > 0 && b.err == nil; n-- {
		total += uint64(b.u32())
		b.byte()
		if total > maxLocals {
			return fmt.Errorf("a function with over %d locals", maxLocals)
		}
	}
	return b.err
}

func (r *reader) dataSegment() error {
	switch flags := r.u32(); flags {
	case 0, 2:
		if flags == 2 {
			r.u32()
		}
		r.constExpr()
	case 1:
	default:
		r.fail("data segment of unknown form %d", flags)
		return nil
	}
	r.name() // the bytes, checked against what is left
	return nil
}
