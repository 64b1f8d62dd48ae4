package wasm_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/proctor-dev/proctor/host/plugin/wasm"
	"github.com/proctor-dev/proctor/host/plugin/wasm/wasmtest"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// records is a slog handler that keeps what it is given at level and above.
type records struct {
	level slog.Level
	mu    sync.Mutex
	got   []string // "LEVEL msg text"
}

func (h *records) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *records) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *records) WithGroup(string) slog.Handler                { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "stream" || a.Key == "text" {
			line += " " + a.Key + "=" + a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.got = append(h.got, line)
	h.mu.Unlock()
	return nil
}

// TestPluginOutputIsLogged: what a Go plugin writes to stderr (here the
// Go runtime's report of a panic) goes to the instance's log at info, a
// record per line.
func TestPluginOutputIsLogged(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, wasm.Config{})
	p, err := r.LoadFile(ctx, wasmtest.Build(t, "./host/plugin/wasm/testdata/evil"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Grant(p.Manifest().Capabilities); err != nil {
		t.Fatal(err)
	}
	h := &records{level: slog.LevelInfo}
	inst := instance(t, p, wasm.InstanceConfig{Log: slog.New(h)})
	if err := inst.Call(ctx, "panic", abi.Empty{}, nil); err == nil {
		t.Fatal("the panic was not an error")
	}
	if !slices.Contains(h.got, "INFO plugin output stream=stderr text=panic: evil panics") {
		t.Errorf("the log does not have the panic's line:\n%s", strings.Join(h.got, "\n"))
	}
}

// TestPythonOutputIsLogged: print() and stderr go to the log proctor.log
// writes to, a record per line at level info, and a line a hook leaves
// unfinished is logged when it returns. A log that leaves info out says
// so once per plugin, with how to see them.
func TestPythonOutputIsLogged(t *testing.T) {
	h := &records{level: slog.LevelInfo}
	p := loadPython(t, newRuntime(t, wasm.Config{}), "sdk/python/testdata/printer")
	inst := instance(t, p, wasm.InstanceConfig{Log: slog.New(h)})
	if _, err := reward(t, inst, abi.RewardRequest{Task: abi.Task{ID: "t1"}}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"INFO plugin output stream=stdout text=to stdout t1",
		"INFO plugin output stream=stderr text=to stderr",
		"INFO by proctor.log",
		"INFO plugin output stream=stdout text=unfinished",
	}
	if !slices.Equal(h.got, want) {
		t.Errorf("the log has\n%s\nwant\n%s", strings.Join(h.got, "\n"), strings.Join(want, "\n"))
	}

	quiet := &records{level: slog.LevelWarn}
	p = loadPython(t, newRuntime(t, wasm.Config{}), "sdk/python/testdata/printer")
	for range 2 {
		inst := instance(t, p, wasm.InstanceConfig{Log: slog.New(quiet)})
		if _, err := reward(t, inst, abi.RewardRequest{Task: abi.Task{ID: "t1"}}); err != nil {
			t.Fatal(err)
		}
	}
	want = []string{"WARN plugin printer writes to stdout or stderr: its lines are logged at level info, which this log leaves out (--log-level info shows them)"}
	if !slices.Equal(quiet.got, want) {
		t.Errorf("a log at warn has\n%s\nwant\n%s", strings.Join(quiet.got, "\n"), strings.Join(want, "\n"))
	}
}
