package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/fakeclock"
)

// fakeClock is a Clock that moves only when a test moves it.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New() }

// counting is a parent whose every query returns the number of the query.
// Queries after the first wait at gate, if set.
type counting struct {
	d    *fakeDriver
	n    atomic.Int64
	fail atomic.Bool
	gate atomic.Pointer[gate]
}

func newCounting() *counting {
	c := &counting{}
	c.d = &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if g := c.gate.Load(); g != nil && c.n.Load() > 0 {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
		}
		if c.fail.Load() {
			return nil, errors.New("database down")
		}
		return oneRow(c.n.Add(1)), nil
	}}
	return c
}

func openCached(t *testing.T, opts Options) (*sql.DB, *Shield, *counting, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	opts.Clock = clk
	c := newCounting()
	db, s := openFake(t, c.d, opts)
	t.Cleanup(func() { _ = s.Close() })
	return db, s, c, clk
}

func readN(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// settle waits for background refreshes to finish.
func settle(t *testing.T, s *Shield) {
	t.Helper()
	waitFor(t, "background work", func() bool { return s.Stats().InFlight == 0 })
}

const ttlQuery = "/* sqlflight: soft=10s hard=1m jitter=0% */ SELECT n FROM items WHERE id = $1"

func TestFreshHitDoesNoDatabaseWork(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	if n := readN(t, db, ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	clk.Add(9 * time.Second)
	for range 5 {
		if n := readN(t, db, ttlQuery, 1); n != 1 {
			t.Fatalf("fresh hit returned %d", n)
		}
	}
	if q := c.d.queries.Load(); q != 1 {
		t.Errorf("database queries = %d, want 1", q)
	}
	if st := s.Stats(); st.FreshHits != 5 || st.Misses != 1 || st.Fills != 1 || st.CacheEntries != 1 || st.CacheBytes < entryOverhead {
		t.Errorf("%+v", st)
	}
	if readN(t, db, ttlQuery, 2) != 2 {
		t.Error("another argument shared the entry")
	}
}

func TestStaleServesAndRefreshesOnce(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	readN(t, db, ttlQuery, 1)
	clk.Add(11 * time.Second) // stale, not expired
	g := newGate()
	c.gate.Store(g) // the refresh waits until every stale read is served
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			var n int64
			if err := db.QueryRow(ttlQuery, 1).Scan(&n); err != nil || n != 1 {
				t.Errorf("stale read: %v %d", err, n)
			}
		})
	}
	wg.Wait()
	close(g.ch)
	settle(t, s)
	st := s.Stats()
	if st.StaleHits != 20 || st.Refreshes != 1 {
		t.Fatalf("stale hits %d refreshes %d", st.StaleHits, st.Refreshes)
	}
	if q := c.d.queries.Load(); q != 2 {
		t.Fatalf("database queries = %d, want 2 (one refresh)", q)
	}
	waitFor(t, "refreshed entry", func() bool { return readN(t, db, ttlQuery, 1) == 2 })
	if s.Stats().FreshHits == 0 {
		t.Error("refreshed entry not served fresh")
	}
}

func TestExpiredFetchesInTheForeground(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	readN(t, db, ttlQuery, 1)
	clk.Add(61 * time.Second)
	if n := readN(t, db, ttlQuery, 1); n != 2 {
		t.Fatalf("after hard: %d", n)
	}
	if s.Stats().Misses != 2 || c.d.queries.Load() != 2 {
		t.Errorf("%+v", s.Stats())
	}
}

func TestFailedRefreshKeepsStaleAndBacksOff(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	readN(t, db, ttlQuery, 1)
	clk.Add(11 * time.Second)
	c.fail.Store(true)
	if n := readN(t, db, ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	settle(t, s)
	if s.Stats().RefreshFailures != 1 {
		t.Fatalf("%+v", s.Stats())
	}
	for range 5 {
		if n := readN(t, db, ttlQuery, 1); n != 1 {
			t.Fatal("stale entry lost after a failed refresh")
		}
	}
	settle(t, s)
	if r := s.Stats().Refreshes; r != 1 {
		t.Fatalf("refreshes = %d during the back-off, want 1", r)
	}
	c.fail.Store(false)
	clk.Add(31 * time.Second) // past the longest back-off, before hard
	readN(t, db, ttlQuery, 1)
	settle(t, s)
	if r := s.Stats().Refreshes; r != 2 {
		t.Fatalf("refreshes = %d after the back-off, want 2", r)
	}
	waitFor(t, "refreshed", func() bool { return readN(t, db, ttlQuery, 1) == 2 })
}

func TestStaleIfError(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	readN(t, db, ttlQuery, 1)
	clk.Add(61 * time.Second) // expired; MaxStale defaults to hard
	c.fail.Store(true)
	if n := readN(t, db, ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	if s.Stats().StaleIfError != 1 {
		t.Fatalf("%+v", s.Stats())
	}
	clk.Add(61 * time.Second) // past hard + MaxStale
	var n int64
	if err := db.QueryRow(ttlQuery, 1).Scan(&n); err == nil {
		t.Fatal("an entry past MaxStale was served")
	}

	db2, _, c2, clk2 := openCached(t, Options{MaxStale: -1})
	readN(t, db2, ttlQuery, 1)
	clk2.Add(61 * time.Second)
	c2.fail.Store(true)
	if err := db2.QueryRow(ttlQuery, 1).Scan(&n); err == nil {
		t.Fatal("stale-if-error with MaxStale < 0")
	}
}

func TestEarlyRefreshHappensBeforeSoft(t *testing.T) {
	db, s, _, clk := openCached(t, Options{})
	q := "/* sqlflight: soft=10s hard=1m jitter=0% beta=1e12 */ SELECT n FROM items WHERE id = $1"
	readN(t, db, q, 1) // Δ is the real origin time: tiny but not zero
	clk.Add(5 * time.Second)
	if n := readN(t, db, q, 1); n != 1 {
		t.Fatal("an early refresh must not delay the hit")
	}
	settle(t, s)
	if s.Stats().Refreshes != 1 {
		t.Fatalf("no early refresh with a huge beta: %+v", s.Stats())
	}
	q0 := "/* sqlflight: soft=10s hard=1m beta=0 */ SELECT n FROM items WHERE id = $1"
	readN(t, db, q0, 7)
	clk.Add(9 * time.Second)
	readN(t, db, q0, 7)
	settle(t, s)
	if s.Stats().Refreshes != 1 {
		t.Fatal("beta=0 refreshed early")
	}
}

func TestNegativeCache(t *testing.T) {
	clk := newFakeClock()
	var queries atomic.Int64
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		queries.Add(1)
		return &fakeRows{cols: []string{"n"}}, nil
	}}
	db, s := openFake(t, d, Options{Clock: clk})
	t.Cleanup(func() { _ = s.Close() })
	q := "/* sqlflight: soft=1m neg=2s jitter=0% */ SELECT n FROM items WHERE id = $1"
	var n int64
	for range 3 {
		if err := db.QueryRow(q, 404).Scan(&n); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("want ErrNoRows, got %v", err)
		}
	}
	if queries.Load() != 1 || s.Stats().NegativeHits != 2 {
		t.Fatalf("queries %d %+v", queries.Load(), s.Stats())
	}
	clk.Add(3 * time.Second)
	_ = db.QueryRow(q, 404).Scan(&n)
	if queries.Load() != 2 {
		t.Fatal("empty result kept past neg")
	}
}

func TestWritesAndInvalidateDropEntries(t *testing.T) {
	db, s, _, _ := openCached(t, Options{})
	readN(t, db, ttlQuery, 1)
	if _, err := db.Exec("UPDATE items SET n = 0 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if n := readN(t, db, ttlQuery, 1); n != 2 {
		t.Fatalf("read after write: %d (served a result older than the write)", n)
	}
	if _, err := db.Exec("UPDATE other SET n = 0"); err != nil {
		t.Fatal(err)
	}
	if n := readN(t, db, ttlQuery, 1); n != 2 {
		t.Fatalf("a write to another table dropped the entry: %d", n)
	}
	s.Invalidate("ITEMS")
	if n := readN(t, db, ttlQuery, 1); n != 3 {
		t.Fatalf("after Invalidate: %d", n)
	}
	s.InvalidateAll()
	if n := readN(t, db, ttlQuery, 1); n != 4 {
		t.Fatalf("after InvalidateAll: %d", n)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("DELETE FROM items WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	if n := readN(t, db, ttlQuery, 1); n != 4 {
		t.Fatalf("an uncommitted write dropped the entry: %d", n)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := readN(t, db, ttlQuery, 1); n != 5 {
		t.Fatalf("after commit: %d", n)
	}
}

func TestFillSkippedAfterWriteDuringFlight(t *testing.T) {
	g := newGate()
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return oneRow(int64(1)), nil
	}}
	db, s := openFake(t, d, Options{Clock: newFakeClock()})
	t.Cleanup(func() { _ = s.Close() })
	done := make(chan int64, 1)
	go func() {
		var n int64
		_ = db.QueryRow(ttlQuery, 1).Scan(&n)
		done <- n
	}()
	waitFor(t, "flight", func() bool { return s.Stats().Waiting == 1 })
	if _, err := db.Exec("UPDATE items SET n = 2"); err != nil {
		t.Fatal(err)
	}
	close(g.ch)
	if n := <-done; n != 1 {
		t.Fatal(n)
	}
	settle(t, s)
	if s.Stats().Fills != 0 {
		t.Fatal("a result computed before a write was cached")
	}
}

func TestPolicyPrecedenceAndRules(t *testing.T) {
	db, s, c, _ := openCached(t, Options{Rules: []Rule{
		{Match: regexp.MustCompile(`^SELECT 'never'`), Policy: Policy{Off: true}},
		{Tables: []string{"public.items"}, Policy: Policy{Soft: time.Minute}},
	}})
	q := "SELECT n FROM items WHERE id = $1"
	readN(t, db, q, 1)
	if readN(t, db, q, 1) != 1 {
		t.Fatal("rule TTL not applied")
	}
	ctx := WithPolicy(context.Background(), Policy{NoCache: true})
	var n int64
	if err := db.QueryRowContext(ctx, q, 1).Scan(&n); err != nil || n != 2 {
		t.Fatalf("context must override the rule: %v %d", err, n)
	}
	if err := db.QueryRowContext(ctx, "/* sqlflight: ttl=1m */ "+q, 1).Scan(&n); err != nil || n != 1 {
		t.Fatalf("annotation must override the context: %v %d", err, n)
	}
	before := c.d.queries.Load()
	readN(t, db, "SELECT n FROM other")
	readN(t, db, "SELECT n FROM other")
	if c.d.queries.Load() != before+2 {
		t.Error("a rule for another table applied")
	}
	_ = s
}

func TestTimeFunctionsNeedAnExplicitTTL(t *testing.T) {
	db, s, _, _ := openCached(t, Options{Default: Policy{Soft: time.Minute}})
	readN(t, db, "SELECT extract(epoch FROM now())::int8")
	readN(t, db, "SELECT extract(epoch FROM now())::int8")
	if s.Stats().Fills != 0 {
		t.Fatal("now() cached under a default TTL")
	}
	q := "/* sqlflight: ttl=1m */ SELECT extract(epoch FROM now())::int8"
	readN(t, db, q)
	if readN(t, db, q) == 0 || s.Stats().Fills != 1 {
		t.Fatal("an explicit TTL did not cache now()")
	}
}

func TestCacheHitOpensNoConnection(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	readN(t, db, ttlQuery, 1)
	opened := c.d.opened.Load()
	ctx := context.Background()
	var conns []*sql.Conn
	for range 5 { // fresh virtual connections
		cn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		var n int64
		if err := cn.QueryRowContext(ctx, ttlQuery, 1).Scan(&n); err != nil || n != 1 {
			t.Fatal(err, n)
		}
	}
	if c.d.opened.Load() != opened {
		t.Fatalf("cache hits opened %d connections", c.d.opened.Load()-opened)
	}
	clk.Add(11 * time.Second) // a stale hit refreshes on a spare connection
	var n int64
	if err := conns[0].QueryRowContext(ctx, ttlQuery, 1).Scan(&n); err != nil || n != 1 {
		t.Fatal(err, n)
	}
	settle(t, s)
	for _, cn := range conns {
		cn.Close()
	}
}

func TestSchemaQualifiedTablesShareEpochs(t *testing.T) {
	db, s, _, _ := openCached(t, Options{})
	qa := "/* sqlflight: ttl=1h tables=public.items */ SELECT n FROM items"
	first := readN(t, db, qa)
	if _, err := db.Exec("UPDATE public.items SET n = 2"); err != nil {
		t.Fatal(err)
	}
	if readN(t, db, qa) == first {
		t.Fatal("tables=public.items was not invalidated by UPDATE public.items")
	}
	qb := "/* sqlflight: ttl=1h */ SELECT n FROM public.items WHERE id = 1"
	first = readN(t, db, qb)
	s.Invalidate(`public."ITEMS"`)
	if readN(t, db, qb) == first {
		t.Fatal(`Invalidate("public.\"ITEMS\"") did not drop the entry`)
	}
}

func TestCloseWhileFilling(t *testing.T) {
	for round := range 20 {
		d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
			return oneRow(int64(1)), nil
		}}
		db, s := openFake(t, d)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err := db.QueryRowContext(ctx, "/* sqlflight: ttl=1h */ SELECT n FROM t WHERE id = $1", (i*8+w)%50).Scan(new(int64))
					cancel()
					if err != nil {
						t.Errorf("round %d: %v", round, err)
						return
					}
				}
			})
		}
		waitFor(t, "some fills", func() bool { return s.Stats().Fills > 10 })
		_ = s.Close()
		before := s.Stats().Queries
		waitFor(t, "queries after Close", func() bool { return s.Stats().Queries > before+100 })
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

func TestStatsByName(t *testing.T) {
	db, s, _, _ := openCached(t, Options{})
	q := "/* sqlflight: ttl=1h name=item_page */ SELECT n FROM items WHERE id = $1"
	for range 3 {
		readN(t, db, q, 1)
	}
	readN(t, db, "/* sqlflight: ttl=1h */ SELECT n FROM items WHERE id = $1", 2)
	st := s.Stats()
	ns, ok := st.Names["item_page"]
	if !ok || len(st.Names) != 1 {
		t.Fatalf("names %v", st.Names)
	}
	if ns.Queries != 3 || ns.Misses != 1 || ns.FreshHits != 2 || ns.OriginExecutions != 1 || ns.OriginDuration.Count != 1 {
		t.Fatalf("%+v", ns)
	}
	if st.OriginDuration.Count != 2 || st.OriginDuration.Quantile(1) <= 0 {
		t.Fatalf("origin duration %+v", st.OriginDuration)
	}
}

// TestNothingPendsForAStoreThatHoldsNothing: with MaxBytes 1 the store
// can hold no result, so no entry stays pending for it after its flight
// ended: every read, one after another, queries. (A pending entry outlived
// the read that filled it and answered the next one without the tier's
// check: an instance without L1 served a result older than a write whose
// publication had returned.)
func TestNothingPendsForAStoreThatHoldsNothing(t *testing.T) {
	d := &fakeDriver{}
	var n atomic.Int64
	d.onQuery = func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		return oneRow(n.Add(1)), nil
	}
	db, s := openPooled(t, d, Options{MaxBytes: 1})
	t.Cleanup(func() { _ = s.Close() })
	const q = "/* sqlflight: soft=1m hard=2m */ " + pointQuery
	const reads = 200
	for i := range reads {
		if got := readValue(t, db, q); got != int64(i+1) {
			t.Fatalf("read %d: got %d, want a new origin's %d", i+1, got, i+1)
		}
	}
	if st := s.Stats(); st.FreshHits != 0 {
		t.Errorf("fresh hits %d from a store of one byte, want 0", st.FreshHits)
	}
}

// TestReaderThatLookedBeforeAFlightEndedTakesItsEntry: a caching reader that
// found no flight, but the store holds an entry other than the one its
// lookup saw (a flight ended in between), looks again instead of leading a
// flight of its own; one whose lookup saw that very entry leads.
func TestReaderThatLookedBeforeAFlightEndedTakesItsEntry(t *testing.T) {
	s := New(Options{Clock: newFakeClock()})
	t.Cleanup(func() { _ = s.Close() })
	st := s.cache()
	now := s.opts.Clock.Now()
	e := &entry{key: "k", res: &result{}, seq: s.epochs.Now(), known: true, last: now.Add(time.Hour)}
	st.Put(e, now)
	c := &conn{s: s.engine}
	if f, lead := s.flights.joinOrLead("k", &s.epochs, nil, true, nil, st, c, nil); f != nil || lead {
		t.Fatalf("a reader that saw nothing: flight %v, lead %v; want to look again", f, lead)
	}
	if f, lead := s.flights.joinOrLead("k", &s.epochs, nil, true, nil, st, c, e); f == nil || !lead {
		t.Fatalf("a reader that saw the entry: flight %v, lead %v; want to lead", f, lead)
	}
	// A refresh of the entry does not start once another one showed.
	e2 := &entry{key: "k2", res: &result{}, seq: s.epochs.Now(), known: true, last: now.Add(time.Hour)}
	st.Put(e2, now)
	if _, ok := s.flights.startRefresh("k2", &s.epochs, nil, true, nil, st, e); ok {
		t.Fatal("a refresh of an entry the store no longer holds started")
	}
	if f, ok := s.flights.startRefresh("k2", &s.epochs, nil, true, nil, st, e2); !ok || f == nil {
		t.Fatal("the refresh of the entry the store holds did not start")
	}
}
