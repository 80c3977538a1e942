package integration

import (
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// TestFleetFeedHolderKilled: a fleet of processes on a replication feed
// runs one feed, held by one process; writes by a client outside the fleet
// reach every process. When the holder is killed (its lease is never given
// back), another process takes the feed over after the lease expires,
// resyncs, and serves nothing older than the writes made meanwhile.
func TestFleetFeedHolderKilled(t *testing.T) {
	for _, mode := range []sqlflight.FeedMode{sqlflight.FeedReplication, sqlflight.FeedNotify} {
		t.Run(string(mode), func(t *testing.T) { fleetFeedHolderKilled(t, mode) })
	}
}

func fleetFeedHolderKilled(t *testing.T, mode sqlflight.FeedMode) {
	dsn := feedDatabase(t, mode == sqlflight.FeedReplication)
	raddr := redisAddr(t)
	out := outsider(t, dsn)
	outExec(t, out, `CREATE TABLE items (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO items VALUES (1, 'v0')`)
	if mode == sqlflight.FeedNotify {
		outExec(t, out, sqlflight.InstallTriggersSQL("public"))
	}
	prefix := "sqlflight-test:" + uniqueID(t) + ":"
	t.Cleanup(func() { flushRedisPrefix(t, raddr, prefix) })
	nodes := startFleet(t, 3, withDSNParams(t, dsn,
		"sqlflight.shared", "redis://"+raddr+"/0",
		"sqlflight.key_prefix", prefix,
		"sqlflight.shared_secret", fleetSecret,
		"sqlflight.redis_timeout", "2s",
		"sqlflight.feed", string(mode),
		"sqlflight.feed_lease_ttl", "1s"))
	const q = `/* sqlflight: soft=1h hard=1h */ SELECT v FROM items WHERE id = $1`
	read := func(nd *fleetNode) string {
		t.Helper()
		o := nd.do(t, map[string]any{"op": "read", "query": q, "args": []any{1}})
		if len(o.Errors) > 0 {
			t.Fatalf("node %d: %v", nd.i, o.Errors)
		}
		for k := range o.Results {
			return k
		}
		return ""
	}
	// holders returns the nodes whose feed streams (the others stand by,
	// or are still taking it over).
	holders := func(live []*fleetNode) []*fleetNode {
		t.Helper()
		var h []*fleetNode
		for _, nd := range live {
			if st := nd.do(t, map[string]any{"op": "stats"}).Stats; st != nil && (st.FeedState == "current" || st.FeedState == "lagging") {
				h = append(h, nd)
			}
		}
		return h
	}
	// eventually polls until every live node reads want (the feed's lag,
	// and a takeover's lease expiry, are not bounded by the test).
	eventually := func(live []*fleetNode, want string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for _, nd := range live {
			for got := read(nd); got != want; got = read(nd) {
				if time.Now().After(deadline) {
					t.Fatalf("node %d still reads %q, want %q: %s", nd.i, got, want, nd.stderr())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	for _, nd := range nodes {
		if got := read(nd); got != "v0;" {
			t.Fatalf("node %d read %q", nd.i, got)
		}
	}
	var holder []*fleetNode
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if holder = holders(nodes); len(holder) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if len(holder) != 1 {
		t.Fatalf("%d processes hold the feed, want 1", len(holder))
	}
	outExec(t, out, `UPDATE items SET v = 'v1' WHERE id = 1`)
	eventually(nodes, "v1;")

	// The holder dies without a word; a write lands before anyone takes over.
	holder[0].kill(t)
	var live []*fleetNode
	for _, nd := range nodes {
		if nd != holder[0] {
			live = append(live, nd)
		}
	}
	outExec(t, out, `UPDATE items SET v = 'v2' WHERE id = 1`)
	var next []*fleetNode
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if next = holders(live); len(next) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if len(next) != 1 {
		t.Fatalf("%d processes took the feed over, want 1", len(next))
	}
	st := next[0].do(t, map[string]any{"op": "stats"}).Stats
	if st.FeedResyncs == 0 {
		t.Fatalf("the new holder did not resync: %+v", st)
	}
	// The new holder resynced before it streamed: its first read is v2.
	if got := read(next[0]); got != "v2;" {
		t.Fatalf("the new holder read %q after it took over, want v2", got)
	}
	// The others hear its resync through the tier (the fleet's window).
	eventually(live, "v2;")
	outExec(t, out, `UPDATE items SET v = 'v3' WHERE id = 1`)
	eventually(live, "v3;")
	t.Logf("holder %d killed; %d took over after %d resyncs", holder[0].i, next[0].i, st.FeedResyncs)
}
