package wasm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// maxOutput is how much of its stdout, and of its stderr, an instance may
// log; past it, the rest is dropped and the log says so once.
const maxOutput = 64 << 10

// maxLine is the longest line kept whole: a longer one is logged in parts.
const maxLine = 8 << 10

// logWriter sends a guest's stdout or stderr to the instance's log, where
// the plugin's own log lines (proctor.log, sdk.Log) go: a record per line
// at level info, bounded. A line a hook left unfinished is logged when
// the hook returns (flush). Where the log does not show that level, it
// says so once per plugin, with how to see them.
type logWriter struct {
	p      *Plugin
	log    *slog.Logger
	stream string
	level  slog.Level

	mu      sync.Mutex
	left    int
	pending []byte
}

func newLogWriter(p *Plugin, log *slog.Logger, stream string, level slog.Level) *logWriter {
	return &logWriter{p: p, log: log, stream: stream, level: level, left: maxOutput}
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	if w.left <= 0 {
		return n, nil
	}
	if len(b) > w.left {
		b = b[:w.left]
	}
	w.left -= len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.pending = append(w.pending, b...)
			if len(w.pending) >= maxLine {
				w.emit()
			}
			break
		}
		w.pending = append(w.pending, b[:i]...)
		w.emit()
		b = b[i+1:]
	}
	if w.left <= 0 {
		w.emit()
		w.log.Log(context.Background(), w.level, fmt.Sprintf("plugin %s: over %d KiB on %s: the rest is dropped", w.p.name, maxOutput>>10, w.stream))
	}
	return n, nil
}

// flush logs the unfinished line, if any.
func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emit()
}

// emit logs the pending line. The caller holds w.mu.
func (w *logWriter) emit() {
	if w.pending == nil {
		return
	}
	ctx := context.Background()
	if !w.log.Enabled(ctx, w.level) && w.p.hidden.CompareAndSwap(false, true) {
		w.log.Warn(fmt.Sprintf("plugin %s writes to stdout or stderr: its lines are logged at level %s, which this log leaves out (--log-level %s shows them)",
			w.p.name, levelName(w.level), levelName(w.level)))
	}
	w.log.Log(ctx, w.level, "plugin output", "stream", w.stream, "text", string(w.pending))
	w.pending = nil
}

func levelName(l slog.Level) string {
	b, _ := l.MarshalText()
	return string(bytes.ToLower(b))
}
