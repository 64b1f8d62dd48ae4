// Command abiv2 pretends to be a plugin of a future ABI version.
package main

//go:wasmimport proctor_v2 set_output
func setOutput(ptr, n uint32)

//go:wasmexport proctor_abi_v2
func marker() { setOutput(0, 0) }

//go:wasmexport proctor_handle
func handle(ml, il uint32) uint32 { return 0 }

func main() {}
