package sqlflight

// The write path: what a statement that ran may have written (recorded by
// its connection), and what a write ends — the epochs of its tables and
// rows here, and, with a shared tier, on every instance of the fleet.

import (
	"context"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/route"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

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

// epochs orders writes and flights: every write through the Shield (and
// every write another instance publishes) takes the next sequence number
// and stamps what it wrote; a flight remembers the sequence when it
// started, and may be joined only if none of its tables (or, for a tagged
// read, none of its rows) was written since. See internal/epoch.
type epochs = epoch.Epochs

const (
	// maxPinSets bounds the sets of pinned columns remembered per table;
	// a write with another set past it counts as a write to the whole table.
	maxPinSets = epoch.MaxPinSets
	// maxEpochTables bounds the tables whose epochs are kept one by one.
	maxEpochTables = epoch.MaxTables
)

// bump records a write through the Shield to tables (every table, when
// not known).
func (s *engine) bump(tables []string, known bool) {
	s.bumpWrite(write{tables: tables, known: known})
}

// bumpWrite records a write through the Shield (or reported by a feed):
// its tables as a whole, and the rows it proves it touched. The fleet hears
// of both: other instances apply the same row writes, and the shared
// tier's epochs keep them (within the bounds of a message; past them, a
// row write is published as a write to its table).
func (s *engine) bumpWrite(w write) {
	if s.startWrite(w) {
		s.publishWrite(w)
	}
}

// startWrite moves the local epochs for w and, with a shared tier, marks
// its tables until publishWrite tells the fleet: until then this process's
// reads of those tables leave the tier alone. It reports whether w wrote
// anything.
func (s *engine) startWrite(w write) bool {
	if w.known && len(w.tables) == 0 && len(w.rows) == 0 {
		return false
	}
	s.stats.invalidations.Add(1)
	s.writes.Note(w.tables, w.known, w.rows)
	if ts := s.tier; ts != nil {
		ts.BeginWrite(w.tables, w.known, w.rows)
	}
	s.epochs.BumpRows(w.tables, w.known, w.rows)
	return true
}

// publishWrite tells the fleet about w, started by startWrite.
func (s *engine) publishWrite(w write) {
	if ts := s.tier; ts != nil {
		ts.PublishWrite(w.tables, w.known, w.rows)
	}
}

// finishWrite ends a write that startWrite began when its statement
// returned, now that its rows are read and closed: the statement is
// complete. The local epochs move again, so that no flight started while
// it ran is joined after it, and the fleet is told once.
func (s *engine) finishWrite(w write) {
	if w.known && len(w.tables) == 0 && len(w.rows) == 0 {
		return
	}
	s.epochs.BumpRows(w.tables, w.known, w.rows)
	s.publishWrite(w)
}
