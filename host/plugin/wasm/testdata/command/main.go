// Command command is a plugin built the way a Go newcomer builds one: as a
// WASI command (go build without -buildmode=c-shared). The runtime's tests
// build it so; the host must name the missing flag.
package main

import "github.com/proctor-dev/proctor/sdk"

type env struct{ sdk.Environment }

func init() { sdk.Register(env{}) }

func main() {}
