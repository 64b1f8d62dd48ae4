//go:build !wasip1

package sdk

import "embed"

// Source is this SDK's own source: go.mod and the Go files of sdk,
// sdk/abi and sdk/sdktest (tests included), for tools that vendor the SDK
// into a plugin's module (proctor plugin new). Plugins built to wasm do
// not carry it.
//
//go:embed go.mod *.go abi/*.go sdktest/*.go
var Source embed.FS
