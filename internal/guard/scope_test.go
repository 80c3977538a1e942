package guard_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlflight/sqlflight/internal/fakeclock"
	"github.com/sqlflight/sqlflight/internal/guard"
)

func TestUnavailableClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{sql.ErrNoRows, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("%w (%w)", guard.ErrOriginTimeout, context.DeadlineExceeded), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "42P01"}, false},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "53300"}, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "57P03"}, true},
		{&pgconn.PgError{Code: "57014"}, false}, // query_canceled
		{&pgconn.PgError{Code: "58030"}, true},
		{driver.ErrBadConn, true},
		{&pgconn.ConnectError{}, true},
	} {
		if got := guard.IsUnavailable(tc.err); got != tc.want {
			t.Errorf("IsUnavailable(%v) = %v", tc.err, got)
		}
	}
}

func TestBreakerVerdict(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want guard.Outcome
	}{
		{nil, guard.Healthy},
		{sql.ErrNoRows, guard.Healthy},
		{&pgconn.PgError{Code: "23505"}, guard.Healthy},
		{errors.New("boom"), guard.Healthy},
		{guard.ErrNotRun, guard.Neutral},
		{guard.ErrDeadSession, guard.Neutral}, // although it wraps driver.ErrBadConn
		{context.Canceled, guard.Neutral},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), guard.Neutral},
		{fmt.Errorf("%w (%w)", guard.ErrOriginTimeout, context.DeadlineExceeded), guard.Unavailable},
		{&pgconn.PgError{Code: "57P01"}, guard.Unavailable},
		{driver.ErrBadConn, guard.Unavailable},
		{&guard.ConnectFailure{Err: context.DeadlineExceeded}, guard.Unavailable},
	} {
		if got := guard.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func newScope(t *testing.T, clk *fakeclock.Clock, shed *[]time.Duration) (*guard.Scope, *atomic.Uint64, *atomic.Uint64) {
	t.Helper()
	var rejected, shedN atomic.Uint64
	g := new(guard.Scope)
	g.Init(guard.ScopeConfig{MaxInflight: 1, MaxRefreshes: 1, QueueTimeout: time.Millisecond,
		Failures: 2, Timeout: time.Minute, Probes: 1, Clock: clk, Rejected: &rejected, Shed: &shedN,
		OnShed: func(d time.Duration) { *shed = append(*shed, d) }})
	return g, &rejected, &shedN
}

func TestScopeOpensOnUnavailableAndRefusesAtOnce(t *testing.T) {
	clk := fakeclock.New()
	var shed []time.Duration
	g, rejected, _ := newScope(t, clk, &shed)
	for range 2 {
		tk, err := g.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tk.Exit(&pgconn.PgError{Code: "08006"})
	}
	if g.Breaker.State() != guard.Open {
		t.Fatalf("state %v after two unavailable outcomes", g.Breaker.State())
	}
	if _, err := g.Enter(context.Background()); !errors.Is(err, guard.ErrOpen) {
		t.Fatalf("Enter on an open breaker: %v", err)
	}
	if _, err := g.Admit(); !errors.Is(err, guard.ErrOpen) {
		t.Fatalf("Admit on an open breaker: %v", err)
	}
	if _, ok := g.Background(); ok {
		t.Fatal("a background refresh was admitted by an open breaker")
	}
	if _, err := g.Warm(context.Background()); !errors.Is(err, guard.ErrOpen) {
		t.Fatalf("Warm on an open breaker: %v", err)
	}
	if g.Rejected() != 2 || rejected.Load() != 2 {
		t.Fatalf("rejected %d (shared %d), want 2: Background and Warm do not count", g.Rejected(), rejected.Load())
	}
	// After the timeout one probe goes; a healthy outcome closes it.
	clk.Add(time.Minute)
	tk, err := g.Enter(context.Background())
	if err != nil || !tk.Probe() {
		t.Fatalf("probe: %v, probe=%v", err, tk.Probe())
	}
	tk.Exit(nil)
	if g.Breaker.State() != guard.Closed {
		t.Fatalf("state %v after a healthy probe", g.Breaker.State())
	}
}

func TestScopeShedsWhenSlotsAreTaken(t *testing.T) {
	clk := fakeclock.New()
	var shed []time.Duration
	g, _, shedN := newScope(t, clk, &shed)
	held, err := g.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Enter(context.Background()); !errors.Is(err, guard.ErrFull) {
		t.Fatalf("second Enter with one slot taken: %v", err)
	}
	if shedN.Load() != 1 || len(shed) != 1 || shed[0] != time.Millisecond {
		t.Fatalf("shed %d, OnShed %v", shedN.Load(), shed)
	}
	// A caller's own end is counted as shed but not reported as ErrFull.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Slot(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrFull) {
		t.Fatalf("Slot on a cancelled context: %v", err)
	}
	if len(shed) != 1 {
		t.Fatalf("OnShed told of a cancelled caller: %v", shed)
	}
	// A shed request never reached the database: the breaker stays closed.
	if g.Breaker.State() != guard.Closed {
		t.Fatalf("shedding changed the breaker: %v", g.Breaker.State())
	}
	held.Exit(nil)
	tk, err := g.Slot(context.Background())
	if err != nil {
		t.Fatalf("Slot after the slot came back: %v", err)
	}
	tk.Release()
}

func TestScopeBackgroundNeverQueues(t *testing.T) {
	var shed []time.Duration
	g, _, _ := newScope(t, fakeclock.New(), &shed)
	tk, ok := g.Background()
	if !ok {
		t.Fatal("a free background slot was refused")
	}
	if _, ok := g.Background(); ok {
		t.Fatal("a second background refresh was admitted with one slot")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Warm(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Warm waits for a background slot until its context ends: %v", err)
	}
	tk.Exit(guard.ErrNotRun)
	if tk, err := g.Warm(context.Background()); err != nil {
		t.Fatalf("Warm with a free slot: %v", err)
	} else {
		tk.Exit(nil)
	}
	guard.Ticket{}.Exit(errors.New("nothing")) // a zero ticket does nothing
}
