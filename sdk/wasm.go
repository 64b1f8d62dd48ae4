//go:build wasip1

package sdk

import (
	"runtime"
	"unsafe"
)

//go:wasmimport proctor_v1 read_input
func readInput(methodPtr, inputPtr uint32)

//go:wasmimport proctor_v1 set_output
func setOutput(ptr, n uint32)

//go:wasmimport proctor_v1 call
func hostCallRaw(opPtr, opLen, reqPtr, reqLen, respPtr, respCap uint32) uint64

//go:wasmimport proctor_v1 take_response
func takeResponse(ptr uint32)

//go:wasmimport proctor_v1 log
func logRaw(level int32, ptr, n uint32)

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// proctorABIv1 is the version marker the host checks before loading.
//
//go:wasmexport proctor_abi_v1
func proctorABIv1() {}

//go:wasmexport proctor_handle
func proctorHandle(methodLen, inputLen uint32) uint32 {
	method := make([]byte, methodLen)
	input := make([]byte, inputLen)
	readInput(ptr(method), ptr(input))
	status, out := Handle(string(method), input)
	setOutput(ptr(out), uint32(len(out)))
	runtime.KeepAlive(out)
	return status
}

var respBuf = make([]byte, 64<<10)

func hostCall(op string, req []byte) (uint32, []byte) {
	o := []byte(op)
	r := hostCallRaw(ptr(o), uint32(len(o)), ptr(req), uint32(len(req)), ptr(respBuf), uint32(len(respBuf)))
	runtime.KeepAlive(o)
	runtime.KeepAlive(req)
	status, n := uint32(r>>32), uint32(r)
	if int(n) <= len(respBuf) {
		return status, append([]byte(nil), respBuf[:n]...)
	}
	buf := make([]byte, n)
	takeResponse(ptr(buf))
	return status, buf
}

func hostLog(level int32, msg string) {
	b := []byte(msg)
	logRaw(level, ptr(b), uint32(len(b)))
	runtime.KeepAlive(b)
}
