package integration

import (
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// notifyFleet opens n Shields (instances) on one Redis prefix with the
// NOTIFY feed on, each with its own pool, named alike across the fleet:
// feedFleet's fleet with the other source.
func notifyFleet(t *testing.T, dsn string, n int) ([]*sql.DB, []*sqlflight.Shield) {
	t.Helper()
	addr := redisAddr(t)
	prefix := "sqlflight-test-notify-latency:" + uniqueID(t) + ":"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		flushRedisPrefix(t, addr, prefix)
		_ = rdb.Close()
	})
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var dbs []*sql.DB
	var shields []*sqlflight.Shield
	for range n {
		o := tierOptions(prefix)
		o.Feed = sqlflight.FeedNotify
		o.FeedLeaseTTL = 600 * time.Millisecond
		s := sqlflight.New(o, sqlflight.Shared(redistier.New(rdb)))
		db := sql.OpenDB(s.SharedConnector(stdlib.GetConnector(*cfg), "notify-latency"))
		t.Cleanup(func() {
			_ = db.Close()
			_ = s.Close()
		})
		if err := db.PingContext(testContext(t, time.Minute)); err != nil {
			t.Fatalf("connect: %v", err)
		}
		dbs, shields = append(dbs, db), append(shields, s)
	}
	return dbs, shields
}

// TestFeedNotifyLatency is TestFeedReplicationLatency with the NOTIFY
// source: the change triggers installed on the table (in a database of its
// own, so that the function and the channel are this test's alone), outside
// writes by a plain pgx client, measured from each write's commit to the
// first cached read that returns it, in one process and on the standby of a
// two-instance fleet. It logs p50 and p99; it asserts only that every write
// was seen (feedLatency) and who holds the fleet's feed.
func TestFeedNotifyLatency(t *testing.T) {
	const writes = 300
	dsn := feedDatabase(t, false)
	out := outsider(t, dsn)
	outExec(t, out, `CREATE TABLE items (id int PRIMARY KEY, v text)`, `INSERT INTO items VALUES (1, 'a')`,
		sqlflight.InstallTriggersSQL("public", "items"))

	db, s := openFlight(t, dsn, sqlflight.Options{Feed: sqlflight.FeedNotify})
	_ = readV(t, db, 1)
	p50, p99 := feedLatency(t, out, db, writes)
	// No FeedDelay here: a notification does not carry its commit's time.
	t.Logf("NOTIFY, one process, %d outside writes: commit → cached read sees it: p50 %v, p99 %v (%s)",
		writes, p50, p99, feedStats(s))
	_ = db.Close()
	_ = s.Close()

	dbs, shields := notifyFleet(t, dsn, 2)
	if h := holders(shields); !slices.Equal(h, []int{0}) {
		t.Fatalf("feed holders %v, want the first instance", h)
	}
	if st := shields[1].Stats(); st.FeedState != "standby" {
		t.Fatalf("the second instance's feed is %q, want standby", st.FeedState)
	}
	_ = readV(t, dbs[1], 1)
	p50, p99 = feedLatency(t, out, dbs[1], writes)
	t.Logf("NOTIFY, two-instance fleet, read on the standby, %d outside writes: p50 %v, p99 %v", writes, p50, p99)
}
