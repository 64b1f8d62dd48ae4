// Command nohandle has the ABI marker but no entry point.
package main

//go:wasmexport proctor_abi_v1
func marker() {}

func main() {}
