package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// fakeDriver is a scriptable parent driver: every query goes to onQuery,
// every exec to onExec. It counts what reached "the database".
type fakeDriver struct {
	onQuery func(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error)
	onExec  func(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error)

	opened, closed, queries, execs atomic.Int64
}

func (d *fakeDriver) Open(string) (driver.Conn, error) {
	d.opened.Add(1)
	return &fakeConn{d: d}, nil
}

type fakeConn struct {
	d      *fakeDriver
	mu     sync.Mutex
	inUse  bool
	closed bool
}

func (c *fakeConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (c *fakeConn) Close() error {
	c.d.closed.Add(1)
	c.closed = true
	return nil
}
func (c *fakeConn) Begin() (driver.Tx, error) { return fakeTx{}, nil } //nolint:staticcheck

func (c *fakeConn) enter() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inUse {
		panic("fakeConn used concurrently")
	}
	c.inUse = true
}

func (c *fakeConn) exit() {
	c.mu.Lock()
	c.inUse = false
	c.mu.Unlock()
}

func (c *fakeConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.enter()
	defer c.exit()
	if q == pgverdict.VersionQuery {
		// Not PostgreSQL: the question of PostgresVersion is answered as
		// another database would, and reaches no test's counters.
		return nil, errors.New("fake: no such function current_setting")
	}
	c.d.queries.Add(1)
	if c.d.onQuery == nil {
		return &fakeRows{cols: []string{"n"}, rows: [][]driver.Value{{int64(1)}}}, nil
	}
	return c.d.onQuery(ctx, q, args)
}

func (c *fakeConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.enter()
	defer c.exit()
	c.d.execs.Add(1)
	if c.d.onExec == nil {
		return driver.RowsAffected(1), nil
	}
	return c.d.onExec(ctx, q, args)
}

type fakeTx struct{}

func (fakeTx) Commit() error   { return nil }
func (fakeTx) Rollback() error { return nil }

type fakeRows struct {
	cols []string
	rows [][]driver.Value
	i    int
	next func(dest []driver.Value) error // overrides rows when set
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.next != nil {
		return r.next(dest)
	}
	if r.i >= len(r.rows) {
		return io.EOF
	}
	copy(dest, r.rows[r.i])
	r.i++
	return nil
}

var fakeSeq atomic.Int64

// openFake opens a *sql.DB on a fresh fakeDriver wrapped by a new Shield.
func openFake(t testing.TB, d *fakeDriver, opts ...Option) (*sql.DB, *Shield) {
	t.Helper()
	s := New(opts...)
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(d), dsn: "fake"})
	t.Cleanup(func() { _ = db.Close() })
	return db, s
}

// dsnConnector opens connections through a driver's Open, as database/sql
// does for a driver without DriverContext.
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }
