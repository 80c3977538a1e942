package sqlflight

import (
	"context"
	"database/sql/driver"
	"log/slog"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/route"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// The fate of a statement, decided in one place: scan → the server's
// verdict → policy → plan for a read; and, once a statement has run, what it
// may have written. The connection (conn.go) only asks.

// Reasons a statement bypasses sharing (Stats.BypassReasons). Each one is
// documented on Stats.BypassReasons, in docs/configuration.md ("Options and stats") and
// listed in prom.BypassReasons. They are route's reasons (route.ReasonExec,
// …), spelled out here for the tests that read this file; a test checks that
// the two agree.
const (
	bypassExec          = "exec"
	bypassTx            = "transaction"
	bypassSession       = "session"
	bypassWrite         = "write"
	bypassNotShareable  = "not shareable"
	bypassUnverified    = "unverified"
	bypassPolicy        = "policy"
	bypassArgs          = "arguments"
	bypassTooLarge      = "too large"
	bypassBusy          = "busy connection"
	bypassBadAnnotation = "bad annotation"
)

// plan is how a shareable read goes: its policy, and whether its result
// may be cached.
type plan struct {
	pol   Policy
	cache bool
	// onFailure, when set, hears of a failed origin (background refreshes).
	onFailure func(error)
}

// beta is the XFetch factor of the plan's policy (default 1, off below 0).
func (p *plan) beta() float64 {
	switch b := p.pol.Beta; {
	case b == 0:
		return 1
	case b < 0:
		return 0
	default:
		return b
	}
}

// fate is what becomes of one statement.
type fate struct {
	r *sqlscan.Result
	a annotation.Annotation // its annotation (zero when it has none or a bad one)
	v *verdict              // the server's verdict, when one was asked for

	// reason is why it goes straight to the database; "" means it is
	// shared under plan, depending on tables (known false: any table),
	// keyed under part.
	reason string
	plan   plan
	tables []string
	known  bool
	part   partition

	// rows are the rows of its one table a shared read depends on (nil:
	// every row); args are the statement's arguments, for what a write
	// proves about the rows it touched.
	rows *rowDeps
	args []driver.NamedValue

	fx callEffects // what its functions may have done, once asked

	// rowsFollow marks a statement whose rows its caller reads next: what
	// it wrote is complete, and told to the fleet, only when they close.
	rowsFollow bool

	// cacheable: its verdict lets a TTL cache it; stat: its statistics
	// (stmtstats.go).
	cacheable bool
	stat      stmtCall
}

// scan returns the scanner's view of query as the scope's server reads it.
func (c *conn) scan(query string) *sqlscan.Result {
	if c.sc.verdicts.NonStandard() {
		return sqlscan.ScanNonStandard(query)
	}
	return sqlscan.Scan(query)
}

// route decides the fate of a read on c. An error (only under
// Options.Strict) fails the statement.
func (s *engine) route(ctx context.Context, c *conn, r *sqlscan.Result, args []driver.NamedValue, f *fate) error {
	a, annotated, err := s.annotationOf(r)
	if err != nil {
		return err
	}
	*f = fate{r: r, a: a, args: args}
	s.decide(ctx, c, f, annotated, args, true)
	return nil
}

// routeQuiet is route without counting or warning about the annotation,
// and without asking the server unless ask (for Explain).
func (s *engine) routeQuiet(ctx context.Context, c *conn, r *sqlscan.Result, ask bool) *fate {
	f := &fate{r: r}
	annotated := false
	if r.HasAnnotation {
		p := annotation.Of(r)
		a, err := p.A, p.Err
		annotated = err == nil
		if annotated {
			f.a = a
		}
	}
	s.decide(ctx, c, f, annotated, nil, ask)
	return f
}

// decide fills in f's reason, plan and dependencies: route.Decide on the
// connection's state, the policy below the annotation and, when ask, the
// server's verdict.
func (s *engine) decide(ctx context.Context, c *conn, f *fate, annotated bool, args []driver.NamedValue, ask bool) {
	r := f.r
	f.part.Scope, f.part.Set = ScopeOf(ctx)
	f.part.Session = c.scoped
	cs := route.Conn{
		InTx: c.inTx(), Tainted: c.tainted, Scoped: c.scoped, SessionScope: c.sessionScope,
		ScopeSet: f.part.Set, Scope: f.part.Scope, OpenRows: c.openRows.Load() > 0,
	}
	if f.reason = route.Gate(r, annotated, cs); f.reason != "" {
		return
	}
	pol, _ := s.basePolicy(ctx, r.Tables, r.Normalized)
	in := route.Input{Scan: r, Annotated: annotated, Base: annotation.Fields(pol), Conn: cs, Args: args}
	if annotated {
		in.Annotation = f.a
	}
	var p route.Plan
	if !route.Begin(&in, &p) {
		// Asked here, not through in.Verdict: a closure would take f (the
		// caller's, on its stack) to the heap on every read.
		var v route.Verdict
		asked := false
		if ask {
			v, asked = c.verdictFor(ctx, f)
		}
		route.Finish(&in, &p, &v, asked)
	}
	f.reason, f.plan.pol, f.plan.cache, f.cacheable = p.Reason, Policy(p.Policy), p.Cache, p.Cacheable
	f.tables, f.known = p.Tables, p.Known
	if f.reason != "" {
		return
	}
	// Tagged by the rows it reads when it depends on its filter's table
	// alone (as the server or its tables= annotation says); by its own
	// text's filter, the verdict's being its shape's (rowlevel.go).
	if v := f.v; v != nil && v.Rows != nil && f.known && len(f.tables) == 1 && epoch.TableKey(f.tables[0]) == v.Rows.Table {
		if rf := c.sc.rowsOf(v, r); rf != nil {
			f.rows = rf.Deps(args)
		}
	}
}

// verdictFor asks the scope for the server's verdict on f's statement
// (kept in f.v) and waits for it as the caller may: asked is false when
// there is none to be had (the statement is judged on its text).
func (c *conn) verdictFor(ctx context.Context, f *fate) (route.Verdict, bool) {
	f.v = c.sc.verdicts.Of(f.r)
	v := f.v
	if v == nil {
		return route.Verdict{}, false // none to be had: judged on the text
	}
	if !c.awaitVerdict(ctx, v) || v.Err != nil {
		return route.Verdict{}, true
	}
	return route.Verdict{
		Verified: true, Volatile: v.Server.Volatile, PerSession: v.Server.PerSession,
		TimeDependent: v.Server.TimeDependent, UserFunctions: v.Server.UserFunctions,
		Tables: v.Tables, TablesKnown: v.Server.TablesKnown,
	}, true
}

// logBypass says at debug level, once per statement shape and reason, why
// a read was not shared.
func (s *engine) logBypass(ctx context.Context, r *sqlscan.Result, reason string) {
	if !s.log.Enabled(ctx, slog.LevelDebug) || !s.warned.Add(reason+"\x00"+r.ShapeKey, time.Now(), time.Hour) {
		return
	}
	s.log.DebugContext(ctx, "sqlflight: statement not shared",
		"reason", reason, "scanner", r.Reason, "fingerprint", key.Fingerprint(r.ShapeKey))
}

// annotationOf parses r's annotation and reports whether it has a good one.
// A malformed one is counted and warned about once per statement shape; it yields
// false, or an error wrapping ErrBadAnnotation under Options.Strict.
func (s *engine) annotationOf(r *sqlscan.Result) (annotation.Annotation, bool, error) {
	if !r.HasAnnotation {
		return annotation.Annotation{}, false, nil
	}
	p := annotation.Of(r)
	if p.Err == nil {
		return p.A, true, nil
	}
	err := p.Err
	s.stats.badAnnotations.Add(1)
	if s.opts.Strict {
		return annotation.Annotation{}, false, err
	}
	if s.warned.Add(r.ShapeKey, time.Now(), 24*time.Hour) {
		s.log.Warn("sqlflight: malformed annotation; statement runs unshared",
			"error", err, "fingerprint", key.Fingerprint(r.ShapeKey))
	}
	return annotation.Annotation{}, false, nil
}
