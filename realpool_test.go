package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pooledDriver is a fakeDriver whose connections, like pgx's, tell
// database/sql when they go back to its pool (driver.Validator) and are
// reset when taken out of it (driver.SessionResetter).
type pooledDriver struct{ *fakeDriver }

func (d pooledDriver) Open(name string) (driver.Conn, error) {
	c, err := d.fakeDriver.Open(name)
	if err != nil {
		return nil, err
	}
	return pooledConn{c.(*fakeConn)}, nil
}

type pooledConn struct{ *fakeConn }

func (pooledConn) ResetSession(context.Context) error { return nil }
func (c pooledConn) IsValid() bool                    { return !c.closed }

func openPooled(t *testing.T, d *fakeDriver, opts ...Option) (*sql.DB, *Shield) {
	t.Helper()
	s := New(opts...)
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(pooledDriver{d}), dsn: "fake"})
	t.Cleanup(func() { _ = db.Close() })
	return db, s
}

// gatedCounter answers pointQuery with the number of queries that reached
// the parent so far, each once g opens.
func gatedCounter(g *gate, d **fakeDriver) func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
	return func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		n := (*d).queries.Load()
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(n), nil
	}
}

// TestCappedPoolCoalescesAHerd: with SetMaxOpenConns(4), 40 callers of one
// key: 4 hold connections in the flight, 36 wait in database/sql's pool.
// When the flight ends they come in on the connections its callers give
// back, and take its result: one origin for the whole herd. (The Shield's
// clock stands still: every handover is immediate.)
func TestCappedPoolCoalescesAHerd(t *testing.T) {
	g := newGate()
	d := &fakeDriver{}
	d.onQuery = gatedCounter(g, &d)
	clk := newFakeClock()
	db, s := openPooled(t, d, Options{Clock: clk})
	db.SetMaxOpenConns(4)
	const n = 40
	wait := herd(t, db, n, "/* sqlflight: coalesce */ "+pointQuery, 7)
	waitFor(t, "4 callers in the flight and 36 queued for a connection", func() bool {
		return s.Stats().Waiting == 4 && db.Stats().WaitCount >= n-4
	})
	clk.Add(time.Second) // the flight's duration: how long it lingers
	close(g.ch)
	vals, errs := wait()
	for i := range n {
		if errs[i] != nil || vals[i] != 1 {
			t.Fatalf("caller %d: %v, %d", i, errs[i], vals[i])
		}
	}
	st := s.Stats()
	if got := d.queries.Load(); got != 1 {
		t.Errorf("origin queries = %d, want 1", got)
	}
	if st.Flights != 1 || st.LateFollowers != n-4 {
		t.Errorf("flights=%d late followers=%d, want 1 and %d", st.Flights, st.LateFollowers, n-4)
	}

	// The herd is over: every caller gave its connection back. A read
	// on a connection that sat idle in the pool is a flight of its own.
	clk.Add(handover)
	g2 := newGate()
	close(g2.ch)
	d.onQuery = gatedCounter(g2, &d)
	var v int64
	if err := db.QueryRow("/* sqlflight: coalesce */ "+pointQuery, 7).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 2 || d.queries.Load() != 2 {
		t.Errorf("a read after the herd got %d (%d origin queries), want a new origin: 2", v, d.queries.Load())
	}
}

// TestLingerNeverCrossesAWrite: callers queued while a write through the
// Shield committed do not take the result of the flight that began before
// it.
func TestLingerNeverCrossesAWrite(t *testing.T) {
	g := newGate()
	d := &fakeDriver{}
	d.onQuery = gatedCounter(g, &d)
	clk := newFakeClock()
	s := New(Options{Clock: clk})
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(pooledDriver{d}), dsn: "fake"})
	defer db.Close()
	other := sql.OpenDB(dsnConnector{drv: s.Wrap(pooledDriver{d}), dsn: "fake"})
	defer other.Close()
	db.SetMaxOpenConns(2)
	const n = 12
	wait := herd(t, db, n, "/* sqlflight: coalesce */ "+pointQuery, 7)
	waitFor(t, "2 callers in the flight and the rest queued", func() bool {
		return s.Stats().Waiting == 2 && db.Stats().WaitCount >= n-2
	})
	if _, err := other.Exec("UPDATE items SET n = 2 WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	close(g.ch)
	vals, errs := wait()
	before := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if vals[i] == 1 {
			before++
		}
	}
	if before != 2 {
		t.Errorf("%d callers got the result of the flight begun before the write, want its 2", before)
	}
	if st := s.Stats(); st.LateFollowers > n-3 {
		t.Errorf("late followers %d: some joined the flight from before the write", st.LateFollowers)
	}
}

// TestLeaderTakesAnIdleRealConnection: a leader whose virtual connection
// has no real one takes the real connection of a virtual connection idle in
// database/sql's pool instead of opening another.
func TestLeaderTakesAnIdleRealConnection(t *testing.T) {
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		return oneRow(int64(1)), nil
	}}
	db, s := openPooled(t, d)
	ctx := context.Background()
	a, err := db.Conn(ctx) // the scope's first connection: it has a real one
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Conn(ctx) // a virtual connection without one
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Close(); err != nil { // back to the pool: its real one is lendable
		t.Fatal(err)
	}
	var v int64
	if err := b.QueryRowContext(ctx, "/* sqlflight: coalesce */ "+pointQuery, 1).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if got := d.opened.Load(); got != 1 {
		t.Errorf("%d real connections opened, want 1", got)
	}
	if st := s.Stats(); st.RealConnsLent != 1 {
		t.Errorf("real connections lent = %d, want 1", st.RealConnsLent)
	}
	// a, taken out of the pool again, works on a real connection of its own.
	a, err = db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.ExecContext(ctx, "UPDATE items SET n = 1"); err != nil {
		t.Fatal(err)
	}
}

// TestMaxConnsCapsRealConnections: under MaxConns = 2, ten statements that
// each need a real connection at once run two at a time, and all complete.
func TestMaxConnsCapsRealConnections(t *testing.T) {
	g := newGate()
	var running, most atomic.Int64
	d := &fakeDriver{onExec: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return driver.RowsAffected(1), nil
	}}
	db, s := openPooled(t, d, Options{MaxConns: 2})
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = db.Exec("UPDATE items SET n = n + 1 WHERE id = $1", i)
		})
	}
	waitFor(t, "two statements running and the others waiting for a real connection", func() bool {
		return running.Load() == 2 && s.Stats().RealConnWaits > 0
	})
	close(g.ch)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
	}
	if m := most.Load(); m > 2 {
		t.Errorf("%d statements ran at once on real connections, want ≤ 2", m)
	}
	if got := d.opened.Load(); got > 2 {
		t.Errorf("%d real connections opened under MaxConns = 2", got)
	}
	if st := s.Stats(); st.RealConns > 2 {
		t.Errorf("%d real connections open under MaxConns = 2", st.RealConns)
	}
}
