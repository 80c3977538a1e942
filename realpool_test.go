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

// TestLingerWhileTheHerdDrains: a flight that ended stays joinable while
// one of its callers still holds its connection (here a sql.Conn whose rows
// are open); once every caller gave its connection back, a read queries.
func TestLingerWhileTheHerdDrains(t *testing.T) {
	h := endedHerd(t)
	db, s, d, held := h.db, h.s, h.d, h.held
	const q = lingerQuery
	if got := readValue(t, db, q); got != 1 || d.queries.Load() != 1 {
		t.Fatalf("while a caller of the flight holds its connection: got %d after %d origin queries, want its result 1", got, d.queries.Load())
	}
	if st := s.Stats(); st.LateFollowers != 1 {
		t.Errorf("late followers %d, want 1", st.LateFollowers)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.a.Close(); err != nil { // back to the pool: the herd is over
		t.Fatal(err)
	}
	_ = h.b.Close()
	g2 := newGate()
	close(g2.ch)
	d.onQuery = gatedCounter(g2, &d)
	if got := readValue(t, db, q); got != 2 || d.queries.Load() != 2 {
		t.Errorf("after the herd: got %d after %d origin queries, want a new one", got, d.queries.Load())
	}
}

// TestLingerNeverCrossesAWrite: after a write through the Shield to the
// tables it read, an ended flight is not joined, lingering or not.
func TestLingerNeverCrossesAWrite(t *testing.T) {
	h := endedHerd(t)
	db, s, d := h.db, h.s, h.d
	defer h.held.Close()
	const q = lingerQuery
	if _, err := db.Exec("UPDATE items SET n = 2 WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	if got := readValue(t, db, q); got != 2 || d.queries.Load() != 2 {
		t.Errorf("a read after the write: got %d after %d origin queries, want a new one", got, d.queries.Load())
	}
	if st := s.Stats(); st.LateFollowers != 0 {
		t.Errorf("late followers %d after a write, want 0", st.LateFollowers)
	}
}

// TestQueuedCallerJoinsTheHerd: under a capped pool, a caller that waited
// in database/sql's queue when a caller of an ended flight gave its
// connection back joins the flight, though every other caller of the herd
// has given its connection back by the time it reads; a caller that takes
// a free connection then reads anew.
func TestQueuedCallerJoinsTheHerd(t *testing.T) {
	h, queued := queuedBehindHerd(t)
	db, d := h.db, h.d
	if got := connValue(t, queued); got != 1 || d.queries.Load() != 1 {
		t.Fatalf("the queued caller got %d after %d origin queries, want the herd's result 1", got, d.queries.Load())
	}
	if err := queued.Close(); err != nil {
		t.Fatal(err)
	}
	d.onQuery = gatedCounter(openGate(), &d)
	if got := readValue(t, db, lingerQuery); got != 2 || d.queries.Load() != 2 { // on a free connection a caller of the herd gave back
		t.Errorf("a caller after the herd: got %d after %d origin queries, want a new one", got, d.queries.Load())
	}
}

// TestQueuedCallerJoinsWithItsFirstStatement: what a queued caller reads
// after its first statement on the connection it was handed — an exec, a
// transaction — is read anew.
func TestQueuedCallerJoinsWithItsFirstStatement(t *testing.T) {
	ctx := context.Background()
	for _, first := range []struct {
		name string
		run  func(c *sql.Conn) error
	}{
		{"exec", func(c *sql.Conn) error {
			_, err := c.ExecContext(ctx, "SELECT 1")
			return err
		}},
		{"transaction", func(c *sql.Conn) error {
			tx, err := c.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			return tx.Commit()
		}},
	} {
		t.Run(first.name, func(t *testing.T) {
			h, queued := queuedBehindHerd(t)
			d := h.d
			d.onQuery = gatedCounter(openGate(), &d)
			if err := first.run(queued); err != nil {
				t.Fatal(err)
			}
			if got := connValue(t, queued); got == 1 || d.queries.Load() != 2 {
				t.Errorf("the queued caller's second statement got %d after %d origin queries, want a new one", got, d.queries.Load())
			}
		})
	}
}

// TestQueuedCallerNeverCrossesAWrite: after a write through the Shield to
// the tables the herd read, a queued caller reads anew.
func TestQueuedCallerNeverCrossesAWrite(t *testing.T) {
	h, queued := queuedBehindHerd(t)
	d := h.d
	d.onQuery = gatedCounter(openGate(), &d)
	if _, err := h.db.Exec("UPDATE items SET n = 2 WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	if got := connValue(t, queued); got == 1 || d.queries.Load() != 2 {
		t.Errorf("the queued caller got %d after %d origin queries after a write, want a new one", got, d.queries.Load())
	}
}

// queuedBehindHerd caps endedHerd's pool at its two connections, queues a
// caller for a third (a sql.Conn, returned) and lets the herd give its
// connections back: the first goes to the queued caller.
func queuedBehindHerd(t *testing.T) (ended, *sql.Conn) {
	t.Helper()
	h := endedHerd(t)
	h.db.SetMaxOpenConns(2)
	got := make(chan *sql.Conn, 1)
	go func() {
		c, err := h.db.Conn(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	waitFor(t, "a caller waiting for a connection", func() bool { return h.db.Stats().WaitCount == 1 })
	if err := h.held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.a.Close(); err != nil { // handed to the waiting caller
		t.Fatal(err)
	}
	queued := <-got
	if queued == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = queued.Close() })
	if err := h.b.Close(); err != nil { // the last of the herd goes back
		t.Fatal(err)
	}
	return h, queued
}

// connValue reads lingerQuery (id 7) on c.
func connValue(t *testing.T, c *sql.Conn) int64 {
	t.Helper()
	var v int64
	if err := c.QueryRowContext(context.Background(), lingerQuery, 7).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func openGate() *gate {
	g := newGate()
	close(g.ch)
	return g
}

// TestCappedHerdRunsOneFlight: 64 callers of one key on a pool capped at
// 4 connections: 4 wait in the flight, 60 in database/sql's queue. However
// the herd's connections come back, every queued caller takes the flight's
// result: one origin query. (The flight lasts a second on the Shield's
// clock, which then stands still; the group lets go of the ended flight a
// second later in wall time, long after this test. Without queued callers
// joining, the herd's tail leads a second flight in some runs, not all: the
// tests of queuedBehindHerd pin that down.)
func TestCappedHerdRunsOneFlight(t *testing.T) {
	g := newGate()
	d := &fakeDriver{}
	d.onQuery = gatedCounter(g, &d)
	db, s := openPooled(t, d, Options{Clock: newFakeClock()})
	const conns, callers = 4, 64
	db.SetMaxOpenConns(conns)
	got := make(chan int64, callers)
	for range callers {
		go func() {
			var v int64
			if err := db.QueryRow(lingerQuery, 7).Scan(&v); err != nil {
				t.Error(err)
			}
			got <- v
		}()
	}
	waitFor(t, "4 callers in the flight and 60 queued", func() bool {
		return s.Stats().Waiting == conns && db.Stats().WaitCount == callers-conns
	})
	s.opts.Clock.(*fakeClock).Add(time.Second)
	close(g.ch)
	wrong := 0
	for range callers {
		if v := <-got; v != 1 {
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d callers read another result than the flight's", wrong, callers)
	}
	if n := d.queries.Load(); n != 1 {
		t.Errorf("%d origin queries for %d callers on %d connections, want 1", n, callers, conns)
	}
	if st := s.Stats(); st.LateFollowers != callers-conns {
		t.Errorf("late followers %d, want %d", st.LateFollowers, callers-conns)
	}
}

const lingerQuery = "/* sqlflight: coalesce */ " + pointQuery

// ended is a flight of two callers on sql.Conns a and b that has ended:
// b read and closed its rows, a's (held) are still open.
type ended struct {
	db   *sql.DB
	s    *Shield
	d    *fakeDriver
	a, b *sql.Conn
	held *sql.Rows
}

// endedHerd runs lingerQuery (id 7) on two connections in one flight that
// lasts a second on the Shield's clock; its answer is 1.
func endedHerd(t *testing.T) ended {
	t.Helper()
	g := newGate()
	d := &fakeDriver{}
	d.onQuery = gatedCounter(g, &d)
	db, s := openPooled(t, d, Options{Clock: newFakeClock()})
	a, b := mustConn(t, db), mustConn(t, db)
	wait := herdOn(t, lingerQuery, a, b)
	waitFor(t, "two callers in the flight", func() bool { return s.Stats().Waiting == 2 })
	s.opts.Clock.(*fakeClock).Add(time.Second) // the flight's duration: its linger
	close(g.ch)
	return ended{db: db, s: s, d: d, a: a, b: b, held: wait()}
}

func mustConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// herdOn runs q (for id 7) on a as the flight's leader and then on b; wait
// returns a's rows, still open, after b read and closed its own.
func herdOn(t *testing.T, q string, a, b *sql.Conn) (wait func() *sql.Rows) {
	t.Helper()
	ctx := context.Background()
	rowsA := make(chan *sql.Rows, 1)
	errs := make(chan error, 2)
	go func() {
		r, err := a.QueryContext(ctx, q, 7)
		errs <- err
		rowsA <- r
	}()
	go func() {
		var v int64
		errs <- b.QueryRowContext(ctx, q, 7).Scan(&v)
	}()
	return func() *sql.Rows {
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		return <-rowsA
	}
}

func readValue(t *testing.T, db *sql.DB, q string) int64 {
	t.Helper()
	var v int64
	if err := db.QueryRow(q, 7).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
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
		enterCounted(&running, &most)
		defer running.Add(-1)
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

// enterCounted counts one more running call and raises peak to the number
// running if it is the most yet; it returns that number.
func enterCounted(running, peak *atomic.Int64) int64 {
	n := running.Add(1)
	for {
		p := peak.Load()
		if n <= p || peak.CompareAndSwap(p, n) {
			return n
		}
	}
}
