package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/fresh"
)

// The same statement under different policies: the annotation is not part
// of the key, so these share one entry, and each reader judges it by its own
// policy.
const (
	itemsSQL  = " SELECT n FROM items WHERE id = $1"
	longTTL   = "/* sqlflight: ttl=1m */" + itemsSQL
	strictTTL = "/* sqlflight: ttl=500ms */" + itemsSQL
)

func TestStricterReaderGetsNoOlderValue(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	if n := readN(t, db, longTTL, 1); n != 1 {
		t.Fatal(n)
	}
	clk.Add(1500 * time.Millisecond)
	if n := readN(t, db, longTTL, 1); n != 1 {
		t.Fatalf("the filler's own policy: read %d, want the cached 1", n)
	}
	if q := c.d.queries.Load(); q != 1 {
		t.Fatalf("database queries = %d, want 1", q)
	}
	// 1.5 s old: too old for ttl=500ms (±10 % jitter).
	if n := readN(t, db, strictTTL, 1); n != 2 {
		t.Fatalf("ttl=500ms reader got %d, a value 1.5s old", n)
	}
	if q := c.d.queries.Load(); q != 2 {
		t.Fatalf("database queries = %d, want 2", q)
	}
	// Its own fill answers it while fresh, and the longer reader too.
	clk.Add(400 * time.Millisecond)
	if n := readN(t, db, strictTTL, 1); n != 2 {
		t.Fatalf("fresh entry not served to the strict reader: %d", n)
	}
	if n := readN(t, db, longTTL, 1); n != 2 {
		t.Fatalf("the newer entry not served to the long reader: %d", n)
	}
	if st := s.Stats(); st.FreshHits != 3 || st.Misses != 2 || st.Fills != 2 {
		t.Errorf("%+v", st)
	}
}

func TestStricterContextPolicyGetsNoOlderValue(t *testing.T) {
	db, _, c, clk := openCached(t, Options{})
	q := "SELECT n FROM items WHERE id = $1"
	long := WithTTL(context.Background(), time.Minute, time.Minute)
	strict := WithPolicy(context.Background(), Policy{Soft: 200 * time.Millisecond, Jitter: -1})
	var n int64
	if err := db.QueryRowContext(long, q, 1).Scan(&n); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	clk.Add(time.Second)
	if err := db.QueryRowContext(strict, q, 1).Scan(&n); err != nil || n != 2 {
		t.Fatalf("strict context read %d (%v), want a new 2", n, err)
	}
	if q := c.d.queries.Load(); q != 2 {
		t.Fatalf("database queries = %d, want 2", q)
	}
}

func TestLongerReaderServedWithinTheEntrysLife(t *testing.T) {
	db, s, c, clk := openCached(t, Options{}) // MaxStale 0: the entry lives 2 × hard
	short := "/* sqlflight: ttl=500ms jitter=0% */" + itemsSQL
	long := "/* sqlflight: ttl=1m jitter=0% */" + itemsSQL
	readN(t, db, short, 1)
	clk.Add(700 * time.Millisecond) // expired for the filler, alive in the store until 1 s
	if n := readN(t, db, long, 1); n != 1 {
		t.Fatalf("ttl=1m reader of a 0.7s old entry got %d, want the cached 1", n)
	}
	if q := c.d.queries.Load(); q != 1 {
		t.Fatalf("database queries = %d, want 1", q)
	}
	if st := s.Stats(); st.FreshHits != 1 || st.StaleHits != 0 {
		t.Fatalf("%+v", st)
	}
	// The filler's own policy finds it expired.
	if n := readN(t, db, short, 1); n != 2 {
		t.Fatalf("ttl=500ms reader got %d", n)
	}
	// Past the entry's life nobody gets it, however long its TTL.
	clk.Add(1100 * time.Millisecond)
	if n := readN(t, db, long, 1); n != 3 {
		t.Fatalf("ttl=1m reader got %d past the entry's life", n)
	}
	if q := c.d.queries.Load(); q != 3 {
		t.Fatalf("database queries = %d, want 3", q)
	}
}

func TestStaleWhileRevalidatePerReader(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	loose := "/* sqlflight: soft=10s hard=1m jitter=0% */" + itemsSQL
	tight := "/* sqlflight: soft=1s hard=5s jitter=0% */" + itemsSQL

	// 3 s old: fresh for the filler, stale for the tight reader, who is
	// served it and refreshes it once in the background.
	readN(t, db, loose, 1)
	clk.Add(3 * time.Second)
	if n := readN(t, db, tight, 1); n != 1 {
		t.Fatalf("stale read got %d", n)
	}
	settle(t, s)
	if st := s.Stats(); st.StaleHits != 1 || st.Refreshes != 1 {
		t.Fatalf("%+v", st)
	}
	if q := c.d.queries.Load(); q != 2 {
		t.Fatalf("database queries = %d, want 2 (one refresh)", q)
	}
	waitFor(t, "refreshed entry", func() bool { return readN(t, db, loose, 1) == 2 })

	// 6 s old: fresh for the filler, past the tight reader's hard: it
	// queries in the foreground.
	clk.Add(6 * time.Second)
	if n := readN(t, db, loose, 1); n != 2 {
		t.Fatalf("loose read got %d", n)
	}
	if n := readN(t, db, tight, 1); n != 3 {
		t.Fatalf("tight reader got %d from an entry past its hard", n)
	}
	if q := c.d.queries.Load(); q != 3 {
		t.Fatalf("database queries = %d, want 3", q)
	}
}

func TestStaleIfErrorPerReader(t *testing.T) {
	db, s, c, clk := openCached(t, Options{}) // MaxStale 0: = hard
	filler := "/* sqlflight: soft=1s hard=3s jitter=0% */" + itemsSQL
	strict := "/* sqlflight: ttl=1s jitter=0% */" + itemsSQL // stale-if-error until 2 s
	readN(t, db, filler, 1)
	clk.Add(4 * time.Second)
	c.fail.Store(true)
	var n int64
	if err := db.QueryRow(strict, 1).Scan(&n); err == nil {
		t.Fatalf("strict reader got %d, a value past its own stale-if-error limit", n)
	}
	if n := readN(t, db, filler, 1); n != 1 {
		t.Fatalf("filler's policy: %d", n)
	}
	if st := s.Stats(); st.StaleIfError != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestNegativeEntryJudgedByReadersNeg(t *testing.T) {
	clk := newFakeClock()
	var queries atomic.Int64
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		queries.Add(1)
		return &fakeRows{cols: []string{"n"}}, nil
	}}
	db, s := openFake(t, d, Options{Clock: clk})
	t.Cleanup(func() { _ = s.Close() })
	long := "/* sqlflight: soft=1m neg=1m jitter=0% */" + itemsSQL
	short := "/* sqlflight: soft=1m neg=1s jitter=0% */" + itemsSQL
	read := func(q string) {
		t.Helper()
		var n int64
		if err := db.QueryRow(q, 404).Scan(&n); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("want ErrNoRows, got %v", err)
		}
	}
	read(long)
	clk.Add(2 * time.Second)
	read(long)
	if queries.Load() != 1 || s.Stats().NegativeHits != 1 {
		t.Fatalf("queries %d %+v", queries.Load(), s.Stats())
	}
	read(short)
	if queries.Load() != 2 {
		t.Fatal("an empty result 2s old answered a reader with neg=1s")
	}
}

func TestJitterIsTheEntrysOwn(t *testing.T) {
	s := New(Options{})
	t.Cleanup(func() { _ = s.Close() })
	t0 := time.Unix(1000, 0)
	e := &entry{filled: t0, jitter: 0.6, last: t0.Add(time.Hour)}
	p := Policy{Soft: 10 * time.Second, Hard: 20 * time.Second, Jitter: 0.5}
	d := s.judge(e, p)
	for range 100 {
		if s.judge(e, p) != d {
			t.Fatal("a reader saw the entry's deadlines move")
		}
	}
	if got, want := d.Soft.Sub(t0), 13*time.Second; got != want { // 10 s × (1 + 0.5 × 0.6)
		t.Errorf("soft = %v, want %v", got, want)
	}
	if got, want := d.Hard.Sub(t0), 26*time.Second; got != want {
		t.Errorf("hard = %v, want %v", got, want)
	}
	// Another reader applies its own fraction to the same draw.
	p.Jitter = -1
	if d := s.judge(e, p); d.Soft.Sub(t0) != 10*time.Second || d.Hard.Sub(t0) != 20*time.Second {
		t.Errorf("no jitter: %v %v", d.Soft.Sub(t0), d.Hard.Sub(t0))
	}
	// Never past the entry's life.
	e.last = t0.Add(5 * time.Second)
	if d := s.judge(e, Policy{Soft: time.Minute}); !d.Soft.Equal(e.last) || !d.Hard.Equal(e.last) || !d.Last.Equal(e.last) {
		t.Errorf("judged past the entry's life: %+v", d)
	}

	// Stored entries get draws of their own, spread over [-1, 1).
	st := s.cache()
	lo, hi := 1.0, -1.0
	for i := range 200 {
		e := &entry{key: string(rune('a' + i%26)), res: &result{}, last: time.Now().Add(time.Hour)}
		st.Put(e, time.Now())
		if e.jitter < -1 || e.jitter >= 1 {
			t.Fatal(e.jitter)
		}
		lo, hi = min(lo, e.jitter), max(hi, e.jitter)
	}
	if hi-lo < 1 {
		t.Errorf("draws not spread: [%v, %v]", lo, hi)
	}
}

func TestSharedValueJudgedByReadersPolicy(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 3, tier, Options{})
	if n := readN(t, f[0].db, longTTL, 1); n != 1 {
		t.Fatal(n)
	}
	tier.clock.Add(1500 * time.Millisecond)
	// Another instance under the filler's policy takes it from L2.
	if n := readN(t, f[1].db, longTTL, 1); n != 1 || f[1].c.d.queries.Load() != 0 {
		t.Fatalf("read %d, queries %d", n, f[1].c.d.queries.Load())
	}
	if st := f[1].s.Stats(); st.SharedHits != 1 {
		t.Fatalf("%+v", st)
	}
	// A stricter one does not: it queries its own database.
	if n := readN(t, f[2].db, strictTTL, 1); n != 1 {
		t.Fatal(n)
	}
	if q := f[2].c.d.queries.Load(); q != 1 {
		t.Fatalf("ttl=500ms instance took a 1.5s old value from L2 (queries %d)", q)
	}
	if st := f[2].s.Stats(); st.SharedHits != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestStricterFollowerOfASharedAnswer: a flight answered from the shared
// tier hands its followers a value filled earlier; a follower whose own
// policy allows less staleness than the leader's does not take it.
func TestStricterFollowerOfASharedAnswer(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{RedisTimeout: time.Minute})
	if n := readN(t, f[0].db, longTTL, 1); n != 1 {
		t.Fatal(n)
	}
	tier.clock.Add(1500 * time.Millisecond)
	gate := make(chan struct{})
	tier.fetchGate.Store(&gate)
	lead := make(chan int64)
	go func() { lead <- readN(t, f[1].db, longTTL, 1) }()
	waitFor(t, "the leader in the tier", func() bool { return f[1].s.Stats().Flights == 1 })
	follow := make(chan int64)
	go func() { follow <- readN(t, f[1].db, strictTTL, 1) }()
	waitFor(t, "the stricter follower", func() bool { return f[1].s.Stats().Followers == 1 })
	tier.fetchGate.Store(nil)
	close(gate)
	if n := <-lead; n != 1 {
		t.Fatal(n)
	}
	if n := <-follow; n != 1 {
		t.Fatal(n)
	}
	st := f[1].s.Stats()
	if q := f[1].c.d.queries.Load(); q != 1 || st.SharedHits != 1 {
		t.Fatalf("the stricter follower took the leader's 1.5 s old value from the tier: queries %d, %+v", q, st)
	}
}

// TestJudgeUnderTheFillersPolicy: a reader under the policy that filled an
// entry gets the deadlines fill computed; they are the ones judge computes
// afresh, for every policy shape.
func TestJudgeUnderTheFillersPolicy(t *testing.T) {
	for _, maxStale := range []time.Duration{0, -1, 3 * time.Second} {
		s := New(Options{MaxStale: maxStale, Clock: newFakeClock()})
		filled := s.opts.Clock.Now()
		for i := range 2000 {
			p := Policy{Soft: time.Duration(rand.Int64N(int64(time.Minute))), Hard: time.Duration(rand.Int64N(int64(2 * time.Minute))),
				Neg: time.Duration(rand.Int64N(int64(time.Minute))) * time.Duration(i%2), Jitter: []float64{0, -1, 0.25, 0.5}[i%4]}
			e := &entry{filled: filled, empty: i%3 == 0, jitter: fresh.Draw()}
			d := fresh.At(filled, s.windows(p), e.empty, e.jitter)
			e.soft, e.hard, e.last = d.Soft, d.Hard, d.Last
			e.by, e.stamped = s.windows(p), true
			fast := s.judge(e, p)
			e.stamped = false
			if slow := s.judge(e, p); fast != slow {
				t.Fatalf("policy %+v, entry empty=%v jitter %v: judged %+v under the filler's policy, %+v afresh", p, e.empty, e.jitter, fast, slow)
			}
		}
		_ = s.Close()
	}
}
