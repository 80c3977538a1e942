package sqlflight

import (
	"time"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// Per-statement statistics: what each statement shape (the fingerprint of
// its shape key: its normalized text, the constants that do not change
// what the server concludes as placeholders, sqlscan.Result.Shape) costs
// the database and how it was served. The
// connection and the flights make one call each into this file; the
// counting is internal/stats' (a Space-Saving top-K of statements, each
// with its hot keys), this file says what a call was.

const (
	// hotKeyCapacity is how many keys are counted per statement.
	hotKeyCapacity = stats.HotKeyCapacity
	// maxWarmText bounds the text kept for pre-warming (prewarm.go), and
	// maxWarmArgs a key's raw arguments, counted as their bytes (8 for
	// a number, a bool or a time).
	maxWarmText = stats.MaxWarmText
	maxWarmArgs = stats.MaxWarmArgs
	// sampleEvery: one call in this many of a statement is timed, and
	// notes its plan.
	sampleEvery = stats.SampleEvery
)

// outcome is how one call was served: a path through the cache and the
// flights, or the reason it bypassed them (outBypass + the reason's index in
// bypassReasonList).
type outcome = stats.Outcome

const (
	outNone     = stats.OutNone
	outFresh    = stats.OutFresh
	outStale    = stats.OutStale
	outNegative = stats.OutNegative
	outFollower = stats.OutFollower
	outMiss     = stats.OutMiss
	outBypass   = stats.OutBypass
)

// bypassReasonList are the reasons a statement bypasses sharing (route.go), in
// the order of their outcomes.
var bypassReasonList = stats.BypassReasons

// Outcomes the hot path names.
const (
	outBypassExec   = stats.OutBypassExec
	outBypassPolicy = stats.OutBypassPolicy
)

// StatementStats are the statistics of one statement shape (its
// normalized text, constants as placeholders: WHERE (id = 4) and WHERE
// (id = 5) are one statement, WHERE (id = $1)) in Shield.Statements. Calls
// is a Space-Saving count: the true number of calls lies between
// Calls-Error and Calls. The other counters count exactly, from Since,
// when the statement entered the table (a statement leaves it when a new
// one needs its place and it has the fewest calls). Durations are in
// seconds.
type StatementStats = stats.StatementStats

// Latency is a distribution of sampled call durations, in seconds.
type Latency = stats.Latency

// HotKey is one of a statement's hottest keys: its calls that reached the
// sharing path (a Space-Saving count, over by at most Error), a hash of the
// key (stable within the process), and its arguments in print, each cut at
// 64 bytes and 256 in all. The arguments are kept in memory for this API
// (and Shield.SaveHotSet) only: they never go to a log or a metric, and the
// live page shows keyed hashes of them unless LivePageOptions.ShowArguments
// is set. Shield.Statements, seen only by the application, keeps them.
type HotKey = stats.HotKey

// stmtStats are one statement's counters.
type stmtStats = stats.Statement

// stmtTable is the Space-Saving table of a Shield's statements.
type stmtTable = stats.Table

// planNote is how a statement's last call was planned.
type planNote = stats.Plan

// stmtCall is one call of a statement on its way: its counters (nil when
// not counted), its outcome, when it began (zero when it is not timed), its
// key's hash and, for a statement whose texts differ in their constants,
// its text as sent (its hot key's, for pre-warming). An exec ends with
// st.Ended.
type stmtCall struct {
	st    *stmtStats
	out   outcome
	began time.Time
	key   uint64
	text  string
}

// callBegins counts a call of f's statement (query is the text as sent),
// before it is served.
func (s *engine) callBegins(f *fate, query string) {
	if s.opts.NoStatementStats {
		return
	}
	st, n := s.statements.Of(f.r, query, s.opts.Clock, stats.BypassOutcome(f.reason), key.Fingerprint)
	f.stat.st = st
	if st.Shaped() {
		f.stat.text = query
	}
	if n%sampleEvery == 1 || st.Plan() == nil {
		f.stat.began = time.Now()
		pol := &f.plan.pol
		st.NotePlan(planNote{Reason: f.reason, Detail: f.r.Reason, Soft: pol.Soft, Hard: pol.Hard, Cache: f.plan.cache,
			Cacheable: f.cacheable, NoCache: pol.NoCache, Name: pol.Name, Tables: f.tables, Known: f.known})
	}
}

// callEnds records how f's call was served: its outcome (a bypass's
// reason, if it was decided before sharing), its latency, its error, and,
// for a statement that runs uncached though it could be cached, whether its
// key was seen recently (for Advice). It is deferred: errp points to the
// call's error.
func (s *engine) callEnds(c *conn, f *fate, errp *error) {
	sc := &f.stat
	st := sc.st
	if st == nil {
		return
	}
	out := sc.out
	if out == outNone {
		out = stats.BypassOutcome(f.reason)
	}
	st.Ended(out, sc.began, *errp != nil)
	if sc.text != "" && sc.key != 0 {
		st.NoteKeyText(sc.key, sc.text) // the shape's texts differ: each key keeps its own
	}
	if out == outNone {
		return
	}
	if f.plan.cache || !f.cacheable || f.plan.pol.NoCache || (out != outMiss && out != outBypassPolicy) {
		return
	}
	if sc.key == 0 {
		// Off by policy: not keyed on the way, so keyed here.
		var buf [256]byte
		key, ok := key.Append(buf[:0], c.sc.id, f.part, f.r.Normalized, f.args)
		if !ok {
			return
		}
		sc.key = stats.KeyHash(key)
	}
	now := s.opts.Clock.Now()
	st.RepeatTable(now).See(sc.key, now)
}

// execBegins counts an exec of r; the caller ends it with its st.Ended.
func (s *engine) execBegins(r *sqlscan.Result, query string) stmtCall {
	if s.opts.NoStatementStats {
		return stmtCall{}
	}
	st, n := s.statements.Of(r, query, s.opts.Clock, outBypassExec, key.Fingerprint)
	sc := stmtCall{st: st, out: outBypassExec}
	if n%sampleEvery == 1 {
		sc.began = time.Now()
		if p := st.Plan(); p == nil || p.Reason != bypassExec {
			st.SetPlan(&planNote{Reason: bypassExec, Detail: r.Reason, Tables: r.Writes, Known: r.TablesKnown})
		}
	}
	return sc
}

// bypass counts a read that leaves the sharing path for reason, before it
// runs on the caller's connection.
func (f *fate) bypass(s *engine, reason string) {
	s.stats.bypassed.Add(reason)
	f.stat.out = stats.BypassOutcome(reason)
}

// Statements returns the statistics of the statements s counts (at most
// 256, see StatementStats), most called first. It is safe to call at any
// time; each statement is read with atomics, not as one snapshot. It
// returns nil when Options.NoStatementStats is set.
func (s *Shield) Statements() []StatementStats { return s.statements.Exports() }
