package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// The ideal in-driver floor: a database/sql driver with no database behind
// it whose QueryContext coalesces identical queries itself. The first
// caller of a query starts a timer as long as the origin; every caller of
// the same query and arguments until it fires waits for it and then gets
// its own cursor over the same ten rows. Nothing can coalesce inside a
// driver for less: what a herd costs here is database/sql's own work (a
// pooled connection, a Rows, a Scan per caller) plus the origin.

var _ driver.QueryerContext = floorConn{}

// floorConnector is one pool's worth of the floor: its flights in progress.
type floorConnector struct {
	origin  time.Duration
	mu      sync.Mutex
	flights map[string]*floorFlight
	started atomic.Int64 // flights started (timers), the floor's "origin executions"
}

// floorFlight is one timer and the rows its callers read once it fires.
type floorFlight struct {
	done chan struct{}
	rows [][]driver.Value
}

func newFloorConnector(origin time.Duration) *floorConnector {
	return &floorConnector{origin: origin, flights: make(map[string]*floorFlight)}
}

func (c *floorConnector) Connect(context.Context) (driver.Conn, error) { return floorConn{c}, nil }
func (c *floorConnector) Driver() driver.Driver                        { return floorDriver{} }

// join returns the flight of q with args, starting it if none is in progress.
func (c *floorConnector) join(q string, args []driver.NamedValue) (*floorFlight, error) {
	if len(args) != 1 {
		return nil, errors.New("floor: a herd query takes one argument, its key")
	}
	k, ok := args[0].Value.(int64)
	if !ok {
		return nil, errors.New("floor: the key must be an int64")
	}
	key := keyOf(q, k)
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.flights[key]; ok {
		return f, nil
	}
	f := &floorFlight{done: make(chan struct{}), rows: herdRows(k)}
	c.flights[key] = f
	c.started.Add(1)
	time.AfterFunc(c.origin, func() {
		c.mu.Lock()
		delete(c.flights, key)
		c.mu.Unlock()
		close(f.done)
	})
	return f, nil
}

// herdRows are the rows the herd function returns for key k.
func herdRows(k int64) [][]driver.Value {
	rows := make([][]driver.Value, herdRowCount)
	for i := range rows {
		id := k + int64(i)
		rows[i] = []driver.Value{id, id * 10, int64(0), "herd"}
	}
	return rows
}

// floorDriver is the floor's driver; it opens connectors only through
// newFloorConnector (the origin is not a DSN).
type floorDriver struct{}

func (floorDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("floor: open it with sql.OpenDB(newFloorConnector(origin))")
}

type floorConn struct{ c *floorConnector }

func (floorConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("floor: no prepared statements")
}
func (floorConn) Close() error              { return nil }
func (floorConn) Begin() (driver.Tx, error) { return nil, errors.New("floor: no transactions") }

// QueryContext joins the query's flight and waits for its timer, or for
// ctx to end.
func (cn floorConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	f, err := cn.c.join(q, args)
	if err != nil {
		return nil, err
	}
	select {
	case <-f.done:
		return &floorRows{rows: f.rows}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// floorRows is one caller's cursor over a flight's shared rows.
type floorRows struct {
	rows [][]driver.Value
	i    int
}

func (*floorRows) Columns() []string { return []string{"id", "v", "ver", "label"} }
func (*floorRows) Close() error      { return nil }
func (r *floorRows) Next(dest []driver.Value) error {
	if r.i >= len(r.rows) {
		return io.EOF
	}
	copy(dest, r.rows[r.i])
	r.i++
	return nil
}

// --- the floor as a contender ---

type floorC struct {
	db *sql.DB
	c  *floorConnector
}

// openFloorC opens the floor with an origin as long as the herd query's
// sleep.
func openFloorC(a openArgs) (contender, error) {
	c := newFloorConnector(a.origin)
	db := sql.OpenDB(c)
	capPool(db, a.maxConns)
	return &floorC{db: db, c: c}, nil
}
func (c *floorC) read(ctx context.Context, q string, args ...any) ([]row, error) {
	return queryRows(ctx, c.db, q, args...)
}
func (c *floorC) write(context.Context, string, string, int64) (int64, error) {
	return 0, errors.New("floor: it only reads (herd workload)")
}
func (c *floorC) hits() uint64  { return 0 }
func (c *floorC) pool() *sql.DB { return c.db }
func (c *floorC) close()        { _ = c.db.Close() }

// origins is the number of flights the floor started: it has no database
// to count them.
func (c *floorC) origins() int64 { return c.c.started.Load() }
