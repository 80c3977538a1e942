package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// connBase is what every virtual connection implements, whatever its parent.
type connBase interface {
	driver.Conn
	// Unwrap returns the real connection, opening it if needed, so that
	// (*sql.Conn).Raw users reach the parent driver's connection (for pgx,
	// *stdlib.Conn). Anything done on it may change session state, so from
	// then on the connection bypasses sharing. It returns nil if the real
	// connection cannot be opened.
	Unwrap() driver.Conn
}

// conn is the virtual connection database/sql holds. It opens its real
// connection only when work must reach the database and keeps it for its own
// life. database/sql never uses a connection concurrently; the only other
// goroutine that touches conn is a detached origin query led from it, which
// holds the real connection while c.busy is set.
type conn struct {
	s    *Shield
	sc   *scope
	open func(context.Context) (driver.Conn, error)

	mu     sync.Mutex
	real   driver.Conn
	busy   chan struct{} // non-nil while an origin query uses real; closed when released
	closed bool

	openRows atomic.Int32 // pass-through rows still reading from real
	stmts    int          // prepared statements bound to real

	// Owned by database/sql's goroutine.
	tx       *tx      // a transaction begun with BeginTx
	sqlTx    bool     // a transaction begun by BEGIN sent as SQL
	txWrites writeSet // tables written in the current transaction
	tainted  bool     // session state changed: bypass until DISCARD ALL
}

var (
	_ connBase                  = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

func newConn(s *Shield, sc *scope, open func(context.Context) (driver.Conn, error), real driver.Conn) driver.Conn {
	c := &conn{s: s, sc: sc, open: open, real: real}
	return mirrorConn(c, sc.mask)
}

// use returns the real connection for work done on the caller's goroutine,
// waiting (on ctx) for a detached origin query to release it and opening it
// if needed.
func (c *conn) use(ctx context.Context) (driver.Conn, error) {
	c.mu.Lock()
	for c.busy != nil {
		ch := c.busy
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
	}
	if rc := c.real; rc != nil {
		c.mu.Unlock()
		return rc, nil
	}
	c.mu.Unlock()
	rc, err := c.openReal(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.real = rc
	c.mu.Unlock()
	return rc, nil
}

func (c *conn) openReal(ctx context.Context) (driver.Conn, error) {
	rc, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	c.s.stats.realOpened.Add(1)
	c.s.stats.realConns.Add(1)
	return rc, nil
}

func (c *conn) closeReal(rc driver.Conn) error {
	c.s.stats.realConns.Add(-1)
	return rc.Close()
}

// waitIdle waits for an origin query using the real connection to finish
// (bounded by the origin's timeout), for work that has no context.
func (c *conn) waitIdle() {
	c.mu.Lock()
	for c.busy != nil {
		ch := c.busy
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
	}
	c.mu.Unlock()
}

// lendToOrigin marks the real connection busy for an origin query led from
// this connection. It waits (on ctx) for a previous origin to finish.
func (c *conn) lendToOrigin(ctx context.Context) error {
	c.mu.Lock()
	for c.busy != nil {
		ch := c.busy
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	c.busy = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// originConn returns the real connection for the origin query, opening it
// on the origin's context if needed. Only the origin goroutine calls it,
// between lendToOrigin and giveBack.
func (c *conn) originConn(ctx context.Context) (driver.Conn, error) {
	c.mu.Lock()
	rc := c.real
	c.mu.Unlock()
	if rc != nil {
		return rc, nil
	}
	rc, err := c.openReal(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.real = rc
	c.mu.Unlock()
	return rc, nil
}

// giveBack ends an origin's use of the real connection. A broken one is
// closed and forgotten (the next use opens another: the session was clean,
// so nothing is lost); if the virtual connection was closed meanwhile, the
// real one is closed now.
func (c *conn) giveBack(broken bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real != nil && (broken || c.closed) {
		_ = c.closeReal(c.real)
		c.real = nil
	}
	close(c.busy)
	c.busy = nil
}

// Close closes the real connection, or leaves that to the origin query
// still using it.
func (c *conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.busy != nil || c.real == nil {
		return nil
	}
	rc := c.real
	c.real = nil
	return c.closeReal(rc)
}

func (c *conn) Unwrap() driver.Conn {
	rc, err := c.use(context.Background())
	if err != nil {
		return nil
	}
	c.tainted = true
	return rc
}

func (c *conn) inTx() bool { return c.tx != nil || c.sqlTx }

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins a transaction on the real connection. Until it ends every
// statement on this connection goes straight to the database; its writes
// bump table epochs when it commits.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	probe, err := c.admit(false)
	if err != nil {
		return nil, err
	}
	rc, err := c.use(ctx)
	if err != nil {
		c.s.guard.br.record(probe, err)
		return nil, err
	}
	defer func() { c.s.guard.br.record(probe, err) }()
	var ptx driver.Tx
	if bt, ok := rc.(driver.ConnBeginTx); ok {
		ptx, err = bt.BeginTx(ctx, opts)
	} else {
		// What database/sql does for a driver without ConnBeginTx.
		switch {
		case opts.Isolation != driver.IsolationLevel(0):
			err = errNotRun
			return nil, errors.New("sql: driver does not support non-default isolation level")
		case opts.ReadOnly:
			err = errNotRun
			return nil, errors.New("sql: driver does not support read-only transactions")
		}
		ptx, err = rc.Begin() //nolint:staticcheck // the parent has nothing else
	}
	if err != nil {
		return nil, err
	}
	c.tx = &tx{c: c, parent: ptx}
	return c.tx, nil
}

func (c *conn) Ping(ctx context.Context) error {
	rc, err := c.use(ctx)
	if err != nil {
		return err
	}
	if p, ok := rc.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// ResetSession forwards to the real connection when there is one and no
// origin query is using it. A clean session whose real connection broke just
// forgets it: the next use opens another.
func (c *conn) ResetSession(ctx context.Context) error {
	c.mu.Lock()
	rc, busy := c.real, c.busy != nil
	c.mu.Unlock()
	if rc == nil || busy {
		return nil
	}
	r, ok := rc.(driver.SessionResetter)
	if !ok {
		return nil
	}
	err := r.ResetSession(ctx)
	if errors.Is(err, driver.ErrBadConn) && c.swappable() {
		c.mu.Lock()
		c.real = nil
		c.mu.Unlock()
		_ = c.closeReal(rc)
		return nil
	}
	return err
}

// swappable reports whether the real connection can be replaced unseen: no
// session state, no transaction, no statement or rows bound to it.
func (c *conn) swappable() bool {
	return !c.tainted && !c.inTx() && c.stmts == 0 && c.openRows.Load() == 0
}

func (c *conn) IsValid() bool {
	c.mu.Lock()
	rc, busy := c.real, c.busy != nil
	c.mu.Unlock()
	if rc == nil || busy {
		return true
	}
	v, ok := rc.(driver.Validator)
	if !ok || v.IsValid() {
		return true
	}
	if c.swappable() {
		c.mu.Lock()
		c.real = nil
		c.mu.Unlock()
		_ = c.closeReal(rc)
		return true
	}
	return false
}

// CheckNamedValue forwards to the parent's checker (mirrored only when the
// parent has one). Without a real connection it asks the scope's prototype
// connection: drivers' checkers depend on configuration, not on the session.
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	c.mu.Lock()
	rc := c.real
	c.mu.Unlock()
	if rc == nil {
		rc = c.sc.proto
	}
	if chk, ok := rc.(driver.NamedValueChecker); ok {
		return chk.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// ExecContext runs query on the real connection and records what it did:
// transaction state, session state, and (once it has run) the tables it
// wrote, whose epochs are bumped so no caller joins an older flight.
func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.s.stats.queries.Add(1)
	r := sqlscan.Scan(query)
	if _, _, err := c.s.annotationOf(r); err != nil {
		return nil, err
	}
	probe, err := c.admit(!r.ReadOnly || c.mayWrite(r))
	if err != nil {
		return nil, err
	}
	rc, err := c.use(ctx)
	if err != nil {
		c.s.guard.br.record(probe, err)
		return nil, err
	}
	if r.ReadOnly && len(r.Unknown) > 0 {
		c.sc.vouch(ctx, c, r.Unknown) // learn whether it may write
	}
	res, err := execOn(ctx, rc, query, args)
	c.s.guard.br.record(probe, err)
	if err == driver.ErrSkip {
		return nil, err // database/sql prepares instead; the statement records it
	}
	c.s.stats.bypass(bypassExec)
	c.record(r, err != nil)
	return res, err
}

// QueryContext shares query with identical in-flight queries of the same
// scope when it is proven read-only and the connection is clean; otherwise
// it goes straight to the real connection.
func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.s.stats.queries.Add(1)
	r := sqlscan.Scan(query)
	return c.query(ctx, query, r, args, nil)
}

// query routes one read: shared through the cache and flights, or passed
// through.
func (c *conn) query(ctx context.Context, query string, r *sqlscan.Result, args []driver.NamedValue, run runFunc) (driver.Rows, error) {
	reason, p, err := c.s.route(ctx, c, r)
	if err != nil {
		return nil, err
	}
	if reason == "" {
		return c.s.share(ctx, c, query, r, p, args, run)
	}
	c.s.stats.bypass(reason)
	c.s.logBypass(ctx, r, reason)
	return c.pass(ctx, query, r, run, args)
}

// pass runs a statement on the real connection and records its effects.
func (c *conn) pass(ctx context.Context, query string, r *sqlscan.Result, run runFunc, args []driver.NamedValue) (driver.Rows, error) {
	probe, err := c.admit(!r.ReadOnly || c.mayWrite(r))
	if err != nil {
		return nil, err
	}
	rc, err := c.use(ctx)
	if err != nil {
		c.s.guard.br.record(probe, err)
		return nil, err
	}
	var rows driver.Rows
	if run == nil {
		rows, err = queryOn(ctx, rc, query, args)
	} else {
		rows, err = run(ctx, rc, args)
	}
	c.s.guard.br.record(probe, err)
	if err == driver.ErrSkip {
		return nil, err
	}
	c.record(r, err != nil)
	if err != nil {
		return nil, err
	}
	c.openRows.Add(1)
	return newPassRows(c, rows, r), nil
}

// runFunc runs a read with args on the real connection rc; nil means
// "send the SQL text".
type runFunc func(ctx context.Context, rc driver.Conn, args []driver.NamedValue) (driver.Rows, error)

// record applies what the statements of r did to the connection: they began
// or ended a transaction, changed session state, or wrote tables. failed
// says the text returned an error; its effects are then assumed to have
// happened where that is the safe side.
func (c *conn) record(r *sqlscan.Result, failed bool) {
	mayWrite := c.mayWrite(r)
	for i := range r.Statements {
		st := &r.Statements[i]
		switch st.Tx {
		case sqlscan.TxBegin:
			if !failed || len(r.Statements) > 1 {
				c.sqlTx = true
			}
		case sqlscan.TxCommit:
			c.endTx(true)
		case sqlscan.TxRollback:
			c.endTx(false)
		}
		if st.Chain && st.Tx != sqlscan.TxNone {
			c.sqlTx = true // COMMIT/ROLLBACK AND CHAIN: a new transaction begins at once
		}
		if st.Taints {
			c.tainted = true
		}
		if st.ClearsTaint && !failed {
			c.tainted = false
		}
		if tables, known, ok := writeTargets(r, st, mayWrite); ok {
			if c.inTx() {
				c.txWrites.add(tables, known)
			} else {
				c.s.bump(tables, known)
			}
		}
	}
	if failed && len(r.Statements) > 1 {
		// Where a failed multi-statement text left the session is unknown.
		c.tainted = true
	}
}

// endTx ends the transaction's bookkeeping; a commit bumps the epochs of
// every table written in it.
func (c *conn) endTx(commit bool) {
	if commit {
		c.s.bump(c.txWrites.tables, !c.txWrites.all)
	}
	c.txWrites = writeSet{}
	c.sqlTx = false
}

// mayWrite reports whether r's read-only statements may write after all: a
// SELECT calling functions nobody vouched for may write anywhere.
func (c *conn) mayWrite(r *sqlscan.Result) bool {
	return len(r.Unknown) > 0 && !c.sc.vouched(r.Unknown)
}

// writeTargets reports whether st may write and which tables it changes:
// those of a tables= annotation when there is one, else the scanner's
// (known false: any table).
func writeTargets(r *sqlscan.Result, st *sqlscan.Statement, mayWrite bool) (tables []string, known, ok bool) {
	if st.ReadOnly && !mayWrite {
		return nil, false, false
	}
	if r.HasAnnotation {
		if a, err := parseAnnotationCached(r.Annotation); err == nil && a.set&setTables != 0 {
			return a.p.Tables, true, true
		}
	}
	if st.ReadOnly {
		return nil, false, true
	}
	return st.Writes, st.TablesKnown, true
}

// writeSet accumulates the tables written in a transaction.
type writeSet struct {
	all    bool
	tables []string
}

func (w *writeSet) add(tables []string, known bool) {
	if !known {
		w.all = true
		return
	}
	w.tables = append(w.tables, tables...)
}

// tx wraps the parent's transaction to end the connection's bookkeeping.
type tx struct {
	c      *conn
	parent driver.Tx
}

var _ driver.Tx = (*tx)(nil)

// Commit commits and then bumps the epochs of the tables written in the
// transaction, also when Commit fails (its outcome may be unknown).
func (t *tx) Commit() error {
	err := t.parent.Commit()
	t.c.tx = nil
	t.c.endTx(true)
	return err
}

func (t *tx) Rollback() error {
	err := t.parent.Rollback()
	t.c.tx = nil
	t.c.endTx(false)
	return err
}

// execOn runs an exec on the parent, adapting a legacy Execer as
// database/sql would; driver.ErrSkip means "prepare instead".
func execOn(ctx context.Context, rc driver.Conn, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := rc.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	if e, ok := rc.(driver.Execer); ok { //nolint:staticcheck // legacy parent
		return legacy(ctx, args, func(vals []driver.Value) (driver.Result, error) { return e.Exec(query, vals) })
	}
	return nil, driver.ErrSkip
}

// queryOn runs a query on the parent, adapting a legacy Queryer as
// database/sql would; driver.ErrSkip means "prepare instead".
func queryOn(ctx context.Context, rc driver.Conn, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := rc.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	if q, ok := rc.(driver.Queryer); ok { //nolint:staticcheck // legacy parent
		return legacy(ctx, args, func(vals []driver.Value) (driver.Rows, error) { return q.Query(query, vals) })
	}
	return nil, driver.ErrSkip
}

// legacy calls a parent method that takes neither a context nor named
// arguments, as database/sql would: names are refused, and a context that
// already ended stops the call.
func legacy[T any](ctx context.Context, args []driver.NamedValue, call func([]driver.Value) (T, error)) (T, error) {
	var zero T
	vals, err := plainValues(args)
	if err != nil {
		return zero, err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	return call(vals)
}

func plainValues(args []driver.NamedValue) ([]driver.Value, error) {
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("sql: driver does not support the use of Named Parameters")
		}
		vals[i] = a.Value
	}
	return vals, nil
}

// Reasons a statement bypasses sharing (Stats.BypassReasons).
const (
	bypassExec          = "exec"
	bypassTx            = "transaction"
	bypassSession       = "session"
	bypassWrite         = "write"
	bypassNotShareable  = "not shareable"
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

// route decides whether a read on c may share, and under which plan. A
// non-empty reason means "pass it through"; an error (only under
// Options.Strict) fails the statement.
func (s *Shield) route(ctx context.Context, c *conn, r *sqlscan.Result) (string, plan, error) {
	a, annotated, err := s.annotationOf(r)
	if err != nil {
		return "", plan{}, err
	}
	return s.routeWith(ctx, c, r, a, annotated)
}

// routeQuiet is route without counting or warning about the annotation
// (for Explain).
func (s *Shield) routeQuiet(ctx context.Context, c *conn, r *sqlscan.Result) (string, plan, error) {
	var a annotation
	var err error
	annotated := false
	if r.HasAnnotation {
		a, err = parseAnnotationCached(r.Annotation)
		annotated = err == nil
	}
	return s.routeWith(ctx, c, r, a, annotated)
}

func (s *Shield) routeWith(ctx context.Context, c *conn, r *sqlscan.Result, a annotation, annotated bool) (string, plan, error) {
	switch {
	case !annotated && r.HasAnnotation:
		return bypassBadAnnotation, plan{}, nil
	case c.inTx():
		return bypassTx, plan{}, nil
	case c.tainted:
		return bypassSession, plan{}, nil
	case !r.ReadOnly:
		return bypassWrite, plan{}, nil
	case r.Verdict == sqlscan.Never:
		return bypassNotShareable, plan{}, nil
	case c.openRows.Load() > 0:
		return bypassBusy, plan{}, nil
	}
	pol, explicit := s.basePolicy(ctx, r.Tables, r.Normalized)
	optIn := explicit && (pol.Coalesce || pol.Soft > 0)
	explicitTTL := false
	if annotated {
		pol = a.merge(pol)
		optIn = optIn || a.set&(setCoalesce|setSoft) != 0
		explicitTTL = a.set&setSoft != 0
	}
	// Time-dependent results, and those of functions the scanner cannot
	// vouch for, are cached only under a TTL the statement itself states.
	p := plan{pol: pol, cache: pol.Soft > 0 && !pol.NoCache && (r.Verdict == sqlscan.Shareable || explicitTTL)}
	switch {
	case pol.Off:
		return bypassPolicy, p, nil
	case pol.NoCoalesce && !p.cache:
		return bypassPolicy, p, nil
	case r.Verdict == sqlscan.OptIn && !optIn && !c.sc.vouch(ctx, c, r.Unknown):
		return bypassNotShareable, p, nil
	}
	return "", p, nil
}

// logBypass says at debug level, once per statement and reason, why a read
// was not shared.
func (s *Shield) logBypass(ctx context.Context, r *sqlscan.Result, reason string) {
	if !s.log.Enabled(ctx, slog.LevelDebug) || !s.warned.add(reason+"\x00"+r.Normalized, time.Now(), time.Hour) {
		return
	}
	s.log.DebugContext(ctx, "sqlflight: statement not shared",
		"reason", reason, "scanner", r.Reason, "fingerprint", fingerprint(r.Normalized))
}

// annotationOf parses r's annotation and reports whether it has a good one.
// A malformed one is counted and warned about once per statement; it yields
// false, or an error wrapping ErrBadAnnotation under Options.Strict.
func (s *Shield) annotationOf(r *sqlscan.Result) (annotation, bool, error) {
	if !r.HasAnnotation {
		return annotation{}, false, nil
	}
	a, err := parseAnnotationCached(r.Annotation)
	if err == nil {
		return a, true, nil
	}
	s.stats.badAnnotations.Add(1)
	if s.opts.Strict {
		return annotation{}, false, err
	}
	if s.warned.add(r.Normalized, time.Now(), 24*time.Hour) {
		s.log.Warn("sqlflight: malformed annotation; statement runs unshared",
			"error", err, "fingerprint", fingerprint(r.Normalized))
	}
	return annotation{}, false, nil
}
