// Command evil is a hostile plugin for the runtime's tests, written without
// the SDK against the raw ABI: each hook name picks a way to misbehave.
package main

import (
	"strings"
	"unsafe"
)

//go:wasmimport proctor_v1 read_input
func readInput(methodPtr, inputPtr uint32)

//go:wasmimport proctor_v1 set_output
func setOutput(ptr, n uint32)

//go:wasmimport proctor_v1 call
func call(opPtr, opLen, reqPtr, reqLen, respPtr, respCap uint32) uint64

//go:wasmimport proctor_v1 take_response
func takeResponse(ptr uint32)

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func out(s string) uint32 {
	b := []byte(s)
	setOutput(ptr(b), uint32(len(b)))
	return 0
}

var keep [][]byte

//go:wasmexport proctor_abi_v1
func marker() {}

//go:wasmexport proctor_handle
func handle(ml, il uint32) uint32 {
	m := make([]byte, ml)
	in := make([]byte, il+1)
	readInput(ptr(m), ptr(in))
	switch string(m) {
	case "describe":
		return out(`{"name":"evil","version":"0","abi":1,"hooks":["describe"],"capabilities":["sandbox.exec"]}`)
	case "trap":
		var p *int
		return uint32(*p)
	case "panic":
		panic("evil panics")
	case "loop":
		for {
		}
	case "alloc":
		for {
			keep = append(keep, make([]byte, 16<<20))
		}
	case "badjson":
		return out("{not json")
	case "huge":
		b := make([]byte, 100<<20)
		setOutput(ptr(b), uint32(len(b)))
		return 0
	case "exec", "read_file":
		op := []byte("sandbox.exec")
		if string(m) == "read_file" {
			op = []byte("sandbox.read_file")
		}
		req := []byte(`{"cmd":"echo hi"}`)
		resp := make([]byte, 16)
		r := call(ptr(op), uint32(len(op)), ptr(req), uint32(len(req)), ptr(resp), uint32(len(resp)))
		status, n := uint32(r>>32), uint32(r)
		if n > uint32(len(resp)) {
			resp = make([]byte, n)
			takeResponse(ptr(resp))
		}
		return out(`{"status":` + itoa(status) + `,"resp":` + quote(string(resp[:n])) + `}`)
	}
	setOutput(0, 0)
	return 2
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	s := ""
	for v > 0 {
		s = string(rune('0'+v%10)) + s
		v /= 10
	}
	return s
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

func main() {}
