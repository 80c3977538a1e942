package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// flaky is a parent whose queries and execs fail with err while it is set.
type flaky struct {
	d   *fakeDriver
	err atomic.Pointer[error]
}

func newFlaky() *flaky {
	f := &flaky{}
	fail := func() error {
		if p := f.err.Load(); p != nil {
			return *p
		}
		return nil
	}
	f.d = &fakeDriver{
		onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
			if err := fail(); err != nil {
				return nil, err
			}
			return oneRow(int64(1)), nil
		},
		onExec: func(context.Context, string, []driver.NamedValue) (driver.Result, error) {
			if err := fail(); err != nil {
				return nil, err
			}
			return driver.RowsAffected(1), nil
		},
	}
	return f
}

func (f *flaky) failWith(err error) { f.err.Store(&err) }
func (f *flaky) heal()              { f.err.Store(nil) }

func TestBreakerOpensOnUnavailabilityOnly(t *testing.T) {
	clk := newFakeClock()
	f := newFlaky()
	db, s := openFake(t, f.d, Options{Clock: clk, BreakerFailures: 3, BreakerTimeout: 5 * time.Second})
	var n int64
	// Errors that say nothing about availability never open it.
	for _, err := range []error{
		&pgconn.PgError{Code: "42601"}, &pgconn.PgError{Code: "23505"}, context.Canceled, errors.New("boom"),
	} {
		f.failWith(err)
		for i := range 5 {
			_ = db.QueryRow(fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(&n)
		}
	}
	if st := s.Stats(); st.BreakerState != "closed" {
		t.Fatalf("breaker %s after ordinary errors", st.BreakerState)
	}
	f.failWith(&pgconn.PgError{Code: "57P01"}) // admin shutdown
	for i := range 3 {
		_ = db.QueryRow(fmt.Sprintf("SELECT n FROM items WHERE id = %d", i)).Scan(&n)
	}
	if st := s.Stats(); st.BreakerState != "open" {
		t.Fatalf("breaker %s after 3 unavailability errors", st.BreakerState)
	}
	before := f.d.queries.Load()
	err := db.QueryRow("SELECT n FROM items WHERE id = 99").Scan(&n)
	if !errors.Is(err, ErrCircuitOpen) || f.d.queries.Load() != before {
		t.Fatalf("open breaker let a read through: %v", err)
	}
	if _, err := db.Exec("UPDATE items SET n = 1"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("open breaker let a write through: %v", err)
	}
	// Half-open after the timeout: one probe; a failure opens it again.
	clk.Add(5 * time.Second)
	_ = db.QueryRow("SELECT n FROM items WHERE id = 100").Scan(&n)
	if st := s.Stats(); st.BreakerState != "open" || f.d.queries.Load() != before+1 {
		t.Fatalf("failed probe: %s, queries %d", st.BreakerState, f.d.queries.Load()-before)
	}
	clk.Add(5 * time.Second)
	f.heal()
	if err := db.QueryRow("SELECT n FROM items WHERE id = 101").Scan(&n); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.BreakerState != "closed" || st.BreakerTransitions != 5 {
		t.Fatalf("after a good probe: %s, %d transitions", st.BreakerState, st.BreakerTransitions)
	}
}

func TestOpenBreakerServesStale(t *testing.T) {
	clk := newFakeClock()
	f := newFlaky()
	db, s := openFake(t, f.d, Options{Clock: clk, BreakerFailures: 1})
	t.Cleanup(func() { _ = s.Close() })
	readN(t, db, ttlQuery, 1)
	clk.Add(61 * time.Second) // expired, within MaxStale
	f.failWith(&pgconn.ConnectError{})
	_ = db.QueryRow("SELECT n FROM other").Scan(new(int64)) // opens the breaker
	if s.Stats().BreakerState != "open" {
		t.Fatal("breaker not open")
	}
	if n := readN(t, db, ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	if s.Stats().StaleIfError != 1 {
		t.Fatalf("%+v", s.Stats())
	}
	var n int64
	if err := db.QueryRow(ttlQuery, 2).Scan(&n); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("uncached read: %v", err)
	}
}

func TestWritesWhenOpenAndTransactions(t *testing.T) {
	clk := newFakeClock()
	f := newFlaky()
	db, _ := openFake(t, f.d, Options{Clock: clk, BreakerFailures: 1, WritesWhenOpen: true})
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	f.failWith(&pgconn.PgError{Code: "08006"})
	_, _ = db.Exec("UPDATE items SET n = 1") // fails: opens the breaker
	f.heal()
	if _, err := db.Exec("UPDATE items SET n = 2"); err != nil {
		t.Fatalf("WritesWhenOpen: %v", err)
	}
	if _, err := tx.Exec("UPDATE items SET n = 3"); err != nil {
		t.Fatalf("a transaction was cut off mid-way: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Begin(); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("a new transaction began while open: %v", err)
	}
}

func TestSemaphoreShedsWithoutTouchingTheDatabase(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(int64(1)), nil
	}}
	db, s := openFake(t, d, Options{MaxInflight: 1, QueueTimeout: time.Millisecond})
	held := make(chan error, 1)
	go func() { held <- db.QueryRow(pointQuery, 1).Scan(new(int64)) }()
	waitFor(t, "the only slot taken", func() bool { return g.entered.Load() == 1 })
	err := db.QueryRow(pointQuery, 2).Scan(new(int64))
	if !errors.Is(err, ErrOverloaded) {
		t.Fatalf("want ErrOverloaded, got %v", err)
	}
	if d.queries.Load() != 1 || s.Stats().Shed != 1 {
		t.Fatalf("queries %d, %+v", d.queries.Load(), s.Stats())
	}
	// Followers of the running flight need no slot.
	follower := make(chan error, 1)
	go func() { follower <- db.QueryRow(pointQuery, 1).Scan(new(int64)) }()
	waitFor(t, "follower", func() bool { return s.Stats().Waiting == 2 })
	close(g.ch)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-follower; err != nil {
		t.Fatal(err)
	}
	if s.Stats().BreakerState != "closed" {
		t.Error("shedding opened the breaker")
	}
}

func TestOpenBreakerRefusesWritesBeforeConnecting(t *testing.T) {
	clk := newFakeClock()
	f := newFlaky()
	db, _ := openFake(t, f.d, Options{Clock: clk, BreakerFailures: 1})
	f.failWith(&pgconn.PgError{Code: "08006"})
	_, _ = db.Exec("UPDATE items SET n = 1") // opens the breaker
	opened := f.d.opened.Load()
	ctx := context.Background()
	c, err := db.Conn(ctx) // a virtual connection with no real one yet
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if _, err := c.ExecContext(ctx, "INSERT INTO items VALUES (1)"); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("write while open: %v", err)
		}
	}
	if f.d.opened.Load() != opened {
		t.Fatal("a refused write opened a real connection")
	}
}

func TestHalfOpenClosesOnlyOnAProbeThatRan(t *testing.T) {
	clk := newFakeClock()
	g := newGate()
	f := newFlaky()
	inner := f.d.onQuery
	f.d.onQuery = func(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
		if strings.HasSuffix(q, "SELECT slow()") {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
		}
		return inner(ctx, q, args)
	}
	db, s := openFake(t, f.d, Options{Clock: clk, BreakerFailures: 1, MaxInflight: 1, QueueTimeout: time.Millisecond})
	f.failWith(&pgconn.PgError{Code: "08006"})
	_ = db.QueryRow("SELECT n FROM a").Scan(new(int64)) // opens it
	f.heal()
	clk.Add(5 * time.Second)
	// The probe is admitted but finds no slot: it did not run, so the
	// breaker must stay half-open, and the next caller may probe.
	held := make(chan error, 1)
	go func() { held <- db.QueryRow("/* sqlflight: coalesce */ SELECT slow()").Scan(new(int64)) }()
	waitFor(t, "slot taken", func() bool { return g.entered.Load() == 1 })
	if err := db.QueryRow("SELECT n FROM b").Scan(new(int64)); !errors.Is(err, ErrOverloaded) && !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("want a refusal, got %v", err)
	}
	if st := s.Stats().BreakerState; st == "closed" {
		t.Fatal("a probe that never ran closed the breaker")
	}
	close(g.ch)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats().BreakerState; st != "closed" {
		t.Fatalf("a probe that ran and succeeded left the breaker %s", st)
	}
}
