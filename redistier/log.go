package redistier

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// goRedisLogger is the logger the adapter passes go-redis's lines to; nil
// stands for slog.Default() at the time of each line.
var goRedisLogger atomic.Pointer[slog.Logger]

// init hands go-redis the package's adapter, once for the process.
//
// go-redis prints lines of its own (a dial that failed, a connection it
// dropped) through one logger for the whole process, which writes to
// standard error unless redis.SetLogger replaces it. A Shield whose tier is
// down already says so once, through its own logger; go-redis would say it
// again at every reconnection attempt, on standard error, whatever logger
// the application chose. The adapter passes each line to the logger
// SetLogger chose, at slog.LevelDebug: by default slog.Default(), whose
// default handler drops debug lines. There is one for every Tier and
// Shield in the process, since a line does not tell whose client it is
// about. An application that wants go-redis's lines elsewhere calls
// SetLogger, or redis.SetLogger itself from main (after package
// initialization): the package never sets go-redis's logger again.
func init() { redis.SetLogger(goRedisAdapter{}) }

// SetLogger sets the logger that go-redis's own lines go to, at
// slog.LevelDebug, for every client in the process (go-redis has one
// logger for all of them): nil restores the default, slog.Default(). Pass
// a logger whose handler discards everything (slog.DiscardHandler) to
// silence them, or the logger of a Shield (Options.Logger) to read them
// with its lines. The lines are go-redis's text: they may name addresses
// and quote Redis's errors, which is why they are debug lines.
func SetLogger(l *slog.Logger) { goRedisLogger.Store(l) }

// goRedisAdapter is the go-redis logger (its internal.Logging interface)
// that passes lines on to goRedisLogger.
type goRedisAdapter struct{}

// Printf logs one go-redis line, formatted only if the logger takes debug
// lines.
func (goRedisAdapter) Printf(ctx context.Context, format string, v ...any) {
	l := goRedisLogger.Load()
	if l == nil {
		l = slog.Default()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if !l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.Log(ctx, slog.LevelDebug, "redistier: go-redis", "line", fmt.Sprintf(format, v...))
}
