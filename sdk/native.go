//go:build !wasip1

package sdk

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// HostFunc answers host operations in a native build; sdktest installs one.
type HostFunc func(op string, req []byte) (status uint32, resp []byte)

var (
	nativeMu   sync.Mutex
	nativeHost HostFunc
)

// SetHost installs the emulated host for native builds (see sdktest) and
// returns a function that restores the previous one.
func SetHost(h HostFunc) (restore func()) {
	nativeMu.Lock()
	prev := nativeHost
	nativeHost = h
	nativeMu.Unlock()
	return func() {
		nativeMu.Lock()
		nativeHost = prev
		nativeMu.Unlock()
	}
}

func hostCall(op string, req []byte) (uint32, []byte) {
	nativeMu.Lock()
	h := nativeHost
	nativeMu.Unlock()
	if h == nil {
		b, _ := json.Marshal(abi.Error{Error: "no host: in native tests, install one with sdktest"})
		return abi.StatusError, b
	}
	return h(op, req)
}

func hostLog(level int32, msg string) {
	slog.Log(context.Background(), slog.Level(level), msg, "source", "plugin")
}
