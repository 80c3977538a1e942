// Package logx is the logging of a Shield: a logger whose handler finds,
// at each line, the logger the application chose last, and a limiter that
// lets a warning about one statement through once a while.
//
// New returns a *slog.Logger that passes every record to the handler of
// the logger an atomic pointer holds at that moment, or of slog.Default()
// as it is then when the pointer is nil, with the attributes and groups
// added through it (With, WithGroup) applied in order. Storing into the
// pointer is the only way to change where lines go; it is safe at any time,
// from any goroutine. The package keeps no state of its own.
//
// A Limiter is a memo.Set of the warnings already logged: Warn logs a
// warning about a statement at most once a minute per kind of event. It
// keeps digests of its keys, never the keys, so two keys may be taken for
// one another and a warning missed: limiting is an optimisation, never a
// guarantee. It never writes the statement's text to the log.
package logx

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/memo"
)

// New returns a logger whose lines go to the handler of *l's logger as it
// is when each line is logged, or slog.Default()'s when *l is nil.
func New(l *atomic.Pointer[slog.Logger]) *slog.Logger {
	return slog.New(&handler{l: l})
}

// handler is the handler of a logger of New: it passes every record to the
// handler of the current logger, with the attributes and groups added
// through it.
type handler struct {
	l   *atomic.Pointer[slog.Logger]
	ops []handlerOp // in order
}

// handlerOp is a WithGroup (group set) or a WithAttrs.
type handlerOp struct {
	group string
	attrs []slog.Attr
}

func (h *handler) target() slog.Handler {
	l := h.l.Load()
	if l == nil {
		l = slog.Default()
	}
	t := l.Handler()
	for _, op := range h.ops {
		if op.group != "" {
			t = t.WithGroup(op.group)
		} else {
			t = t.WithAttrs(op.attrs)
		}
	}
	return t
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.target().Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	return h.target().Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &handler{l: h.l, ops: append(slices.Clip(h.ops), handlerOp{attrs: attrs})}
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{l: h.l, ops: append(slices.Clip(h.ops), handlerOp{group: name})}
}

// Limiter remembers the warnings logged (a memo.Set: digests, never the
// keys); its Add serves other once-a-while lines. Call Init before use.
type Limiter struct{ memo.Set }

// Warn logs msg with args on log as a warning about the statement of
// normalized text, unless one of the same kind about it was let through
// within the last minute.
func (w *Limiter) Warn(log *slog.Logger, kind, normalized, msg string, args ...any) {
	if w.Add(kind+"\x00"+normalized, time.Now(), time.Minute) {
		log.Warn(msg, args...)
	}
}
