package integration

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight"
)

// notifyFeedDatabase is a database of its own with tables items and marker
// and the change triggers installed on them (the triggers' function and
// channel are database-wide: no other test sees them).
func notifyFeedDatabase(t *testing.T) (dsn string, out *pgx.Conn) {
	t.Helper()
	dsn = feedDatabase(t, false)
	out = outsider(t, dsn)
	outExec(t, out, `CREATE TABLE items (id int PRIMARY KEY, v text)`, `CREATE TABLE marker (n int)`,
		`INSERT INTO items VALUES (1, 'a'), (2, 'b')`, sqlflight.InstallTriggersSQL("public"))
	return dsn, out
}

// listeners returns the pids of the sessions listening for the triggers'
// notifications on the current database.
func listeners(t *testing.T, out *pgx.Conn) []int32 {
	t.Helper()
	rows, err := out.Query(testContext(t, time.Minute), `SELECT pid FROM pg_stat_activity `+
		`WHERE datname = current_database() AND (query ILIKE 'LISTEN%' OR query LIKE '/* sqlflight feed */%') AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestFeedNotifyOutsideWrites: with the NOTIFY feed, INSERT, UPDATE,
// DELETE and TRUNCATE by a client that does not use sqlflight reach the
// cached reads, and a rolled-back transaction is never reported.
func TestFeedNotifyOutsideWrites(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	db, s := openFlight(t, dsn, sqlflight.Options{Feed: sqlflight.FeedNotify})
	if err := db.PingContext(testContext(t, time.Minute)); err != nil {
		t.Fatalf("first connect: %v", err)
	}
	if st := s.Stats(); st.FeedState != "current" {
		t.Fatalf("after the first Connect the feed is %q, want current", st.FeedState)
	}
	if v, n := readV(t, db, 1), countItems(t, db); v != "a" || n != 2 {
		t.Fatalf("read 1 = %q, count = %d", v, n)
	}
	origin := s.Stats().OriginExecutions
	_, _ = readV(t, db, 1), countItems(t, db)
	if got := s.Stats().OriginExecutions; got != origin {
		t.Fatalf("the cached reads reached the database (%d → %d): the test proves nothing", origin, got)
	}
	for _, step := range []struct {
		sql   string
		v     string // row 1's value after it ("": gone)
		count int
	}{
		{`UPDATE items SET v = 'a2' WHERE id = 1`, "a2", 2},
		{`INSERT INTO items VALUES (3, 'c')`, "a2", 3},
		{`DELETE FROM items WHERE id = 2`, "a2", 2},
		{`TRUNCATE items`, "", 0},
	} {
		if step.v != "" {
			_ = readV(t, db, 1) // cached again
		}
		_ = countItems(t, db)
		n := s.Stats().FeedTransactions
		outExec(t, out, step.sql)
		waitTx(t, s, n)
		if step.v != "" {
			if v := readV(t, db, 1); v != step.v {
				t.Fatalf("after %q the read is %q, want %q", step.sql, v, step.v)
			}
		}
		if c := countItems(t, db); c != step.count {
			t.Fatalf("after %q the count is %d, want %d", step.sql, c, step.count)
		}
	}
	feedSkipsRollback(t, db, s, out)
	t.Logf("feed: %s", feedStats(s))
}

// TestFeedNotifyConnectionCut: the feed's listening session is terminated
// while an outside client writes; the feed comes back, the scope resyncs,
// and the read shows what the database holds.
func TestFeedNotifyConnectionCut(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	feedConnectionCut(t, dsn, out, sqlflight.Options{Feed: sqlflight.FeedNotify}, listeners)
}
