package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// stepClock is a clock the test moves by hand: the cache's notion of time,
// while PostgreSQL runs on the real one.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestFreshnessIsEachReadersOwn: one statement, read through sqlflight under
// different TTLs (the annotation is not part of the key, so they share one
// entry), while another client updates the row behind sqlflight's back. A
// reader whose TTL is shorter than the entry's age sees the new row; one
// whose TTL covers the age is served the cached row; a reader past its own
// soft (within its hard) is served the cached row once and refreshes it.
func TestFreshnessIsEachReadersOwn(t *testing.T) {
	forEachExecMode(t, postgresDSN(t), func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		raw := openRaw(t, dsn)
		tbl := "fresh_" + uniqueID(t)
		mustExec(t, raw, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)", tbl))
		cleanupExec(t, raw, "DROP TABLE IF EXISTS "+tbl)
		mustExec(t, raw, fmt.Sprintf("INSERT INTO %s VALUES (1, 1)", tbl))

		clk := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		db, sh := openFlight(t, dsn, sqlflight.Options{Clock: clk})
		stmt := fmt.Sprintf(" SELECT v FROM %s WHERE id = $1", tbl)
		long := "/* sqlflight: ttl=1m */" + stmt
		strict := "/* sqlflight: ttl=500ms */" + stmt
		loose := "/* sqlflight: soft=10s hard=1m jitter=0% */" + stmt
		tight := "/* sqlflight: soft=1s hard=5s jitter=0% */" + stmt
		read := func(q string) int {
			t.Helper()
			var v int
			if err := db.QueryRowContext(ctx, q, 1).Scan(&v); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return v
		}
		update := func(v int) {
			t.Helper()
			mustExec(t, raw, fmt.Sprintf("UPDATE %s SET v = %d WHERE id = 1", tbl, v))
		}

		if v := read(long); v != 1 {
			t.Fatalf("first read: %d", v)
		}
		update(2) // not through sqlflight: nothing invalidates the entry
		clk.add(1500 * time.Millisecond)
		if v := read(long); v != 1 {
			t.Fatalf("ttl=1m reader of a 1.5s old entry got %d, want the cached 1", v)
		}
		if v := read(strict); v != 2 {
			t.Fatalf("ttl=500ms reader got %d from an entry 1.5s old, want the row as it is (2)", v)
		}
		st := sh.Stats()
		if st.OriginExecutions != 2 || st.FreshHits != 1 || st.Misses != 2 {
			t.Fatalf("%s", cacheStats(st))
		}

		// Past the strict entry's life (2 × its hard) the loose reader
		// fills anew; 2 s later that entry is fresh for a loose reader,
		// stale for a tight one.
		clk.add(2 * time.Second)
		if v := read(loose); v != 2 {
			t.Fatalf("loose reader got %d", v)
		}
		update(3)
		clk.add(2 * time.Second)
		if v := read(loose); v != 2 {
			t.Fatalf("loose reader got %d, want the cached 2", v)
		}
		if v := read(tight); v != 2 {
			t.Fatalf("tight reader past its soft got %d, want the stale 2 while it refreshes", v)
		}
		settleShield(t, sh)
		if st := sh.Stats(); st.StaleHits != 1 || st.Refreshes != 1 || st.OriginExecutions != 4 {
			t.Fatalf("%s", cacheStats(st))
		}
		waitUntil(t, 30*time.Second, func() string { return "the refreshed row: " + cacheStats(sh.Stats()) },
			func() bool { return read(tight) == 3 })

		// 6 s later: past the tight reader's hard, still fresh for the
		// loose one.
		update(4)
		clk.add(6 * time.Second)
		if v := read(loose); v != 3 {
			t.Fatalf("loose reader got %d, want the cached 3", v)
		}
		if v := read(tight); v != 4 {
			t.Fatalf("tight reader past its hard got %d, want the row as it is (4)", v)
		}
	})
}
