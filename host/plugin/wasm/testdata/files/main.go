// Command files is a test plugin, written without the SDK against the raw
// ABI, that reads the files a plugin carries (abi.FilesSection): the hook
// "read" answers the contents of the file its input names, "list" the
// names in a folder, "write" what writing a file does; "count" counts its
// calls, in memory, "stamp" keeps the time it is called at and "now"
// answers the time (for the memory image's tests).
package main

import (
	"encoding/json"
	"os"
	"time"
	"unsafe"
)

//go:wasmimport proctor_v1 read_input
func readInput(methodPtr, inputPtr uint32)

//go:wasmimport proctor_v1 set_output
func setOutput(ptr, n uint32)

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func out(v any) uint32 {
	b, _ := json.Marshal(v)
	setOutput(ptr(b), uint32(len(b)))
	return 0
}

var (
	calls int
	stamp time.Time
)

//go:wasmexport proctor_abi_v1
func marker() {}

//go:wasmexport proctor_handle
func handle(ml, il uint32) uint32 {
	m := make([]byte, ml)
	in := make([]byte, il+1)
	readInput(ptr(m), ptr(in))
	var arg string
	json.Unmarshal(in[:il], &arg)
	switch string(m) {
	case "describe":
		return out(map[string]any{"name": "files", "version": "0", "abi": 1, "hooks": []string{"describe"}})
	case "read":
		b, err := os.ReadFile(arg)
		if err != nil {
			return out("error: " + err.Error())
		}
		return out(string(b))
	case "list":
		es, err := os.ReadDir(arg)
		if err != nil {
			return out("error: " + err.Error())
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return out(names)
	case "count":
		calls++
		return out(calls)
	case "stamp":
		stamp = time.Now()
		return out(stamp.UnixNano())
	case "now":
		return out(time.Now().UnixNano())
	case "write":
		if err := os.WriteFile(arg, []byte("x"), 0o644); err != nil {
			return out("error: " + err.Error())
		}
		return out("written")
	}
	return 2
}

func main() {}
