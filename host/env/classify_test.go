package env

import (
	"errors"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/scheduler"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// The contract's error classes are the record's: a plugin's class lands in
// error_class as it is.
func TestClassesAreTheRecords(t *testing.T) {
	for _, c := range []struct{ abi, rundir string }{
		{abi.ClassPlugin, rundir.ClassPlugin}, {abi.ClassSetup, rundir.ClassSetup}, {abi.ClassVerifier, rundir.ClassVerifier},
	} {
		if c.abi != c.rundir {
			t.Errorf("abi class %q is recorded as %q", c.abi, c.rundir)
		}
	}
}

// A hook's class: the contract's kept, none is the phase's, anything else
// (a typo, a class the host does not give plugins) is the plugin's fault.
func TestClassify(t *testing.T) {
	failed := func(class string) error {
		return &wasm.PluginError{Plugin: "p", Hook: abi.HookVerify, Kind: wasm.ErrHookFailed, Class: class, Err: errors.New("no")}
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{failed(abi.ClassSetup), rundir.ClassSetup},
		{failed(abi.ClassVerifier), rundir.ClassVerifier},
		{failed(abi.ClassPlugin), rundir.ClassPlugin},
		{failed(""), "phase"},
		{failed("verifer"), rundir.ClassPlugin},
		{failed(rundir.ClassModel), rundir.ClassPlugin},
		{failed(rundir.ClassInterrupted), rundir.ClassPlugin},
		{&wasm.PluginError{Plugin: "p", Kind: wasm.ErrTrap, Class: abi.ClassSetup, Err: errors.New("trap")}, rundir.ClassPlugin},
	} {
		err := classify(c.err)
		got := "phase"
		var ce *scheduler.ClassError
		if errors.As(err, &ce) {
			got = ce.Class
		}
		if got != c.want {
			t.Errorf("%v (class %q): recorded as %s, want %s", c.err, c.err.(*wasm.PluginError).Class, got, c.want)
		}
	}
}
