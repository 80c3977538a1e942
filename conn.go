package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sqlflight/sqlflight/internal/dbqueue"
	"github.com/sqlflight/sqlflight/internal/parent"
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
	// virtual returns the virtual connection itself.
	virtual() *conn
	// FaceQuery and FaceExec are what another face of the Shield (the
	// pgx face) calls (face.go).
	FaceQuery(ctx context.Context, query string, args []driver.NamedValue, share bool, run func(ctx context.Context, rc driver.Conn, args []driver.NamedValue) (driver.Rows, error)) (driver.Rows, error)
	FaceExec(ctx context.Context, queries []string, args [][]driver.NamedValue, run func(ctx context.Context, rc driver.Conn) error) (done func(), err error)
}

// conn is the virtual connection database/sql holds. It opens its real
// connection only when work must reach the database and keeps it for its own
// life. database/sql never uses a connection concurrently; the only other
// goroutine that touches conn is a detached origin query led from it, which
// holds the real connection while c.busy is set.
type conn struct {
	s    *engine
	sc   *scope
	open *opener // how it opens its real connection

	mu     sync.Mutex
	real   driver.Conn
	busy   chan struct{} // non-nil while an origin query uses real; closed when released
	closed bool
	// lost: the real connection of a changed session broke under an
	// origin query; another cannot stand in for it (driver.ErrBadConn).
	lost bool
	held atomic.Bool // the session holds changes (tainted or scoped)
	// The real connection is lendable (realpool.go) while c is idle in
	// database/sql's pool (idleInPool) or its caller only waits
	// (waitingOnly); pooled mirrors idleInPool for a cheap check.
	idleInPool  bool
	waitingOnly bool
	pooled      atomic.Bool
	// parkLater: c went back to database/sql's pool while an origin query
	// used its real connection; giveBack parks it (realpool.go) unless c
	// came out of the pool again first.
	parkLater bool
	// touched: the caller's own work reached the real connection since c
	// last came out of database/sql's pool. Its session may then hold what
	// no classification sees (currval, pg_backend_pid): a sql.Conn user
	// may count on it, so it is not lent while its caller waits.
	touched bool
	// owes is the flight whose result c's last caller took, until c goes
	// back to database/sql's pool or runs another statement
	// (flightGroup.joinOrLead).
	owes atomic.Pointer[flight]
	// gave names (flight.id) the flight c's last caller owed when c went
	// back to the pool. handed names it too if database/sql then handed c
	// to a caller waiting in its queue (internal/dbqueue); heir, for that
	// caller's first statement, is the flight it may still join as one of
	// the herd (flightGroup.joinOrLead). Zero: none.
	gave, handed, heir atomic.Uint64

	openRows atomic.Int32 // pass-through rows still reading from real
	stmts    int          // prepared statements bound to real

	// Owned by database/sql's goroutine.
	tx       *tx      // a transaction begun with BeginTx
	sqlTx    bool     // a transaction begun by BEGIN sent as SQL
	txWrites writeSet // tables written in the current transaction
	// tainted: the session changed in a way no context scope vouches for
	// (under no scope, temporary objects, Unwrap): every statement bypasses
	// sharing until DISCARD ALL.
	tainted bool
	// scoped: the session last changed under the context scope
	// sessionScope (WithScope); reads under that scope still share, with
	// the other sessions of the scope.
	scoped       bool
	sessionScope string
	// The session when the current transaction began (txScoped,
	// txScope); txRelabeled: a change under a scope made it a session of
	// another scope since; txUndone: a statement failed or a savepoint was
	// rolled back to after that.
	txScoped    bool
	txScope     string
	txRelabeled bool
	txUndone    bool
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

func newConn(s *engine, sc *scope, open *opener, real driver.Conn) driver.Conn {
	c := &conn{s: s, sc: sc, open: open, real: real}
	sc.live.Add(1)
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
	c.touched = true
	if rc := c.real; rc != nil {
		c.mu.Unlock()
		return rc, nil
	}
	lost := c.lost
	c.mu.Unlock()
	if lost {
		return nil, driver.ErrBadConn
	}
	for {
		rc, reused, err := c.anyReal(ctx)
		if err != nil {
			return nil, err
		}
		if reused {
			// What database/sql does before it hands out a pooled
			// connection (pgx pings one idle for over a second).
			if r, ok := rc.(driver.SessionResetter); ok {
				if err := r.ResetSession(ctx); err != nil {
					c.sc.spare.Close(rc)
					if errors.Is(err, driver.ErrBadConn) && ctx.Err() == nil {
						continue
					}
					return nil, err
				}
			}
		}
		c.mu.Lock()
		c.real = rc
		c.mu.Unlock()
		return rc, nil
	}
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
	rc, lost := c.real, c.lost
	c.mu.Unlock()
	if rc != nil {
		return rc, nil
	}
	if lost {
		return nil, driver.ErrBadConn
	}
	// No reset here: a dead connection fails the origin with
	// driver.ErrBadConn, and its followers try again.
	rc, _, err := c.anyReal(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.real = rc
	c.mu.Unlock()
	return rc, nil
}

// giveBack ends an origin's use of the real connection. A broken one is
// closed and forgotten: the next use opens another if the session was
// clean, and fails with driver.ErrBadConn if it held changes (a session of
// a context scope), which a new connection would not have. If the virtual
// connection was closed meanwhile, the real one is closed now.
func (c *conn) giveBack(broken bool) {
	c.mu.Lock()
	var spare driver.Conn
	switch {
	case c.real != nil && broken:
		c.sc.spare.Close(c.real)
		c.real = nil
		c.lost = c.lost || c.held.Load()
	case c.real != nil && c.closed:
		if c.swappable() {
			spare = c.real
		} else {
			c.sc.spare.Close(c.real)
		}
		c.real = nil
	}
	close(c.busy)
	c.busy = nil
	var park parking
	if c.parkLater {
		c.parkLater = false
		if !c.closed {
			park = c.parkLocked()
		}
	}
	c.mu.Unlock()
	if spare != nil {
		c.sc.spare.Put(spare, false)
	}
	park.finish()
}

// Close closes the real connection, or leaves that to the origin query
// still using it.
func (c *conn) Close() error {
	c.awake()
	c.s.flights.Release(c) // database/sql asks no IsValid of a connection that broke
	c.mu.Lock()
	last := !c.closed && c.sc.live.Add(-1) == 0
	c.closed = true
	rc := c.real
	if c.busy != nil {
		rc = nil // the origin using it puts it away (giveBack: c.closed)
	} else {
		c.real = nil
	}
	c.mu.Unlock()
	if last {
		c.sc.spare.CloseIdle() // the pool is gone or idle: no spare outlives it
		c.sc.catalog.CloseIdle()
		if f := c.sc.feed.Load(); f != nil {
			go f.PauseIfIdle() // nor its feed (the next Connect resumes it)
		}
	}
	switch {
	case rc == nil:
	case c.swappable() && !last:
		c.sc.spare.Put(rc, false) // a clean session: another may use it
	default:
		c.sc.spare.Close(rc)
	}
	return nil
}

func (c *conn) Unwrap() driver.Conn {
	rc, err := c.use(context.Background())
	if err != nil {
		return nil
	}
	c.tainted, c.scoped, c.sessionScope = true, false, ""
	c.held.Store(true)
	return rc
}

func (c *conn) virtual() *conn { return c }

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
	c.statement()
	probe, err := c.admit(false)
	if err != nil {
		return nil, err
	}
	rc, err := c.use(ctx)
	if err == nil && probe {
		rc, err = c.forProbe(ctx, rc, true, c.use)
	}
	if err != nil {
		c.sc.guard.Breaker.Record(probe, err)
		return nil, err
	}
	defer func() { c.sc.guard.Breaker.Record(probe, err) }()
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
	c.beginTxSession()
	return c.tx, nil
}

func (c *conn) Ping(ctx context.Context) error {
	c.statement()
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
	c.awake()
	if c.gave.Load() != 0 {
		if id := c.gave.Swap(0); id != 0 && dbqueue.FromQueue() {
			c.handed.Store(id)
		}
	}
	c.mu.Lock()
	rc, busy, lost := c.real, c.busy != nil, c.lost
	c.mu.Unlock()
	if lost {
		return driver.ErrBadConn
	}
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
		c.sc.spare.Close(rc)
		return nil
	}
	return err
}

// swappable reports whether the real connection can be replaced unseen: no
// session state, no transaction, no statement or rows bound to it.
func (c *conn) swappable() bool {
	return !c.tainted && !c.scoped && !c.inTx() && c.stmts == 0 && c.openRows.Load() == 0
}

// IsValid reports whether c may go back to database/sql's pool: not when
// its session's real connection was lost or died. database/sql calls it as
// it puts c back in its pool: from then until
// ResetSession the session cannot matter to anyone, and a clean real
// connection is lendable (realpool.go).
func (c *conn) IsValid() bool {
	back := c.goesBack()
	c.mu.Lock()
	rc, busy, lost := c.real, c.busy != nil, c.lost
	if lost {
		c.mu.Unlock()
		return false
	}
	if rc != nil && !busy { // the parent's to ask, outside the lock
		c.mu.Unlock()
		if v, ok := rc.(driver.Validator); ok && !v.IsValid() {
			if !c.swappable() {
				return false
			}
			c.mu.Lock()
			c.real = nil
			c.mu.Unlock()
			c.sc.spare.Close(rc)
		}
		c.mu.Lock()
	}
	var park parking
	if back {
		park = c.parkLocked()
	}
	c.mu.Unlock()
	park.finish()
	return true
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
	c.statement()
	c.s.stats.queries.Add(1)
	r := c.scan(query)
	call := c.s.execBegins(r, query)
	a, _, err := c.s.annotationOf(r)
	if err != nil {
		return nil, err
	}
	probe, err := c.admit(!r.ReadOnly)
	if err != nil {
		return nil, err
	}
	rc, err := c.use(ctx)
	if err == nil && probe {
		rc, err = c.forProbe(ctx, rc, true, c.use)
	}
	if err != nil {
		c.sc.guard.Breaker.Record(probe, err)
		return nil, err
	}
	res, err := parent.Exec(ctx, rc, query, args)
	c.sc.guard.Breaker.Record(probe, err)
	if err == driver.ErrSkip {
		return nil, err // database/sql prepares instead; the statement records it
	}
	c.s.stats.bypassed.Add(bypassExec)
	call.st.Ended(call.out, call.began, err != nil)
	c.record(ctx, &fate{r: r, a: a, args: args}, err != nil)
	return res, err
}

// QueryContext shares query with identical in-flight queries of the same
// scope when it is proven read-only and the connection is clean; otherwise
// it goes straight to the real connection.
func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.statement()
	c.s.stats.queries.Add(1)
	return c.query(ctx, query, c.scan(query), args, nil, "")
}

// query runs one read as route decides: shared through the cache and
// flights, or passed through. A read route would share is passed through
// all the same for reason pass, unless pass is "".
func (c *conn) query(ctx context.Context, query string, r *sqlscan.Result, args []driver.NamedValue, run runFunc, pass string) (_ driver.Rows, err error) {
	var f fate
	if err := c.s.route(ctx, c, r, args, &f); err != nil {
		return nil, err
	}
	if f.reason == "" {
		f.reason = pass
	}
	c.s.callBegins(&f, query)
	defer c.s.callEnds(c, &f, &err)
	if f.reason == "" {
		return c.s.share(ctx, c, query, &f, args, run)
	}
	c.s.stats.bypassed.Add(f.reason)
	c.s.logBypass(ctx, r, f.reason)
	return c.pass(ctx, query, &f, run, args)
}

// pass runs a statement on the real connection and records its effects.
func (c *conn) pass(ctx context.Context, query string, f *fate, run runFunc, args []driver.NamedValue) (driver.Rows, error) {
	probe, err := c.admit(!f.r.ReadOnly)
	if err != nil {
		return nil, err
	}
	rc, err := c.use(ctx)
	if err == nil && probe {
		rc, err = c.forProbe(ctx, rc, true, c.use)
	}
	if err != nil {
		c.sc.guard.Breaker.Record(probe, err)
		return nil, err
	}
	var rows driver.Rows
	if run == nil {
		rows, err = parent.Query(ctx, rc, query, args)
	} else {
		rows, err = run(ctx, rc, args)
	}
	c.sc.guard.Breaker.Record(probe, err)
	if err == driver.ErrSkip {
		return nil, err
	}
	f.rowsFollow = err == nil
	written := c.record(ctx, f, err != nil)
	if err != nil {
		return nil, err
	}
	c.openRows.Add(1)
	return newPassRows(c, rows, written), nil
}

// runFunc runs a read with args on the real connection rc; nil means
// "send the SQL text".
type runFunc func(ctx context.Context, rc driver.Conn, args []driver.NamedValue) (driver.Rows, error)

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
	if err != nil && t.c.txRelabeled {
		t.c.txUndone = true // it may have rolled back
	}
	t.c.endTx(true)
	return err
}

func (t *tx) Rollback() error {
	err := t.parent.Rollback()
	t.c.tx = nil
	relabeled := t.c.txRelabeled && !t.c.tainted
	t.c.endTx(false)
	if err != nil && relabeled {
		// Whether the transaction's change under a scope was undone is
		// unknown.
		t.c.tainted, t.c.scoped, t.c.sessionScope = true, false, ""
		t.c.held.Store(true)
	}
	return err
}
