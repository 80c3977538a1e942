package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// unreachable is a parent whose connections cannot be opened while down is
// set, as when the server does not listen; it counts the attempts.
type unreachable struct {
	*fakeDriver
	down     atomic.Bool
	attempts atomic.Int64
}

func (d *unreachable) Open(name string) (driver.Conn, error) {
	d.attempts.Add(1)
	if d.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	}
	return d.fakeDriver.Open(name)
}

func TestBreakerOpensWhenDownFromTheStart(t *testing.T) {
	clk := newFakeClock()
	d := &unreachable{fakeDriver: &fakeDriver{}}
	d.down.Store(true)
	s := New(Options{Clock: clk, BreakerFailures: 3, BreakerTimeout: 5 * time.Second})
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(d), dsn: "fake"})
	t.Cleanup(func() { _ = db.Close() })

	var refused int
	for i := range 10 {
		err := db.QueryRow(fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(new(int64))
		if err == nil {
			t.Fatal("a query succeeded against an unreachable database")
		}
		if errors.Is(err, ErrCircuitOpen) {
			refused++
		}
	}
	st := s.Stats()
	if n := d.attempts.Load(); n != 3 {
		t.Errorf("%d connection attempts, want 3 (the breaker's failures), then none", n)
	}
	if st.BreakerState != "open" || refused != 7 || st.BreakerRejected != 7 {
		t.Fatalf("breaker %s, %d refused (Stats: %d), want open, 7 refused", st.BreakerState, refused, st.BreakerRejected)
	}

	// Back up: after the timeout one probe (a connection attempt) closes it.
	d.down.Store(false)
	clk.Add(5 * time.Second)
	if err := db.QueryRow("SELECT n FROM items WHERE id = 1").Scan(new(int64)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.BreakerState != "closed" || d.attempts.Load() != 4 {
		t.Fatalf("breaker %s after %d attempts, want closed after 4", st.BreakerState, d.attempts.Load())
	}
}

// twoDatabases is a parent that reaches one flaky database per DSN.
type twoDatabases map[string]*flaky

func (m twoDatabases) Open(name string) (driver.Conn, error) { return m[name].d.Open(name) }

func TestOneScopeOutageLeavesOthersAlone(t *testing.T) {
	clk := newFakeClock()
	a, b := newFlaky(), newFlaky()
	s := New(Options{Clock: clk, BreakerFailures: 3})
	drv := s.Wrap(twoDatabases{"a": a, "b": b})
	dbA := sql.OpenDB(dsnConnector{drv: drv, dsn: "a"})
	dbB := sql.OpenDB(dsnConnector{drv: drv, dsn: "b"})
	t.Cleanup(func() { _, _ = dbA.Close(), dbB.Close() })

	a.failWith(&pgconn.PgError{Code: "57P01"})
	for i := range 5 {
		_ = dbA.QueryRow(fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(new(int64))
	}
	if err := dbA.QueryRow("SELECT n FROM items WHERE id = 99").Scan(new(int64)); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("the cut database's breaker did not open: %v", err)
	}
	for i := range 20 {
		if err := dbB.QueryRow(fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(new(int64)); err != nil {
			t.Fatalf("statement %d to the healthy database: %v", i, err)
		}
		if _, err := dbB.Exec("UPDATE items SET n = 1"); err != nil {
			t.Fatalf("write %d to the healthy database: %v", i, err)
		}
	}

	st := s.Stats()
	if st.BreakerState != "open" || st.BreakerOpen != 1 || len(st.Breakers) != 2 {
		t.Fatalf("Stats: state %s, %d open of %v", st.BreakerState, st.BreakerOpen, st.Breakers)
	}
	var open, closed int
	for name, br := range st.Breakers {
		switch {
		case br.State == "open" && br.Rejected > 0:
			open++
		case br.State == "closed" && br.Rejected == 0 && br.Transitions == 0:
			closed++
		default:
			t.Errorf("breaker %q: %+v", name, br)
		}
	}
	if open != 1 || closed != 1 {
		t.Fatalf("want one open and one untouched breaker: %v", st.Breakers)
	}
}

func TestSlowScopeTakesOnlyItsOwnSlots(t *testing.T) {
	g := newGate()
	slow, fast := newFlaky(), newFlaky()
	inner := slow.d.onQuery
	slow.d.onQuery = func(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return inner(ctx, q, args)
	}
	s := New(Options{MaxInflight: 2, QueueTimeout: 20 * time.Millisecond})
	drv := s.Wrap(twoDatabases{"slow": slow, "fast": fast})
	dbSlow := sql.OpenDB(dsnConnector{drv: drv, dsn: "slow"})
	dbFast := sql.OpenDB(dsnConnector{drv: drv, dsn: "fast"})
	t.Cleanup(func() { _, _ = dbSlow.Close(), dbFast.Close() })

	held := make(chan error, 2)
	for i := range 2 {
		go func() { held <- dbSlow.QueryRow(fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(new(int64)) }()
	}
	waitFor(t, "every slot of the slow database taken", func() bool { return g.entered.Load() == 2 })
	for i := range 5 {
		if err := dbFast.QueryRow(fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(new(int64)); err != nil {
			t.Fatalf("read %d of the other database: %v", i, err)
		}
	}
	if n := fast.d.queries.Load(); n != 5 {
		t.Fatalf("%d reads reached the other database, want 5", n)
	}
	close(g.ch)
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
}

func TestBreakerLabelsNeverHoldAPassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing listens there any more
	s := New()
	dsn := fmt.Sprintf("postgres://app:hunter2secret@127.0.0.1:%d/orders?sslmode=disable&connect_timeout=5", port)
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(stdlib.GetDefaultDriver()), dsn: dsn})
	defer db.Close()
	if err := db.Ping(); err == nil {
		t.Fatal("a closed port answered")
	}
	st := s.Stats()
	want := fmt.Sprintf("orders@127.0.0.1:%d", port)
	if _, ok := st.Breakers[want]; !ok || len(st.Breakers) != 1 {
		t.Fatalf("breakers %v, want one named %q", st.Breakers, want)
	}
}

// restartable is a parent whose server can be restarted: every connection
// open at that moment is dead (its statements fail with 57P01 and its
// pings with driver.ErrBadConn), new ones work.
type restartable struct {
	*fakeDriver
	gen atomic.Int64
}

type restartableConn struct {
	*fakeConn
	r   *restartable
	gen int64
}

func (r *restartable) Open(name string) (driver.Conn, error) {
	c, _ := r.fakeDriver.Open(name)
	return &restartableConn{fakeConn: c.(*fakeConn), r: r, gen: r.gen.Load()}, nil
}

func (r *restartable) restart() { r.gen.Add(1) }

func (c *restartableConn) dead() bool { return c.gen != c.r.gen.Load() }

func (c *restartableConn) Ping(context.Context) error {
	if c.dead() {
		return driver.ErrBadConn
	}
	return nil
}

func (c *restartableConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if c.dead() {
		return nil, &pgconn.PgError{Severity: "FATAL", Code: "57P01"}
	}
	return c.fakeConn.QueryContext(ctx, q, args)
}

func (c *restartableConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if c.dead() {
		return nil, &pgconn.PgError{Severity: "FATAL", Code: "57P01"}
	}
	return c.fakeConn.ExecContext(ctx, q, args)
}

// TestProbeRunsOnALiveConnection: after a restart killed every connection,
// the half-open probe that lands on a kept (dead) one is run on a new
// connection instead, and closes the breaker one timeout after the outage.
func TestProbeRunsOnALiveConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, c *sql.Conn, i int) error
	}{
		{"shared read", func(ctx context.Context, c *sql.Conn, i int) error {
			return c.QueryRowContext(ctx, fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(new(int64))
		}},
		{"write", func(ctx context.Context, c *sql.Conn, i int) error {
			_, err := c.ExecContext(ctx, fmt.Sprintf("UPDATE items SET n = %d", i))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			r := &restartable{fakeDriver: &fakeDriver{}}
			s := New(Options{Clock: clk, BreakerFailures: 1, BreakerTimeout: 5 * time.Second})
			db := sql.OpenDB(dsnConnector{drv: s.Wrap(r), dsn: "fake"})
			t.Cleanup(func() { _ = db.Close() })
			ctx := context.Background()
			c1, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			c2, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			for i, c := range []*sql.Conn{c1, c2} {
				if err := tc.run(ctx, c, i); err != nil {
					t.Fatal(err)
				}
			}
			r.restart()
			if err := tc.run(ctx, c1, 10); err == nil || s.Stats().BreakerState != "open" {
				t.Fatalf("the restart did not open the breaker: %v, %s", err, s.Stats().BreakerState)
			}
			opened := s.Stats().RealConnsOpened
			clk.Add(5 * time.Second) // the database is back
			if err := tc.run(ctx, c2, 11); err != nil {
				t.Fatalf("the probe on a connection kept from before the restart: %v", err)
			}
			st := s.Stats()
			if st.BreakerState != "closed" || st.BreakerProbeRedials != 1 || st.RealConnsOpened != opened+1 {
				t.Fatalf("breaker %s, %d probes redialled, %d connections opened; want closed, 1, 1",
					st.BreakerState, st.BreakerProbeRedials, st.RealConnsOpened-opened)
			}
		})
	}
}
