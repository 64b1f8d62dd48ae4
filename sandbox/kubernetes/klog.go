package kubernetes

import (
	"context"
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

var klogOnce sync.Once

// quietKlog sends client-go's own log lines (klog) to log at debug level.
// Its stream code logs an error whenever a stream proctor closes on
// purpose ends, which a user must not read as a failure; a real failure
// reaches proctor as an error and is reported there.
func quietKlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(debugHandler{log.Handler()})) })
}

// debugHandler writes every record at debug level.
type debugHandler struct{ h slog.Handler }

func (d debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugHandler) Handle(ctx context.Context, r slog.Record) error {
	// Checked here too: klog's bridge does not always ask Enabled.
	if !d.h.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugHandler) WithAttrs(as []slog.Attr) slog.Handler { return debugHandler{d.h.WithAttrs(as)} }
func (d debugHandler) WithGroup(g string) slog.Handler       { return debugHandler{d.h.WithGroup(g)} }
