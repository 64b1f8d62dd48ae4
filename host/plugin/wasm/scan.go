package wasm

import "fmt"

// The reader's walk of instructions, for instrument (module.go) and the
// globals' constant expressions: instr knows every instruction wazero
// does and says which change instance state other than linear memory and
// globals (a table, a segment's dropped state), which a parked instance
// would lose.

// expr skips a constant expression, up to and with its end.
func (r *reader) expr() error {
	for r.err == nil {
		if r.i < len(r.b) && r.b[r.i] == 0x0b {
			r.i++
			return nil
		}
		if err := r.instr(); err != nil {
			return err
		}
	}
	return r.err
}

func (r *reader) valtype() {
	switch t := r.byte(); t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
	default:
		r.fail("unknown value type %#x", t)
	}
}

// blocktype skips a block type: empty, a value type or a type index.
func (r *reader) blocktype() {
	if r.i < len(r.b) {
		switch r.b[r.i] {
		case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
			r.i++
			return
		}
	}
	r.skipLEB(5)
}

// memarg skips alignment (with a memory index when its bit 6 is set) and
// offset.
func (r *reader) memarg() {
	if r.u32()&0x40 != 0 {
		r.u32()
	}
	r.skipLEB(10)
}

// instr reads one instruction and its immediates. It returns an error for
// an instruction a parked instance could not survive; r.err holds a
// malformed one.
func (r *reader) instr() error {
	op := r.byte()
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04:
		r.blocktype()
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0b || op == 0x0f || op == 0x1a || op == 0x1b || op == 0xd1:
	case op >= 0x45 && op <= 0xc4: // numeric, no immediates
	case op == 0x0c || op == 0x0d || op == 0x10 || op == 0x12 || op == 0xd2 || op >= 0x20 && op <= 0x25 || op == 0x3f || op == 0x40:
		r.u32()
	case op == 0x0e:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.u32()
		}
		r.u32()
	case op == 0x11 || op == 0x13:
		r.u32()
		r.u32()
	case op == 0x1c:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.valtype()
		}
	case op == 0x26:
		return fmt.Errorf("the code writes a table (table.set)")
	case op >= 0x28 && op <= 0x3e:
		r.memarg()
	case op == 0x41:
		r.skipLEB(5)
	case op == 0x42:
		r.skipLEB(10)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xd0:
		r.byte()
	case op == 0xfc:
		return r.instrFC()
	case op == 0xfd:
		r.instrSIMD()
	case op == 0xfe:
		if sub := r.u32(); sub == 0x03 {
			r.byte()
		} else {
			r.memarg()
		}
	default:
		r.fail("unknown instruction %#x at byte %d", op, r.i-1)
	}
	return nil
}

// instrFC reads the 0xfc instructions: saturating truncations, bulk
// memory and tables.
func (r *reader) instrFC() error {
	switch sub := r.u32(); {
	case sub <= 7:
	case sub == 8 || sub == 10 || sub == 14 || sub == 12:
		r.u32()
		r.u32()
		if sub == 12 || sub == 14 {
			return fmt.Errorf("the code writes a table (0xfc %d)", sub)
		}
	case sub == 9 || sub == 13:
		r.u32()
		return fmt.Errorf("the code drops a segment (0xfc %d)", sub)
	case sub == 11 || sub == 16:
		r.u32()
	case sub == 15 || sub == 17:
		r.u32()
		return fmt.Errorf("the code writes a table (0xfc %d)", sub)
	default:
		r.fail("unknown instruction 0xfc %d at byte %d", sub, r.i)
	}
	return nil
}

// instrSIMD reads the 0xfd instructions (fixed-width and relaxed SIMD).
func (r *reader) instrSIMD() {
	switch sub := r.u32(); {
	case sub <= 11 || sub == 92 || sub == 93:
		r.memarg()
	case sub == 12 || sub == 13:
		r.bytes(16)
	case sub >= 21 && sub <= 34:
		r.byte()
	case sub >= 84 && sub <= 91:
		r.memarg()
		r.byte()
	case sub <= 0x113:
	default:
		r.fail("unknown instruction 0xfd %d at byte %d", sub, r.i)
	}
}
