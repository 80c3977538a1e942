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
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
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
func (s *Shield) route(ctx context.Context, c *conn, r *sqlscan.Result, args []driver.NamedValue, f *fate) error {
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
func (s *Shield) routeQuiet(ctx context.Context, c *conn, r *sqlscan.Result, ask bool) *fate {
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
func (s *Shield) decide(ctx context.Context, c *conn, f *fate, annotated bool, args []driver.NamedValue, ask bool) {
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
	if ask {
		in.Verdict = func() (route.Verdict, bool) {
			f.v = c.sc.verdicts.Of(r)
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
	}
	p := route.Decide(in)
	f.reason, f.plan.pol, f.plan.cache, f.cacheable = p.Reason, Policy(p.Policy), p.Cache, p.Cacheable
	f.tables, f.known = p.Tables, p.Known
	if f.reason != "" {
		return
	}
	// Tagged by the rows it reads when it depends on its filter's table
	// alone (as the server or its tables= annotation says).
	if v := f.v; v != nil && v.Rows != nil && f.known && len(f.tables) == 1 && epoch.TableKey(f.tables[0]) == v.Rows.Table {
		f.rows = v.Rows.Deps(args)
	}
}

// union returns the sorted union of a and b (route.Union).
func union(a, b []string) []string { return route.Union(a, b) }

// logBypass says at debug level, once per statement and reason, why a read
// was not shared.
func (s *Shield) logBypass(ctx context.Context, r *sqlscan.Result, reason string) {
	if !s.log.Enabled(ctx, slog.LevelDebug) || !s.warned.Add(reason+"\x00"+r.Normalized, time.Now(), time.Hour) {
		return
	}
	s.log.DebugContext(ctx, "sqlflight: statement not shared",
		"reason", reason, "scanner", r.Reason, "fingerprint", key.Fingerprint(r.Normalized))
}

// annotationOf parses r's annotation and reports whether it has a good one.
// A malformed one is counted and warned about once per statement; it yields
// false, or an error wrapping ErrBadAnnotation under Options.Strict.
func (s *Shield) annotationOf(r *sqlscan.Result) (annotation.Annotation, bool, error) {
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
	if s.warned.Add(r.Normalized, time.Now(), 24*time.Hour) {
		s.log.Warn("sqlflight: malformed annotation; statement runs unshared",
			"error", err, "fingerprint", key.Fingerprint(r.Normalized))
	}
	return annotation.Annotation{}, false, nil
}

// The other half of a fate: what a statement that ran may have written.

// write is what a statement may have changed: tables as a whole (known
// false: any table), and rows of other tables.
type write struct {
	tables []string
	known  bool
	rows   []rowWrite
}

// record applies what the statements of f did to the connection: they
// began or ended a transaction, changed session state, or wrote tables.
// failed says the text returned an error; its effects are then assumed to
// have happened where that is the safe side. Outside a transaction, for a
// statement whose rows follow (f.rowsFollow), it returns the writes it
// started, which passRows finishes (and the fleet hears of) once the
// statement is complete.
func (c *conn) record(ctx context.Context, f *fate, failed bool) []write {
	r := f.r
	var done []write
	rolledBackTo := false // ROLLBACK TO SAVEPOINT (or, in a text of several statements, maybe)
	for i := range r.Statements {
		st := &r.Statements[i]
		switch st.Tx {
		case sqlscan.TxBegin:
			if !failed || len(r.Statements) > 1 {
				c.sqlTx = true
				c.beginTxSession()
			}
		case sqlscan.TxCommit:
			c.endTx(true)
		case sqlscan.TxRollback:
			c.endTx(false)
		}
		if st.Chain && st.Tx != sqlscan.TxNone {
			c.sqlTx = true // COMMIT/ROLLBACK AND CHAIN: a new transaction begins at once
			c.beginTxSession()
		}
		if st.Kind == sqlscan.KindSavepoint && (len(r.Statements) > 1 || route.RollbackTo(r)) {
			rolledBackTo = true
		}
		if st.Taints {
			c.changeSession(ctx, st.TempObjects, failed)
		}
		if st.ClearsTaint && !failed {
			c.resetSession()
		}
		if route.ChangesSchema(r, st) {
			// The schema changed (or may have): verdicts and closures
			// learned before are forgotten — now, and again when its
			// transaction ends (a probe in between saw the old schema).
			c.s.schemaGen.Add(1)
			if c.inTx() {
				c.txWrites.ddl = true
			}
		}
		if w, ok := c.writeOf(ctx, f, st); ok {
			if c.inTx() {
				c.txWrites.add(w)
			} else if f.rowsFollow {
				c.s.startWrite(w) // passRows.Close finishes it
				done = append(done, w)
			} else {
				c.s.bumpWrite(w)
			}
		}
	}
	if failed && len(r.Statements) > 1 {
		// Where a failed multi-statement text left the session is unknown.
		c.changeSession(ctx, false, true)
	}
	if len(r.Unknown) > 0 || (r.Kind == sqlscan.KindSelect && len(r.Statements) == 1) {
		// A function that is not proven IMMUTABLE or STABLE may have
		// changed the session (a tenant helper calling set_config), also
		// when the text failed after it ran.
		if f.fx.of(ctx, c, f).session {
			c.changeSession(ctx, false, failed)
		}
	}
	if r.Kind == sqlscan.KindExplain && route.ExplainRuns(r) {
		// EXPLAIN ANALYZE runs its statement, and no verdict sees what it
		// calls through a view: a tenant helper may be among it.
		c.changeSession(ctx, false, failed)
	}
	if c.inTx() && c.txRelabeled && (failed || rolledBackTo) {
		// The transaction is aborted (a COMMIT rolls it back), or part of
		// it was undone: whether the change under a scope holds at its end
		// is unknown.
		c.txUndone = true
	}
	return done
}

// changeSession notes that the session changed: it becomes a session of the
// context's scope (WithScope), whose reads under that scope still share;
// under no scope, or with temporary objects (which shadow tables of the
// same name), it bypasses sharing until DISCARD ALL. failed says the
// statement returned an error: PostgreSQL undid its change with its
// transaction, or a text of several statements kept part of it, so a
// session that was not already one of the scope becomes unknown.
func (c *conn) changeSession(ctx context.Context, temp, failed bool) {
	defer c.held.Store(true)
	scope, ok := ScopeOf(ctx)
	same := c.scoped && c.sessionScope == scope
	switch {
	case c.tainted:
	case temp || !ok, failed && !same:
		c.tainted, c.scoped, c.sessionScope = true, false, ""
	default:
		// The application's word: what it changes under a scope sets
		// everything the scope's reads depend on, whatever came before.
		if c.inTx() && !same {
			c.txRelabeled = true
		}
		c.scoped, c.sessionScope = true, scope
	}
}

// resetSession notes DISCARD ALL: the session is as new.
func (c *conn) resetSession() {
	c.tainted, c.scoped, c.sessionScope = false, false, ""
	c.held.Store(false)
}

// beginTxSession notes what the session was when a transaction began: a
// rollback undoes the changes made under a scope in it (settings are
// transactional), and the session is again what it was.
func (c *conn) beginTxSession() {
	c.txScoped, c.txScope = c.scoped, c.sessionScope
	c.txRelabeled, c.txUndone = false, false
}

// endTx ends the transaction's bookkeeping; a commit bumps the epochs of
// every table written in it. A change under a scope made in the
// transaction is undone by a rollback, and is of unknown effect after a
// commit that may have rolled back (a failed statement, a rollback to a
// savepoint, a Commit that failed): the session is then unknown.
func (c *conn) endTx(commit bool) {
	if c.txWrites.ddl {
		c.s.schemaGen.Add(1)
	}
	if commit {
		c.s.bumpWrite(write{tables: c.txWrites.tables, known: !c.txWrites.all, rows: c.txWrites.rows})
	}
	if c.txRelabeled && !c.tainted {
		switch {
		case !commit:
			c.scoped, c.sessionScope = c.txScoped, c.txScope
			c.held.Store(c.scoped)
		case c.txUndone:
			c.tainted, c.scoped, c.sessionScope = true, false, ""
		}
	}
	c.txRelabeled, c.txUndone = false, false
	c.txWrites = writeSet{}
	c.sqlTx = false
}

// writeOf reports whether st (a statement of f) may have written, and
// what: for DDL, everything (the catalog included); for a SELECT that calls
// a user function the server says is VOLATILE (not vouched for by pure=),
// or whose verdict cannot be had, any table; for a read, nothing; for DML,
// the tables it names and what they reach through cascading foreign keys,
// inheritance, triggers and rules. A tables= annotation names the tables
// instead.
func (c *conn) writeOf(ctx context.Context, f *fate, st *sqlscan.Statement) (write, bool) {
	if st.Kind == sqlscan.KindDDL {
		return write{}, true // every cached read may describe the old schema
	}
	named := f.a.Set&annotation.SetTables != 0
	switch {
	case st.Kind == sqlscan.KindExplain && route.ExplainRuns(f.r):
		// EXPLAIN ANALYZE runs its statement, functions and all.
		if named {
			return write{tables: f.a.Fields.Tables, known: true}, true
		}
		return write{}, true
	case st.Kind == sqlscan.KindSelect && f.fx.of(ctx, c, f).write:
		if named {
			return write{tables: f.a.Fields.Tables, known: true}, true
		}
		return write{}, true
	case st.ReadOnly:
		return write{}, false
	case named:
		// The annotation's word on what it may change: its rows, when it
		// names the statement's one table.
		if rw, ok := rowlevel.WriteOf(f.r, st, f.args, c.sc.verdicts.NonStandard(), f.a.Fields.Tables, &c.s.rowCols, &c.s.schemaGen); ok {
			return write{known: true, rows: []rowWrite{rw}}, true
		}
		return write{tables: f.a.Fields.Tables, known: true}, true
	case !st.TablesKnown:
		return write{}, true
	case len(st.Writes) == 0:
		return write{}, false // a volatile built-in (random(), …) changes no table
	}
	tables, known := c.sc.verdicts.WriteClosure(ctx, st.Writes)
	if known {
		if rw, ok := rowlevel.WriteOf(f.r, st, f.args, c.sc.verdicts.NonStandard(), tables, &c.s.rowCols, &c.s.schemaGen); ok {
			// It writes only rows it names (its closure is its own table).
			return write{known: true, rows: []rowWrite{rw}}, true
		}
	}
	return write{tables: tables, known: known}, true
}

// callEffects is what the functions a text calls may have done: written
// tables it does not name, or changed the session. of asks (and waits for
// the server's verdict) once.
type callEffects struct {
	asked   bool
	write   bool
	session bool
}

// of returns the effects of f's functions. A SELECT may write, and may
// change the session, when it calls a user function the server says is
// VOLATILE that its pure= entry does not name (pure= vouches that a
// function has no side effect at all); it also changes the session when it
// calls a VOLATILE built-in that the scanner does not know to leave the
// session alone (set_config through a view), and it may write anything and
// change the session when it runs SQL given as a string (query_to_xml), or
// when its verdict is not known in time. Volatile built-ins the scanner
// knows (random(), clock_timestamp(), nextval, …) are never shared but
// write no table and change nothing a shared read sees; nextval and setval
// name their sequence to the scanner.
//
// Without the server's verdict — a parent that is not PostgreSQL, a server
// that refuses the probe, a text of several statements, a statement that
// is not a single SELECT, a probe that failed — the scanner judges: a
// function it cannot vouch for may write, and may change the session.
func (fx *callEffects) of(ctx context.Context, c *conn, f *fate) callEffects {
	if fx.asked {
		return *fx
	}
	fx.asked = true
	r := f.r
	unvouched := len(r.Unknown) > 0 && !route.AllPure(f.a.Pure, r.Unknown)
	// The scanner's view, until the server says otherwise.
	fx.write, fx.session = unvouched, unvouched
	if !c.sc.verdicts.Asks() || len(r.Statements) != 1 || r.Kind != sqlscan.KindSelect {
		// A verdict is asked for single SELECTs only.
		return *fx
	}
	v := f.v
	if v == nil {
		v = c.sc.verdicts.Of(r)
	}
	switch {
	case !v.Await(ctx):
		// Not known in time: it may have done anything.
		fx.write, fx.session = true, true
		return *fx
	case v.Err != nil:
		// The server could not plan it (a missing table, a temporary
		// table of this session, a lock): the scanner's view.
		return *fx
	}
	fx.write, fx.session = false, false
	for _, fn := range v.Server.Functions {
		switch {
		case fn.Builtin && pgverdict.RunsSQL(fn.Name):
			// query_to_xml('SELECT my_writer()', …)
			fx.write, fx.session = true, true
		case fn.Volatility != "volatile":
		case !fn.Builtin:
			if !route.PureNames(f.a.Pure, fn.Schema+"."+fn.Name) {
				fx.write, fx.session = true, true
			}
		case !sqlscan.SessionNeutral(fn.Name):
			fx.session = true
		}
	}
	return *fx
}

// writeSet accumulates what a transaction wrote.
type writeSet struct {
	all    bool
	ddl    bool // it changed the schema
	tables []string
	rows   []rowWrite
}

func (w *writeSet) add(wr write) {
	if !wr.known {
		w.all = true
		return
	}
	w.tables = append(w.tables, wr.tables...)
	for _, rw := range wr.rows {
		if len(w.rows) >= rowlevel.MaxTxRows {
			w.tables = append(w.tables, rw.Table) // too many to remember: the table
			continue
		}
		w.rows = append(w.rows, rw)
	}
}
