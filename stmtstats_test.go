package sqlflight

import (
	"context"
	"database/sql/driver"
	"slices"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// statementOf returns the statistics of query's statement, failing the
// test if it is not counted.
func statementNamed(t *testing.T, s *Shield, query string) StatementStats {
	t.Helper()
	x := s.Explain(context.Background(), query)
	if x.Statement == nil {
		t.Fatalf("%q is not counted; statements: %+v", query, s.Statements())
	}
	return *x.Statement
}

// Each path a read can take counts under its statement: fresh, negative
// and stale hits, misses (flights led), bypasses by reason, with origin
// executions, rows and refreshes.
func TestStatementPaths(t *testing.T) {
	clock := newFakeClock()
	d := &fakeDriver{onQuery: func(_ context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
		if args[0].Value.(int64) < 0 {
			return &fakeRows{cols: []string{"n"}}, nil
		}
		return oneRow(args[0].Value), nil
	}}
	db, s := openFake(t, d, Options{Clock: clock})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	const cached = "/* sqlflight: soft=10s hard=1m */ SELECT n FROM items WHERE id = $1"
	read := func(q string, id int64) {
		t.Helper()
		rows, err := db.QueryContext(ctx, q, id)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	read(cached, 1)  // miss
	read(cached, 1)  // fresh
	read(cached, 1)  // fresh
	read(cached, -1) // miss (empty)
	read(cached, -1) // negative
	clock.Add(20 * time.Second)
	read(cached, 1) // stale, and a refresh
	waitFor(t, "the refresh's fill", func() bool { return s.Stats().Fills >= 3 })

	st := statementNamed(t, s, cached)
	if st.Calls != 6 || st.Error != 0 || st.Fresh != 2 || st.Negative != 1 || st.Stale != 1 || st.Miss != 2 {
		t.Errorf("calls %d (error %d) fresh %d negative %d stale %d miss %d, want 6 (0) 2 1 1 2",
			st.Calls, st.Error, st.Fresh, st.Negative, st.Stale, st.Miss)
	}
	if st.OriginExecutions != 3 || st.Refreshes != 1 || st.Rows != 2 || st.Bytes == 0 {
		t.Errorf("origin executions %d refreshes %d rows %d bytes %d, want 3 1 2 >0",
			st.OriginExecutions, st.Refreshes, st.Rows, st.Bytes)
	}
	if !st.Shared || !st.Cacheable || st.Policy != "soft=10s hard=1m" || st.Verdict != "shareable" || st.WaitersPerFlight != 1 {
		t.Errorf("shared %v cacheable %v policy %q verdict %q waiters %v", st.Shared, st.Cacheable, st.Policy, st.Verdict, st.WaitersPerFlight)
	}
	if len(st.HotKeys) != 2 || st.HotKeys[0].Calls != 4 || len(st.HotKeys[0].Args) != 1 || st.HotKeys[0].Args[0] != "1" {
		t.Errorf("hot keys %+v, want id 1 first with 4 calls", st.HotKeys)
	}

	const coalesced = "SELECT n FROM items WHERE id = $1 AND n > 0"
	read(coalesced, 7)
	if st := statementNamed(t, s, coalesced); st.Policy != "coalesce only" || st.Miss != 1 || st.OriginExecutions != 1 {
		t.Errorf("coalesce only: %+v", st)
	}

	const locking = "SELECT n FROM items WHERE id = $1 FOR UPDATE"
	read(locking, 1)
	read(locking, 2)
	if st := statementNamed(t, s, locking); st.Shared || st.Bypass["write"] != 2 || st.Calls != 2 || st.Reason == "" {
		t.Errorf("locking read: %+v", st)
	}
	// The annotation is not part of the statement's shape: another text.
	const off = "/* sqlflight: off */ SELECT n FROM items WHERE id = $1 AND n < 0"
	read(off, 1)
	if st := statementNamed(t, s, off); st.Policy != "off" || st.Bypass["policy"] != 1 {
		t.Errorf("off: %+v", st)
	}
	const write = "UPDATE items SET n = n + 1 WHERE id = $1"
	for range 3 {
		if _, err := db.ExecContext(ctx, write, 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := statementNamed(t, s, write); st.Bypass["exec"] != 3 || st.Calls != 3 || st.Policy != "" {
		t.Errorf("write: %+v", st)
	}
	if got := s.Statements(); len(got) != 5 || got[0].Calls < got[len(got)-1].Calls {
		t.Errorf("%d statements, want 5, most called first", len(got))
	}
}

// Every bypass reason of route.go has an outcome of its own.
func TestStatementBypassReasons(t *testing.T) {
	for _, r := range bypassReasons(t) {
		if o := stats.BypassOutcome(r); o < outBypass || bypassReasonList[o-outBypass] != r {
			t.Errorf("bypass reason %q has outcome %d", r, o)
		}
	}
	if len(bypassReasonList) != len(bypassReasons(t)) {
		t.Errorf("%d outcomes for %d reasons", len(bypassReasonList), len(bypassReasons(t)))
	}
}

// The advisor proposes TTLs from the writes to a statement's tables, and
// leaves out statements that are cached, never repeat, or cannot be cached.
func TestAdvice(t *testing.T) {
	clock := newFakeClock()
	d := &fakeDriver{onQuery: func(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
		return oneRow(args[0].Value), nil
	}}
	db, s := openFake(t, d, Options{Clock: clock})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	read := func(q string, id int) {
		t.Helper()
		var n int64
		if err := db.QueryRowContext(ctx, q, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	const (
		items   = "SELECT n FROM items WHERE id = $1"
		prices  = "SELECT n FROM prices WHERE id = $1"
		offRead = "/* sqlflight: off */ SELECT n FROM stock WHERE id = $1"
		unique  = "SELECT n FROM orders WHERE id = $1"
		cached  = "/* sqlflight: ttl=1m */ SELECT n FROM carts WHERE id = $1"
		clocked = "SELECT n FROM items WHERE id = $1 AND at < now()"
	)
	for i := range 60 {
		read(items, i%3) // three keys, each repeated every 3 s
		read(prices, i%2)
		read(offRead, 1)
		read(unique, i)
		read(cached, 1)
		read(clocked, 1)
		if i%10 == 0 {
			if _, err := db.ExecContext(ctx, "UPDATE items SET n = 0 WHERE id = $1", i); err != nil {
				t.Fatal(err)
			}
		}
		clock.Add(time.Second)
	}
	advice := s.Advice()
	got := map[string]Advice{}
	for _, a := range advice {
		got[a.SQL] = a
	}
	norm := func(q string) string { return sqlscan.Parse(q).Normalized }
	if len(advice) != 2 {
		t.Fatalf("%d pieces of advice, want 2 (prices, stock): %+v", len(advice), advice)
	}
	// items: 6 writes in 60 s, one every 10 s: soft 1s (a tenth), which
	// no repeat (every 3 s) is within.
	if a, ok := got[norm(items)]; ok {
		t.Errorf("items advised though no repeat falls within 1s: %+v", a)
	}
	// prices: no write: 5m; every call but the first two repeats.
	a := got[norm(prices)]
	if a.Annotation != "/* sqlflight: soft=5m hard=50m */" || a.Repeats != 58 || a.Executions != 60 || a.Policy != "coalesce only" {
		t.Errorf("prices: %+v", a)
	}
	if a := got[norm(offRead)]; a.Policy != "off" || a.Repeats != 59 {
		t.Errorf("stock: %+v", a)
	}
	for i := 1; i < len(advice); i++ {
		if advice[i].SavedSeconds > advice[i-1].SavedSeconds {
			t.Errorf("advice not ranked by saved time: %+v", advice)
		}
	}
}

// Advice ranks by the database time saved: repeats × mean origin time.
func TestAdviceRanking(t *testing.T) {
	s := New(Options{Clock: newFakeClock()})
	t.Cleanup(func() { _ = s.Close() })
	add := func(q string, repeats int, origin time.Duration) {
		f := &fate{r: sqlscan.Parse(q), cacheable: true}
		s.callBegins(f, q)
		st := f.stat.st
		st.Origin(origin, 0, 0, false)
		rt := st.RepeatTable(s.opts.Clock.Now())
		for i := range repeats + 1 {
			rt.See(99, s.opts.Clock.Now().Add(time.Duration(i)*time.Second))
		}
	}
	add("SELECT a FROM t WHERE k = $1", 100, time.Millisecond)     // 0.1 s saved
	add("SELECT b FROM t WHERE k = $1", 10, 50*time.Millisecond)   // 0.5 s
	add("SELECT c FROM t WHERE k = $1", 1000, 10*time.Microsecond) // 0.01 s
	var got []string
	for _, a := range s.Advice() {
		got = append(got, a.SQL)
	}
	want := []string{"SELECT b FROM t WHERE k = $1", "SELECT a FROM t WHERE k = $1", "SELECT c FROM t WHERE k = $1"}
	if !slices.Equal(got, want) {
		t.Errorf("ranked %q, want %q", got, want)
	}
}

// BenchmarkStatementStats is the statistics' own work per call, apart from
// the rest of the path: a cache hit (count, key, outcome), a pass-through
// read (count, outcome), and a write (count, outcome, writes per table).
// One call in 8 is timed, as in the Shield.
func BenchmarkStatementStats(b *testing.B) {
	s := New(Options{Clock: newFakeClock()})
	b.Cleanup(func() { _ = s.Close() })
	c := &conn{s: s.engine, sc: &scope{}}
	args := []driver.NamedValue{{Ordinal: 1, Value: int64(1)}}
	hit := sqlscan.Scan("/* sqlflight: ttl=1h */ SELECT id, v, label FROM items WHERE id <= $1 ORDER BY id")
	key := "\x01\x00SELECT id, v, label FROM items WHERE id <= $1 ORDER BY id\x00\x08\x00\x00\x00\x00\x00\x00\x00\x01"
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f := fate{r: hit, plan: plan{cache: true}, cacheable: true}
			var err error
			s.callBegins(&f, "")
			f.stat.key = f.stat.st.SawKey(key, args)
			f.stat.out = outFresh
			s.callEnds(c, &f, &err)
		}
	})
	pass := sqlscan.Scan("SELECT n FROM items WHERE id = $1 FOR UPDATE")
	b.Run("pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f := fate{r: pass, reason: bypassWrite}
			var err error
			s.callBegins(&f, "")
			s.callEnds(c, &f, &err)
		}
	})
	write := sqlscan.Scan("UPDATE items SET n = n + 1 WHERE id = $1")
	w := write2(write)
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			call := s.execBegins(write, "")
			call.st.Ended(call.out, call.began, false)
			s.writes.Note(w.tables, w.known, w.rows)
		}
	})
}

func write2(r *sqlscan.Result) write { return write{tables: r.Writes, known: true} }

// Options.NoStatementStats counts nothing.
func TestStatementStatsOff(t *testing.T) {
	d := &fakeDriver{onQuery: func(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
		return oneRow(args[0].Value), nil
	}}
	db, s := openFake(t, d, Options{NoStatementStats: true})
	var n int64
	for range 3 {
		if err := db.QueryRow(pointQuery, 1).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("UPDATE items SET n = 1 WHERE id = $1", 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Statements(); st != nil || s.Advice() != nil {
		t.Errorf("statistics off, yet %+v", st)
	}
}
