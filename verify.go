package sqlflight

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// The server's word. The scanner only filters: what it calls never
// shareable stays never, and everything it would share is confirmed by
// PostgreSQL's catalog once per statement shape and scope before its result
// is shared. The probe plans the statement as the body of a temporary
// SQL-standard function (BEGIN ATOMIC … END), with its parameters typed as
// the server infers them, inside a transaction that is always rolled back,
// on a spare connection of the scope; the function's recorded dependencies
// (pg_depend, through views' rewrite rules, operators and SQL-standard
// function bodies, recursively) name the user functions and relations it
// really reaches, and the deparsed texts (the body, view definitions,
// SQL-standard function bodies) name the built-in functions, which the
// catalog pins and so never records as dependencies. The probe and the
// catalog's other answers are internal/verdict's, and so is what a scope
// remembers of them (a pgverdict.Book); this file is the scope's side.

// FunctionVerdict is one function a statement really calls, as the server
// resolves it.
type FunctionVerdict = pgverdict.Function

// ServerVerdict is what PostgreSQL says a statement calls and reads.
type ServerVerdict = pgverdict.Statement

// verdict is the server's word on one statement shape in one scope, with
// its row filter (rowlevel.go).
type verdict = pgverdict.Verdict[*readFilter]

// verdictHost is what a scope's verdict Book needs of the scope sc of s.
type verdictHost struct {
	s  *engine
	sc *scope
}

// Postgres reports whether the scope's server is PostgreSQL.
func (h verdictHost) Postgres() bool { return h.sc.postgres }

// SchemaGen is the Shield's schema generation.
func (h verdictHost) SchemaGen() uint64 { return h.s.schemaGen.Load() }

// Spare runs f on a spare real connection of the scope (never a caller's)
// and gives it back, broken if f failed in a way that may have left the
// session dirty.
func (h verdictHost) Spare(ctx context.Context, f func(pgverdict.Session) error) error {
	spare := &h.sc.spare
	var rc driver.Conn
	var err error
	if p := h.sc.catalogPool.Load(); p != nil && poolFull(p) {
		// Every connection of the pool is out (transactions may hold
		// them all while they wait for this): one of the scope's own.
		spare = &h.sc.catalog
		rc, _, err = spare.Get(ctx)
	} else {
		rc, _, err = h.sc.anyReal(ctx, h.s)
	}
	if err != nil {
		return err
	}
	broken := true // unless f returns normally and leaves the session idle
	defer func() { spare.Put(rc, broken) }()
	c := pgverdict.Of(rc)
	err = f(c)
	broken = !c.Clean()
	return err
}

// Rows returns the row filter of r, the text the verdict v's probe planned,
// learning the classes of its table's columns from the catalog (the Shield
// remembers them for the writes and changes to that table), or nil when its
// reads are judged by their table. The other texts of v's statement shape
// derive their own from it (rowsOf).
func (h verdictHost) Rows(ctx context.Context, conn pgverdict.Session, r *sqlscan.Result, v *verdict) *readFilter {
	rf, table := rowlevel.FilterOf(r, h.sc.verdicts.NonStandard())
	if rf == nil {
		return nil
	}
	cols, err := pgverdict.QueryColumns(ctx, conn, table)
	if err != nil {
		return nil
	}
	h.s.rowCols.Set(table, cols, v.Gen)
	return rowlevel.NewReadFilter(rf, table, cols, v.Params)
}

// Probed counts a probe and warns of its failure.
func (h verdictHost) Probed(r *sqlscan.Result, took time.Duration, err error, refused bool) {
	s := h.s
	s.stats.probes.Add(1)
	s.stats.probeDuration.Observe(took)
	if refused {
		s.log.Warn("sqlflight: the server refuses the probe (a hot standby, a read-only default, or no TEMPORARY privilege); this scope's verdicts are the scanner's alone",
			"error", errText.Class(err))
	}
	if err != nil {
		s.stats.probeFailures.Add(1)
		s.warned.Warn(s.log, "probe", r.ShapeKey, "sqlflight: the server's verdict on a statement could not be had; it runs unshared",
			"error", errText.Class(err), "fingerprint", key.Fingerprint(r.ShapeKey))
	}
}

// Busy counts a probe not run: too many waited.
func (h verdictHost) Busy() { h.s.stats.probeFailures.Add(1) }

// awaitVerdict is v.Await on c's caller. Under Options.MaxConns its real
// connection is lendable meanwhile: the probe may need it.
func (c *conn) awaitVerdict(ctx context.Context, v *verdict) bool {
	if v.Known() || c.sc.spare.Max <= 0 {
		return v.Await(ctx)
	}
	c.offer()
	defer c.withdraw()
	return v.Await(ctx)
}
