package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

const pointQuery = "SELECT n FROM items WHERE id = $1"

// gate blocks the first n queries until released.
type gate struct {
	ch      chan struct{}
	entered atomic.Int64
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) wait(ctx context.Context) error {
	g.entered.Add(1)
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitFor polls cond until it holds; a test that never gets there fails on
// its deadline instead of hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func oneRow(v driver.Value) *fakeRows {
	return &fakeRows{cols: []string{"n"}, rows: [][]driver.Value{{v}}}
}

// herd starts n identical queries at once; wait returns their results.
func herd(t *testing.T, db *sql.DB, n int, query string, args ...any) (wait func() ([]int64, []error)) {
	t.Helper()
	vals, errs := make([]int64, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = db.QueryRowContext(context.Background(), query, args...).Scan(&vals[i])
		})
	}
	close(start)
	t.Cleanup(wg.Wait)
	return func() ([]int64, []error) {
		wg.Wait()
		return vals, errs
	}
}

func TestHerdRunsOneOrigin(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(int64(42)), nil
	}}
	db, s := openFake(t, d)
	const n = 200
	wait := herd(t, db, n, pointQuery, 7)
	waitFor(t, "every caller in the flight", func() bool { return s.Stats().Waiting == n })
	close(g.ch)
	vals, errs := wait()
	for i := range n {
		if errs[i] != nil || vals[i] != 42 {
			t.Fatalf("caller %d: %v, %d", i, errs[i], vals[i])
		}
	}
	st := s.Stats()
	if got := d.queries.Load(); got != 1 {
		t.Errorf("origin queries = %d, want 1", got)
	}
	if st.Flights != 1 || st.Followers != n-1 || st.OriginExecutions != 1 || st.OriginPerMissEvent != 1 {
		t.Errorf("flights %d followers %d origin %d per miss event %v", st.Flights, st.Followers, st.OriginExecutions, st.OriginPerMissEvent)
	}
	if got := d.opened.Load(); got > 2 {
		t.Errorf("real connections opened = %d, want ≤ 2 (followers must not open any)", got)
	}
	// The statement's own statistics: one miss (the leader), followers. Hot
	// keys are a sample under contention (a call that finds their lock taken
	// is not counted there), so the key's count may fall short of n.
	if st := statementNamed(t, s, pointQuery); st.Calls != n || st.Miss != 1 || st.Follower != n-1 ||
		st.WaitersPerFlight != n || st.OriginExecutions != 1 || len(st.HotKeys) != 1 ||
		st.HotKeys[0].Calls > n || st.HotKeys[0].Calls < n/2 {
		t.Errorf("statement: calls %d miss %d followers %d waiters/flight %v origin %d hot keys %+v",
			st.Calls, st.Miss, st.Follower, st.WaitersPerFlight, st.OriginExecutions, st.HotKeys)
	}
}

func TestDifferentArgsDoNotShare(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(args[0].Value), nil
	}}
	db, s := openFake(t, d)
	var wg sync.WaitGroup
	got := make([]int64, 4)
	for i := range got {
		wg.Go(func() {
			_ = db.QueryRow(pointQuery, int64(i%2)+10).Scan(&got[i])
		})
	}
	waitFor(t, "callers", func() bool { return s.Stats().Waiting == 4 })
	close(g.ch)
	wg.Wait()
	for i, v := range got {
		if v != int64(i%2)+10 {
			t.Fatalf("caller %d got %d", i, v)
		}
	}
	if q := d.queries.Load(); q != 2 {
		t.Errorf("origin queries = %d, want 2", q)
	}
}

func TestFollowerLeavesOnItsOwnContext(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(int64(1)), nil
	}}
	db, s := openFake(t, d)
	leaderDone := make(chan error, 1)
	go func() {
		var n int64
		leaderDone <- db.QueryRow(pointQuery, 1).Scan(&n)
	}()
	waitFor(t, "leader", func() bool { return s.Stats().Waiting == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	followerDone := make(chan error, 1)
	go func() {
		var n int64
		followerDone <- db.QueryRowContext(ctx, pointQuery, 1).Scan(&n)
	}()
	waitFor(t, "follower", func() bool { return s.Stats().Waiting == 2 })
	cancel()
	if err := <-followerDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("follower: %v, want context.Canceled", err)
	}
	if g.entered.Load() != 1 {
		t.Fatal("origin not running")
	}
	close(g.ch)
	if err := <-leaderDone; err != nil {
		t.Fatalf("leader: %v", err)
	}
}

func TestLeaderLeavingDoesNotCancelFollowers(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(int64(5)), nil
	}}
	db, s := openFake(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	leaderDone := make(chan error, 1)
	go func() {
		var n int64
		leaderDone <- db.QueryRowContext(ctx, pointQuery, 1).Scan(&n)
	}()
	waitFor(t, "leader", func() bool { return s.Stats().Waiting == 1 })
	followerDone := make(chan int64, 1)
	go func() {
		var n int64
		_ = db.QueryRow(pointQuery, 1).Scan(&n)
		followerDone <- n
	}()
	waitFor(t, "follower", func() bool { return s.Stats().Waiting == 2 })
	cancel()
	if err := <-leaderDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader: %v", err)
	}
	close(g.ch)
	if n := <-followerDone; n != 5 {
		t.Fatalf("follower got %d", n)
	}
	if q := d.queries.Load(); q != 1 {
		t.Errorf("origin queries = %d, want 1", q)
	}
}

func TestLastWaiterLeavingCancelsOrigin(t *testing.T) {
	cancelled := make(chan struct{})
	started := make(chan struct{})
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}}
	db, _ := openFake(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var n int64
		done <- db.QueryRowContext(ctx, pointQuery, 1).Scan(&n)
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller: %v", err)
	}
	<-cancelled // the origin saw its context end
}

func TestOriginTimeout(t *testing.T) {
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	db, _ := openFake(t, d)
	var n int64
	err := db.QueryRow("/* sqlflight: timeout=1ms */ "+pointQuery, 1).Scan(&n)
	if !errors.Is(err, ErrOriginTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrOriginTimeout and DeadlineExceeded", err)
	}
}

func TestPanicAndGoexitFailTheFlightOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		die  func()
	}{
		{"panic", func() { panic("boom") }},
		{"goexit", runtime.Goexit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			var calls atomic.Int64
			d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
				if calls.Add(1) == 1 {
					if err := g.wait(ctx); err != nil {
						return nil, err
					}
					tc.die()
				}
				return oneRow(int64(3)), nil
			}}
			db, s := openFake(t, d)
			const n = 20
			wait := herd(t, db, n, pointQuery, 1)
			waitFor(t, "callers", func() bool { return s.Stats().Waiting == n })
			close(g.ch)
			_, errs := wait()
			waitFor(t, "flight gone", func() bool { return s.flights.Len() == 0 })
			for i := range n {
				if !errors.Is(errs[i], ErrOriginPanicked) {
					t.Fatalf("caller %d: %v", i, errs[i])
				}
			}
			if s.Stats().Panics != 1 {
				t.Errorf("panics = %d", s.Stats().Panics)
			}
			var v int64
			if err := db.QueryRow(pointQuery, 1).Scan(&v); err != nil || v != 3 {
				t.Fatalf("after the panic: %v %d", err, v)
			}
		})
	}
}

func TestBadConnGoesOnlyToTheLeader(t *testing.T) {
	first, second := newGate(), newGate()
	var calls atomic.Int64
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		switch calls.Add(1) {
		case 1:
			if err := first.wait(ctx); err != nil {
				return nil, err
			}
			return nil, driver.ErrBadConn
		case 2:
			if err := second.wait(ctx); err != nil {
				return nil, err
			}
		}
		return oneRow(int64(9)), nil
	}}
	db, s := openFake(t, d)
	const n = 30
	wait := herd(t, db, n, pointQuery, 1)
	waitFor(t, "callers", func() bool { return s.Stats().Waiting == n })
	close(first.ch)
	// The leader's ErrBadConn makes database/sql retry it on another
	// connection; the followers start over. All meet in one new flight.
	waitFor(t, "callers again", func() bool { return second.entered.Load() == 1 && s.Stats().Waiting == n })
	close(second.ch)
	vals, errs := wait()
	for i := range n {
		if errs[i] != nil || vals[i] != 9 {
			t.Fatalf("caller %d: %v %d", i, errs[i], vals[i])
		}
	}
	if q := calls.Load(); q != 2 {
		t.Errorf("origin queries = %d, want 2", q)
	}
}

func TestErrorsAreSharedNotKept(t *testing.T) {
	g := newGate()
	var calls atomic.Int64
	boom := errors.New("boom")
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if calls.Add(1) == 1 {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
			return nil, boom
		}
		return oneRow(int64(2)), nil
	}}
	db, s := openFake(t, d)
	const n = 10
	wait := herd(t, db, n, pointQuery, 1)
	waitFor(t, "callers", func() bool { return s.Stats().Waiting == n })
	close(g.ch)
	_, errs := wait()
	for i := range n {
		if !errors.Is(errs[i], boom) {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
	}
	var v int64
	if err := db.QueryRow(pointQuery, 1).Scan(&v); err != nil || v != 2 {
		t.Fatalf("next query: %v %d (errors must not be kept)", err, v)
	}
}

// reusingRows hands out the same []byte buffer for every row and scribbles
// over it afterwards, as drivers that reuse buffers do.
type reusingRows struct {
	buf  []byte
	rows []string
	i    int
}

func (r *reusingRows) Columns() []string { return []string{"b"} }
func (r *reusingRows) Close() error {
	for i := range r.buf {
		r.buf[i] = 'X'
	}
	return nil
}
func (r *reusingRows) Next(dest []driver.Value) error {
	for i := range r.buf {
		r.buf[i] = 'X'
	}
	if r.i >= len(r.rows) {
		return io.EOF
	}
	r.buf = append(r.buf[:0], r.rows[r.i]...)
	dest[0] = r.buf
	r.i++
	return nil
}

func TestBytesAreDeepCopied(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return &reusingRows{buf: make([]byte, 0, 16), rows: []string{"alpha", "bravo", "charlie"}}, nil
	}}
	db, s := openFake(t, d)
	const n = 3
	results := make([][]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rows, err := db.Query("SELECT b FROM items")
			if err != nil {
				t.Error(err)
				return
			}
			defer rows.Close()
			for rows.Next() {
				var raw sql.RawBytes
				if err := rows.Scan(&raw); err != nil {
					t.Error(err)
					return
				}
				results[i] = append(results[i], string(raw))
				for j := range raw { // a caller scribbling over what it scanned
					raw[j] = '!'
				}
			}
		})
	}
	waitFor(t, "callers", func() bool { return s.Stats().Waiting == n })
	close(g.ch)
	wg.Wait()
	for i, r := range results {
		if len(r) != 3 || r[0] != "alpha" || r[1] != "bravo" || r[2] != "charlie" {
			t.Fatalf("caller %d read %q", i, r)
		}
	}
}

func TestOversizeResultGoesToItsOwnCallers(t *testing.T) {
	g := newGate()
	var calls atomic.Int64
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if calls.Add(1) == 1 {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
		}
		r := &fakeRows{cols: []string{"n"}}
		for i := range 5 {
			r.rows = append(r.rows, []driver.Value{int64(i)})
		}
		return r, nil
	}}
	db, s := openFake(t, d)
	const n = 4
	counts := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rows, err := db.Query("/* sqlflight: maxrows=2 */ SELECT n FROM items")
			if err != nil {
				t.Error(err)
				return
			}
			defer rows.Close()
			for rows.Next() {
				counts[i]++
			}
			if err := rows.Err(); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "callers", func() bool { return s.Stats().Waiting == n })
	close(g.ch)
	wg.Wait()
	for i, c := range counts {
		if c != 5 {
			t.Errorf("caller %d read %d rows, want 5", i, c)
		}
	}
	if st := s.Stats(); st.TooLarge != 1 {
		t.Errorf("TooLarge = %d", st.TooLarge)
	}
	// The key is remembered: the next caller goes straight through.
	before := s.Stats().BypassReasons[bypassTooLarge]
	rows, err := db.Query("/* sqlflight: maxrows=2 */ SELECT n FROM items")
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if s.Stats().BypassReasons[bypassTooLarge] != before+1 {
		t.Error("a key known to be too large formed a flight")
	}
}

func TestWaitLimitRunsTheQueryItself(t *testing.T) {
	g := newGate()
	var calls atomic.Int64
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if calls.Add(1) == 1 {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
		}
		return oneRow(int64(8)), nil
	}}
	db, s := openFake(t, d)
	const q = "/* sqlflight: wait=1ms */ " + pointQuery
	leader := make(chan error, 1)
	go func() {
		var n int64
		leader <- db.QueryRow(q, 1).Scan(&n)
	}()
	waitFor(t, "leader", func() bool { return s.Stats().Waiting == 1 })
	var n int64
	if err := db.QueryRow(q, 1).Scan(&n); err != nil || n != 8 {
		t.Fatalf("follower: %v %d", err, n)
	}
	if s.Stats().WaitExpired != 1 {
		t.Errorf("WaitExpired = %d", s.Stats().WaitExpired)
	}
	close(g.ch)
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
}

func TestNoJoiningAFlightOlderThanAWrite(t *testing.T) {
	g := newGate()
	var calls atomic.Int64
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		n := calls.Add(1)
		if n == 1 {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
		}
		return oneRow(n), nil
	}}
	db, s := openFake(t, d)
	first := make(chan int64, 1)
	go func() {
		var n int64
		_ = db.QueryRow(pointQuery, 1).Scan(&n)
		first <- n
	}()
	waitFor(t, "first flight", func() bool { return s.Stats().Waiting == 1 })
	if _, err := db.Exec("UPDATE items SET n = n + 1 WHERE id = $1", 1); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.QueryRow(pointQuery, 1).Scan(&n); err != nil || n != 2 {
		t.Fatalf("read after write: %v, got result of origin #%d, want #2", err, n)
	}
	close(g.ch)
	if v := <-first; v != 1 {
		t.Fatalf("first caller got %d", v)
	}
	if s.Stats().Flights != 2 {
		t.Errorf("flights = %d", s.Stats().Flights)
	}
}

func TestWriteToAnotherTableKeepsFlightJoinable(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(int64(1)), nil
	}}
	db, s := openFake(t, d)
	wait1 := herd(t, db, 1, pointQuery, 1)
	waitFor(t, "first flight", func() bool { return s.Stats().Waiting == 1 })
	if _, err := db.Exec("UPDATE other SET n = 1"); err != nil {
		t.Fatal(err)
	}
	wait2 := herd(t, db, 1, pointQuery, 1)
	waitFor(t, "joined", func() bool { return s.Stats().Waiting == 2 })
	close(g.ch)
	for _, w := range []func() ([]int64, []error){wait1, wait2} {
		if vals, errs := w(); errs[0] != nil || vals[0] != 1 {
			t.Fatalf("%v %d", errs[0], vals[0])
		}
	}
	if s.Stats().Flights != 1 || s.Stats().Followers != 1 {
		t.Errorf("flights %d followers %d", s.Stats().Flights, s.Stats().Followers)
	}
}

func TestTransactionsBypass(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var n int64
		if err := tx.QueryRow(pointQuery, 1).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec("UPDATE items SET n = 2"); err != nil {
		t.Fatal(err)
	}
	inv := s.Stats().Invalidations
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Flights != 0 || st.BypassReasons[bypassTx] != 3 {
		t.Errorf("flights %d, tx bypasses %d", st.Flights, st.BypassReasons[bypassTx])
	}
	if st.Invalidations != inv+1 {
		t.Errorf("commit did not bump epochs (%d → %d)", inv, st.Invalidations)
	}
	// BEGIN sent as SQL on a dedicated connection.
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, c, "BEGIN")
	var n int64
	if err := c.QueryRowContext(ctx, pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().BypassReasons[bypassTx] != 4 {
		t.Errorf("query after BEGIN was not bypassed")
	}
	mustExec(t, c, "COMMIT")
	if err := c.QueryRowContext(ctx, pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 1 {
		t.Errorf("query after COMMIT did not share")
	}
}

func mustExec(t *testing.T, c *sql.Conn, q string) {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestSessionStateBypassesUntilDiscard(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, c, "SET search_path = elsewhere")
	var n int64
	if err := c.QueryRowContext(ctx, pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().BypassReasons[bypassSession] != 1 || s.Stats().Flights != 0 {
		t.Fatalf("tainted connection shared: %+v", s.Stats())
	}
	mustExec(t, c, "DISCARD ALL")
	if err := c.QueryRowContext(ctx, pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 1 {
		t.Fatalf("DISCARD ALL did not clear the taint")
	}
}

func TestUnwrapTaintsAndReachesTheParent(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Raw(func(dc any) error {
		u, ok := dc.(interface{ Unwrap() driver.Conn })
		if !ok {
			return errors.New("no Unwrap")
		}
		if _, ok := u.Unwrap().(*fakeConn); !ok {
			return errors.New("Unwrap did not return the parent connection")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := c.QueryRowContext(ctx, pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().BypassReasons[bypassSession] != 1 {
		t.Error("a connection handed out raw still shared")
	}
}

func TestBadAnnotation(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	var n int64
	if err := db.QueryRow("/* sqlflight: sfot=1s */ "+pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.BadAnnotations != 1 || st.BypassReasons[bypassBadAnnotation] != 1 || st.Flights != 0 {
		t.Errorf("malformed annotation: %+v", st)
	}
	strict, _ := openFake(t, &fakeDriver{}, Options{Strict: true})
	err := strict.QueryRow("/* sqlflight: sfot=1s */ "+pointQuery, 1).Scan(&n)
	if !errors.Is(err, ErrBadAnnotation) {
		t.Fatalf("strict: %v", err)
	}
}

func TestPolicyOffAndNoCoalesce(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	var n int64
	for _, q := range []string{"/* sqlflight: off */ " + pointQuery, "-- sqlflight: nocoalesce\n" + pointQuery} {
		if err := db.QueryRow(q, 1).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.QueryRowContext(WithPolicy(context.Background(), Policy{Off: true}), pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Flights != 0 || st.BypassReasons[bypassPolicy] != 3 {
		t.Errorf("%+v", st)
	}
}

func TestUnknownFunctionsNeedOptIn(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	var n int64
	if err := db.QueryRow("SELECT my_counter()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 0 {
		t.Fatal("unknown function shared without opt-in")
	}
	// A policy vouches for nothing: neither coalesce nor a TTL makes an
	// unknown function shareable; only the statement's pure= entry does.
	if err := db.QueryRow("/* sqlflight: coalesce ttl=1m */ SELECT my_counter()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT my_counter()", WithTTL(context.Background(), time.Minute, time.Minute)).Scan(&n); err == nil {
		t.Fatal("a context given as an argument was accepted")
	}
	if err := db.QueryRowContext(WithTTL(context.Background(), time.Minute, time.Minute), "SELECT my_counter()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 0 {
		t.Fatal("a policy vouched for an unknown function")
	}
	// Each call of the unknown function may have changed its session (a
	// tenant helper calling set_config): the connection bypasses sharing
	// until DISCARD ALL.
	if got := s.Stats().BypassReasons[bypassSession]; got == 0 {
		t.Fatal("calling an unknown function left the session clean")
	}
	if _, err := db.Exec("DISCARD ALL"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("/* sqlflight: coalesce pure=my_counter */ SELECT my_counter()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 1 {
		t.Fatal("pure= did not vouch for the function")
	}
	if err := db.QueryRow("SELECT nextval('s')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("/* sqlflight: coalesce pure=nextval */ SELECT nextval('s')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 1 {
		t.Fatal("nextval shared despite being never shareable")
	}
}

func TestEarlyCloseAndQueryRow(t *testing.T) {
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		r := &fakeRows{cols: []string{"n"}}
		for i := range 100 {
			r.rows = append(r.rows, []driver.Value{int64(i)})
		}
		return r, nil
	}}
	db, _ := openFake(t, d)
	rows, err := db.Query("SELECT n FROM items")
	if err != nil {
		t.Fatal(err)
	}
	rows.Next()
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.QueryRow("SELECT n FROM items").Scan(&n); err != nil || n != 0 {
		t.Fatal(err, n)
	}
}

func TestPipelineStatsAfterClose(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	var n int64
	for range 5 {
		if err := db.QueryRow(pointQuery, 1).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// An origin still giving its connection back closes it on its way out.
	waitFor(t, "real connections closed after DB.Close", func() bool {
		return s.Stats().RealConns == 0 && d.opened.Load() == d.closed.Load()
	})
}

func TestArgumentsAreDetachedFromTheLeader(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		b := args[0].Value.([]byte)
		return oneRow(append([]byte(nil), b...)), nil
	}}
	db, s := openFake(t, d)
	const q = "SELECT b FROM items WHERE b = $1"
	arg := []byte("alpha")
	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() {
		var b []byte
		leader <- db.QueryRowContext(ctx, q, arg).Scan(&b)
	}()
	waitFor(t, "leader", func() bool { return s.Stats().Waiting == 1 })
	follower := make(chan string, 1)
	go func() {
		var b []byte
		_ = db.QueryRow(q, []byte("alpha")).Scan(&b)
		follower <- string(b)
	}()
	waitFor(t, "follower", func() bool { return s.Stats().Waiting == 2 })
	cancel()
	<-leader
	copy(arg, "XXXXX") // the leader reuses its buffer after leaving
	close(g.ch)
	if got := <-follower; got != "alpha" {
		t.Fatalf("follower got %q: the origin used the leader's reused buffer", got)
	}
}

func TestCommitAndChainStaysInATransaction(t *testing.T) {
	d := &fakeDriver{}
	db, s := openFake(t, d)
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, c, "BEGIN")
	mustExec(t, c, "COMMIT AND CHAIN")
	var n int64
	if err := c.QueryRowContext(ctx, pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 0 {
		t.Fatal("a read after COMMIT AND CHAIN was shared")
	}
	mustExec(t, c, "ROLLBACK")
	if err := c.QueryRowContext(ctx, pointQuery, 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Flights != 1 {
		t.Fatal("a read after ROLLBACK was not shared")
	}
}
