package integration

import (
	"slices"
	"testing"

	"github.com/sqlflight/sqlflight"
)

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

	dbs, shields := feedFleet(t, dsn, 2, sqlflight.FeedNotify)
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
