// Command future is a plugin built for a newer minor version of ABI v1
// than the host's (v1.9), written against the raw ABI: its manifest has a
// field the host does not know, a hook the host does not know, and an
// optional capability the host does not have. Build it with
// -ldflags=-X=main.required=OP to make OP a required capability instead.
//
// Hooks: "call:OP" calls the host operation OP and answers
// {"status":N,"resp":"..."}; "fail:CLASS" fails with that error class.
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

// required is the capability the plugin cannot do without.
var required = "host.info"

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func out(status uint32, s string) uint32 {
	b := []byte(s)
	setOutput(ptr(b), uint32(len(b)))
	return status
}

//go:wasmexport proctor_abi_v1
func marker() {}

//go:wasmexport proctor_handle
func handle(ml, il uint32) uint32 {
	m := make([]byte, ml)
	in := make([]byte, il+1)
	readInput(ptr(m), ptr(in))
	method := string(m)
	switch {
	case method == "describe":
		return out(0, `{"name":"future","version":"9","abi":1,"abi_minor":9,"sdk":"go 9.0.0",`+
			`"hooks":["describe","tasks.load","rollout.rewind"],"capabilities":["`+required+`"],`+
			`"optional_capabilities":["sandbox.snapshot","model.complete"],"signature":{"alg":"none"}}`)
	case method == "tasks.load":
		return out(0, `{"tasks":[{"id":"t1","future_field":true}],"next_page":null}`)
	case strings.HasPrefix(method, "call:"):
		op := []byte(strings.TrimPrefix(method, "call:"))
		req := []byte(`{}`)
		resp := make([]byte, 64)
		r := call(ptr(op), uint32(len(op)), ptr(req), uint32(len(req)), ptr(resp), uint32(len(resp)))
		status, n := uint32(r>>32), uint32(r)
		if n > uint32(len(resp)) {
			resp = make([]byte, n)
			takeResponse(ptr(resp))
		}
		return out(0, `{"status":`+itoa(status)+`,"resp":`+quote(string(resp[:n]))+`}`)
	case strings.HasPrefix(method, "fail:"):
		return out(1, `{"error":"failed on purpose","class":`+quote(strings.TrimPrefix(method, "fail:"))+`}`)
	}
	return out(2, `{"error":"unknown"}`)
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
