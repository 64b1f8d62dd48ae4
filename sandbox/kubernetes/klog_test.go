package kubernetes

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// client-go's error lines about streams proctor closed reach the log only
// when it shows debug lines.
func TestDebugHandler(t *testing.T) {
	var buf bytes.Buffer
	info := slog.New(debugHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})})
	info.Error("Copying stdin failed", "err", "closed pipe")
	info.Handler().Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelError, "Websocket Ping failed", 0))
	if buf.Len() != 0 {
		t.Fatalf("shown at info level: %s", buf.String())
	}
	debug := slog.New(debugHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})}).With("k", "v")
	debug.Error("Copying stdin failed")
	if s := buf.String(); !strings.Contains(s, "level=DEBUG") || !strings.Contains(s, "k=v") {
		t.Fatalf("at debug level: %s", s)
	}
}
