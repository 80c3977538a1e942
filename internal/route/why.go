package route

import (
	"strings"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Why is what an explanation of a statement says of its route, as plain
// values: the reason it is not shared, the scanner's result and, when the
// server's verdict is known, what it says.
type Why struct {
	Reason string          // the bypass reason; empty when shared
	Scan   *sqlscan.Result // the statement as scanned
	// Soft and NoCache are the policy's.
	Soft    time.Duration
	NoCache bool

	// Known says the server's verdict is known; Failed that it could not
	// be had, Err then describing its error (never by its text).
	Known  bool
	Failed bool
	Err    string
	// What a known verdict says: the volatile functions the statement's
	// pure= entry does not vouch for, the per-session values it reads,
	// whether it depends on the clock, calls user functions that are not
	// IMMUTABLE, or calls volatile functions.
	Unvouched     []string
	PerSession    []string
	TimeDependent bool
	UserFunctions bool
	Volatile      bool
}

// Detail returns what follows a bypass reason in an explanation: ": " and
// what makes the statement not shareable or its verdict unverified, or ""
// when the reason says it all.
func (w *Why) Detail() string {
	switch {
	case w.Reason == ReasonNotShareable && w.Known && !w.Failed:
		if len(w.Unvouched) > 0 {
			return ": calls " + strings.Join(w.Unvouched, ", ") + " (volatile; only the statement's pure= entry can vouch for it)"
		}
		if len(w.PerSession) > 0 {
			return ": reads " + strings.Join(w.PerSession, ", ") + " (per-session value)"
		}
	case w.Reason == ReasonUnverified && w.Known && w.Failed:
		return ": " + w.Err
	}
	if r := w.Scan; w.Reason == ReasonNotShareable && r.Reason != "" && !strings.HasPrefix(r.Reason, w.Reason) {
		return ": " + r.Reason
	}
	return ""
}

// NotCached says why a shared statement is not cached: its policy, or
// what makes its result follow something a TTL must be stated for.
func (w *Why) NotCached() string {
	r := w.Scan
	switch {
	case w.NoCache:
		return "not cached: nocache"
	case w.Soft <= 0:
		return "not cached: no TTL (coalesced only)"
	case r.Verdict != sqlscan.Shareable:
		return "not cached: " + r.Reason + " (annotate a TTL in the statement to cache it)"
	case w.Known && w.TimeDependent:
		return "not cached: depends on the clock (annotate a TTL in the statement to cache it)"
	case w.Known && (w.UserFunctions || w.Volatile):
		return "not cached: calls user functions that are not IMMUTABLE (annotate a TTL in the statement to cache it)"
	}
	return "not cached: an argument is a date/time word that follows the clock (annotate a TTL in the statement to cache it)"
}
