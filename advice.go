package sqlflight

import (
	"time"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// The advisor: which statements that run uncached would a TTL save the
// most database time on, and which TTL (the maths: stats.Advise).

// Advice is one statement the advisor would cache: it runs uncached (its
// policy coalesces only, or is off) though its verdict lets a TTL cache it.
// Durations are in seconds; the window is the Shield's life so far.
type Advice = stats.Advice

// Advice ranks the statements s counts that run uncached although they
// could be cached, by the database time a TTL would have saved in the
// window observed (Advice.SavedSeconds), and proposes each one's
// annotation. The rule (docs/operations.md, "Per-statement statistics and the
// advisor"): soft is a tenth of the mean time between writes to the
// statement's tables, rounded down to a step of stats.AdviceTTLs and kept within
// 1s and 5m (5m when its tables see no write); hard is ten times soft, at
// most 1h. Statements that would have saved nothing are left out.
func (s *Shield) Advice() []Advice {
	now := s.opts.Clock.Now()
	window := now.Sub(s.started)
	if window <= 0 {
		window = time.Nanosecond
	}
	return stats.Advise(s.statements.Snapshot(), window, s.writes.to)
}

// tableWrites counts the writes to each table through the Shield: its own
// writes, committed transactions, Invalidate, and the change feed's
// changes, which all move epochs through startWrite.
type tableWrites struct{ stats.TableWrites }

// note counts w.
func (tw *tableWrites) note(w write) {
	if !w.known {
		tw.Unknown()
		return
	}
	for _, t := range w.tables {
		tw.Add(t)
	}
	for _, rw := range w.rows {
		tw.Add(rw.Table)
	}
}

// to returns the writes a read of tables has seen: to any of them (by
// tableKey), and to unknown tables (to every table, when its own are not
// known).
func (tw *tableWrites) to(tables []string, known bool) uint64 {
	return tw.To(tables, known, epoch.TableKey)
}
