package logx_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sqlflight/sqlflight/internal/logx"
)

func TestLoggerFollowsPointer(t *testing.T) {
	var p atomic.Pointer[slog.Logger]
	log := logx.New(&p).With("a", 1).WithGroup("g").With("b", 2)
	var first, second bytes.Buffer
	p.Store(slog.New(slog.NewTextHandler(&first, nil)))
	log.Info("one", "c", 3)
	p.Store(slog.New(slog.NewTextHandler(&second, nil)))
	log.Info("two")
	if got := first.String(); !strings.Contains(got, "msg=one a=1 g.b=2 g.c=3") {
		t.Errorf("first logger got %q", got)
	}
	if got := second.String(); !strings.Contains(got, "msg=two a=1 g.b=2") || strings.Contains(got, "one") {
		t.Errorf("second logger got %q", got)
	}
	if !log.Enabled(t.Context(), slog.LevelInfo) || log.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("Enabled is not the current handler's")
	}
}

func TestLoggerNilIsDefault(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	var p atomic.Pointer[slog.Logger]
	logx.New(&p).Warn("to the default")
	if !strings.Contains(buf.String(), "to the default") {
		t.Errorf("default logger got %q", buf.String())
	}
}

func TestLimiterWarnsOncePerKind(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var w logx.Limiter
	w.Init(16)
	w.Warn(log, "k", "select 1", "first")
	w.Warn(log, "k", "select 1", "again")
	w.Warn(log, "other", "select 1", "other kind")
	w.Warn(log, "k", "select 2", "other statement")
	got := buf.String()
	for _, want := range []string{"first", "other kind", "other statement"} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q: %q", want, got)
		}
	}
	if strings.Contains(got, "again") {
		t.Errorf("a repeated warning was logged: %q", got)
	}
}
