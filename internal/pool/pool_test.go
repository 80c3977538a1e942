package pool_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/pool"
)

// fakeConn is a real connection that counts its Close; valid false makes
// it invalid (driver.Validator).
type fakeConn struct {
	id      int
	closed  atomic.Int32
	invalid atomic.Bool
}

func (c *fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no statements") }
func (c *fakeConn) Close() error                        { c.closed.Add(1); return nil }
func (c *fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("no transactions") }
func (c *fakeConn) IsValid() bool                       { return !c.invalid.Load() }

// opener opens fakeConns and remembers them; fail makes the next opens
// fail.
type opener struct {
	mu    sync.Mutex
	conns []*fakeConn
	fail  error
}

func (o *opener) open(context.Context) (driver.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail != nil {
		return nil, o.fail
	}
	c := &fakeConn{id: len(o.conns)}
	o.conns = append(o.conns, c)
	return c, nil
}

func (o *opener) opened() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.conns)
}

// fakeClock is a Clock whose time moves only with Add, which runs the
// AfterFuncs that came due.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	funcs []timed
}

type timed struct {
	at time.Time
	f  func()
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) {
	c.mu.Lock()
	c.funcs = append(c.funcs, timed{at: c.t.Add(d), f: f})
	c.mu.Unlock()
}

// pending reports how many AfterFuncs wait.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.funcs)
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	var due []func()
	rest := c.funcs[:0]
	for _, tf := range c.funcs {
		if !tf.at.After(c.t) {
			due = append(due, tf.f)
		} else {
			rest = append(rest, tf)
		}
	}
	c.funcs = rest
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

func newPool(o *opener, max int) (*pool.Pool, *atomic.Uint64, *atomic.Int64, *atomic.Uint64) {
	var opened, waits atomic.Uint64
	var open atomic.Int64
	p := &pool.Pool{Max: max, Counters: pool.Counters{Opened: &opened, Open: &open, Waits: &waits}}
	p.SetOpen(o.open)
	return p, &opened, &open, &waits
}

func mustGet(t *testing.T, p *pool.Pool) (driver.Conn, bool) {
	t.Helper()
	rc, reused, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rc, reused
}

// TestGetTakesIdleThenLendableThenOpens: Get prefers the most recently
// idle connection, then a lendable one, and opens one only without either.
func TestGetTakesIdleThenLendableThenOpens(t *testing.T) {
	o := &opener{}
	p, opened, open, _ := newPool(o, 0)
	lent := &fakeConn{id: 100}
	lend := lent
	p.Lendable = func() driver.Conn {
		if lend == nil {
			return nil
		}
		rc := lend
		lend = nil
		return rc
	}
	a, reused := mustGet(t, p)
	if a != lent || !reused {
		t.Fatalf("first Get: %v reused %v, want the lendable one, reused", a, reused)
	}
	b, reused := mustGet(t, p)
	c, _ := mustGet(t, p)
	if reused || o.opened() != 2 || opened.Load() != 2 || open.Load() != 2 {
		t.Fatalf("opened %d (counted %d, open %d), want 2 new", o.opened(), opened.Load(), open.Load())
	}
	p.Put(b, false)
	p.Put(c, false)
	if got, reused := mustGet(t, p); got != c || !reused {
		t.Errorf("Get took %v, want the most recently idle %v", got, c)
	}
	if got, _ := mustGet(t, p); got != b {
		t.Errorf("Get took %v, want the other idle %v", got, b)
	}
	if o.opened() != 2 {
		t.Errorf("%d opened, want 2: idle ones were there", o.opened())
	}
}

// TestCapCountsEveryConnection: a connection reported with Counted counts
// against Max like one Get opened; at the cap Get waits until one is put
// back, and then takes it.
func TestCapCountsEveryConnection(t *testing.T) {
	o := &opener{}
	p, _, _, waits := newPool(o, 2)
	p.Counted() // the scope's first, opened elsewhere
	a, _ := mustGet(t, p)
	if p.Open() != 2 {
		t.Fatalf("%d counted, want 2", p.Open())
	}
	got := make(chan driver.Conn)
	go func() {
		rc, reused, err := p.Get(context.Background())
		if err != nil || !reused {
			t.Errorf("the waiter: %v, reused %v", err, reused)
		}
		got <- rc
	}()
	for waits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if o.opened() != 1 {
		t.Fatalf("%d opened at the cap, want 1", o.opened())
	}
	p.Put(a, false)
	if rc := <-got; rc != a {
		t.Errorf("the waiter got %v, want the one put back", rc)
	}
	if o.opened() != 1 || p.Open() != 2 {
		t.Errorf("%d opened, %d counted, want 1 and 2", o.opened(), p.Open())
	}
}

// TestLendableAtTheCap: at the cap, a connection a virtual one lends is
// taken instead of waiting.
func TestLendableAtTheCap(t *testing.T) {
	o := &opener{}
	p, _, _, waits := newPool(o, 1)
	p.Counted()
	lent := &fakeConn{}
	calls := 0
	p.Lendable = func() driver.Conn {
		calls++
		if calls == 2 { // the first is Get's before it tries to open
			return lent
		}
		return nil
	}
	if rc, reused := mustGet(t, p); rc != lent || !reused {
		t.Fatalf("Get at the cap: %v, want the lent one", rc)
	}
	if waits.Load() != 0 || o.opened() != 0 {
		t.Errorf("%d waits, %d opened, want none", waits.Load(), o.opened())
	}
}

// TestCloseAndFailedOpenFreeTheCap: a closed connection, or an open that
// failed, frees its place under the cap and wakes a waiter.
func TestCloseAndFailedOpenFreeTheCap(t *testing.T) {
	o := &opener{}
	p, _, open, waits := newPool(o, 1)
	a, _ := mustGet(t, p)
	done := make(chan error)
	go func() {
		rc, reused, err := p.Get(context.Background())
		if err == nil && reused {
			err = errors.New("the waiter's connection served before")
		}
		if rc != nil {
			p.Close(rc)
		}
		done <- err
	}()
	for waits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	p.Close(a)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.(*fakeConn).closed.Load() != 1 || open.Load() != 0 || p.Open() != 0 {
		t.Errorf("closed %d, open %d, counted %d", a.(*fakeConn).closed.Load(), open.Load(), p.Open())
	}
	broken := errors.New("refused")
	o.mu.Lock()
	o.fail = broken
	o.mu.Unlock()
	if _, _, err := p.Get(context.Background()); !errors.Is(err, broken) {
		t.Fatalf("Get: %v, want the open's error", err)
	}
	if p.Open() != 0 {
		t.Fatalf("a failed open is counted: %d", p.Open())
	}
	o.mu.Lock()
	o.fail = nil
	o.mu.Unlock()
	if _, reused := mustGet(t, p); reused || o.opened() != 3 {
		t.Errorf("after a failed open: %d opened, want 3", o.opened())
	}
}

// TestWaitEndsWithTheContext: a caller waiting at the cap gets its
// context's error when it ends.
func TestWaitEndsWithTheContext(t *testing.T) {
	o := &opener{}
	p, _, _, waits := newPool(o, 1)
	p.Counted()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, err := p.Get(ctx)
		done <- err
	}()
	for waits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
	if p.Open() != 1 || o.opened() != 0 {
		t.Errorf("%d counted, %d opened", p.Open(), o.opened())
	}
}

// TestPutKeepsOrCloses: uncapped, MaxIdle connections are kept and the
// next closed; capped, all are kept; a broken or invalid connection, or
// one put back while the scope has no users, is closed.
func TestPutKeepsOrCloses(t *testing.T) {
	for _, max := range []int{0, 5} {
		o := &opener{}
		p, _, open, _ := newPool(o, max)
		var conns []driver.Conn
		for range pool.MaxIdle + 1 {
			rc, _ := mustGet(t, p)
			conns = append(conns, rc)
		}
		for _, rc := range conns {
			p.Put(rc, false)
		}
		want := pool.MaxIdle
		if max > 0 {
			want = pool.MaxIdle + 1
		}
		if p.Idle() != want || int(open.Load()) != want || p.Open() != want {
			t.Errorf("Max %d: %d idle, %d open, %d counted, want %d", max, p.Idle(), open.Load(), p.Open(), want)
		}
		if max == 0 && conns[pool.MaxIdle].(*fakeConn).closed.Load() != 1 {
			t.Error("the connection past MaxIdle was not closed")
		}
	}
	// KeepIdle above MaxIdle: that many are kept, the next closed.
	{
		o := &opener{}
		p, _, open, _ := newPool(o, 0)
		p.KeepIdle = pool.MaxIdle + 3
		var conns []driver.Conn
		for range p.KeepIdle + 1 {
			rc, _ := mustGet(t, p)
			conns = append(conns, rc)
		}
		for _, rc := range conns {
			p.Put(rc, false)
		}
		if p.Idle() != p.KeepIdle || int(open.Load()) != p.KeepIdle {
			t.Errorf("KeepIdle %d: %d idle, %d open", p.KeepIdle, p.Idle(), open.Load())
		}
		if conns[p.KeepIdle].(*fakeConn).closed.Load() != 1 {
			t.Error("the connection past KeepIdle was not closed")
		}
	}
	o := &opener{}
	p, _, _, _ := newPool(o, 0)
	var users atomic.Int64
	users.Store(1)
	p.Users = users.Load
	a, _ := mustGet(t, p)
	b, _ := mustGet(t, p)
	c, _ := mustGet(t, p)
	p.Put(a, true)
	b.(*fakeConn).invalid.Store(true)
	p.Put(b, false)
	users.Store(0)
	p.Put(c, false)
	for _, rc := range []driver.Conn{a, b, c} {
		if rc.(*fakeConn).closed.Load() != 1 {
			t.Errorf("connection %d kept", rc.(*fakeConn).id)
		}
	}
	if p.Idle() != 0 || p.Open() != 0 {
		t.Errorf("%d idle, %d counted, want none", p.Idle(), p.Open())
	}
}

// TestSweepClosesIdleConnections: a connection idle for IdleTimeout is
// closed by the sweep, which then waits for the next one's turn.
func TestSweepClosesIdleConnections(t *testing.T) {
	o := &opener{}
	p, _, _, _ := newPool(o, 0)
	clk := newFakeClock()
	p.Clock = clk
	a, _ := mustGet(t, p)
	b, _ := mustGet(t, p)
	p.Put(a, false)
	clk.Add(10 * time.Second)
	p.Put(b, false)
	if clk.pending() != 1 {
		t.Fatalf("%d sweeps set, want 1", clk.pending())
	}
	clk.Add(pool.IdleTimeout - 10*time.Second - time.Nanosecond)
	if a.(*fakeConn).closed.Load() != 0 {
		t.Fatal("closed before IdleTimeout")
	}
	clk.Add(time.Nanosecond)
	if a.(*fakeConn).closed.Load() != 1 || b.(*fakeConn).closed.Load() != 0 || p.Idle() != 1 {
		t.Fatalf("after IdleTimeout: a closed %d, b closed %d, %d idle", a.(*fakeConn).closed.Load(), b.(*fakeConn).closed.Load(), p.Idle())
	}
	clk.Add(10 * time.Second)
	if b.(*fakeConn).closed.Load() != 1 || p.Idle() != 0 || p.Open() != 0 || clk.pending() != 0 {
		t.Fatalf("b closed %d, %d idle, %d counted, %d sweeps set", b.(*fakeConn).closed.Load(), p.Idle(), p.Open(), clk.pending())
	}
	// The next idle connection sets a sweep again.
	c, _ := mustGet(t, p)
	p.Put(c, false)
	if clk.pending() != 1 {
		t.Errorf("%d sweeps set after the pool emptied, want 1", clk.pending())
	}
}

// TestCloseIdle closes every idle connection and none that is out.
func TestCloseIdle(t *testing.T) {
	o := &opener{}
	p, _, open, _ := newPool(o, 0)
	a, _ := mustGet(t, p)
	b, _ := mustGet(t, p)
	out, _ := mustGet(t, p)
	p.Put(a, false)
	p.Put(b, false)
	p.CloseIdle()
	if a.(*fakeConn).closed.Load() != 1 || b.(*fakeConn).closed.Load() != 1 || out.(*fakeConn).closed.Load() != 0 {
		t.Error("CloseIdle closed the wrong connections")
	}
	if open.Load() != 1 || p.Open() != 1 {
		t.Errorf("%d open, %d counted, want the one out", open.Load(), p.Open())
	}
}

// TestCapHoldsUnderConcurrency: many callers taking and putting back
// connections never have more than Max open.
func TestCapHoldsUnderConcurrency(t *testing.T) {
	o := &opener{}
	p, _, open, _ := newPool(o, 3)
	var out, most atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 50 {
				rc, _, err := p.Get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				n := out.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				out.Add(-1)
				p.Put(rc, false)
			}
		})
	}
	wg.Wait()
	if most.Load() > 3 || o.opened() > 3 || open.Load() > 3 {
		t.Errorf("%d out at once, %d opened, %d open under Max 3", most.Load(), o.opened(), open.Load())
	}
}
