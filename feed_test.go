package sqlflight

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/feed"
)

// Renew makes memTier a Leaser: compare-and-extend.
func (m *memTier) Renew(ctx context.Context, ns, key string, l Lease, ttl time.Duration) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.leases[ns+key]
	if !ok || e.token != l.Token || !l.Held || !m.clock.Now().Before(e.until) {
		return false, nil
	}
	e.until = m.clock.Now().Add(ttl)
	m.leases[ns+key] = e
	return true, nil
}

// TestFeedDSNParams: sqlflight.feed, feed_publication and feed_lease_ttl
// set their Options; bad values are ErrBadDSN.
func TestFeedDSNParams(t *testing.T) {
	var o Options
	if err := applyDSN(&o, map[string]string{"feed": "replication", "feed_publication": "app_pub", "feed_lease_ttl": "2s"}); err != nil {
		t.Fatal(err)
	}
	if o.Feed != FeedReplication || o.FeedPublication != "app_pub" || o.FeedLeaseTTL != 2*time.Second {
		t.Fatalf("options %+v", o)
	}
	if err := applyDSN(&o, map[string]string{"feed": "notify"}); err != nil || o.Feed != FeedNotify {
		t.Fatalf("notify: %v %q", err, o.Feed)
	}
	for k, v := range map[string]string{"feed": "wal", "feed_publication": "a'b", "feed_lease_ttl": "soon"} {
		if err := applyDSN(&o, map[string]string{k: v}); !errors.Is(err, ErrBadDSN) {
			t.Errorf("%s=%s: %v, want ErrBadDSN", k, v, err)
		}
	}
}

// TestFeedStateStartingWithoutScope: a Shield with a feed reports it
// starting until a scope connects; one without reports no state.
func TestFeedStateStartingWithoutScope(t *testing.T) {
	s := New(Options{Feed: FeedReplication})
	defer s.Close()
	if st := s.Stats(); st.FeedState != "starting" {
		t.Fatalf("FeedState %q before any Connect, want starting", st.FeedState)
	}
	if st := New().Stats(); st.FeedState != "" {
		t.Fatalf("FeedState %q without a feed", st.FeedState)
	}
}

// TestFeedNeedsPostgres: a Shield with a feed refuses the first Connect of
// a scope that is not PostgreSQL through pgx, with ErrFeedUnavailable.
func TestFeedNeedsPostgres(t *testing.T) {
	s := New(Options{Feed: FeedReplication})
	defer s.Close()
	d := &fakeDriver{}
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(d), dsn: "fake"})
	defer db.Close()
	err := db.Ping()
	if !errors.Is(err, ErrFeedUnavailable) || !strings.Contains(err.Error(), "pgx") {
		t.Fatalf("Ping: %v, want ErrFeedUnavailable naming pgx", err)
	}
}

// TestFeedUnavailableIsTheFeedsError: ErrFeedUnavailable is the feed
// package's error, the same value under the same text, so errors.Is holds
// whichever of the two an error wraps.
func TestFeedUnavailableIsTheFeedsError(t *testing.T) {
	if ErrFeedUnavailable != feed.ErrUnavailable || ErrFeedUnavailable.Error() != "sqlflight: change feed unavailable" {
		t.Fatalf("ErrFeedUnavailable %q is not the feed's error", ErrFeedUnavailable)
	}
	err := feed.Unavailable(nil, "no triggers")
	if !errors.Is(err, ErrFeedUnavailable) || err.Error() != "sqlflight: change feed unavailable: no triggers" {
		t.Fatalf("feed.Unavailable: %v", err)
	}
}

// TestFeedSinkAppliesAndCounts: what a source reports reaches the Shield:
// Apply invalidates and counts a transaction and its changes, Reapply
// invalidates without counting, Resync drops everything and counts a
// resync, and the changes keep their table, rows and wholeness.
func TestFeedSinkAppliesAndCounts(t *testing.T) {
	s := New()
	defer s.Close()
	f := &scopeFeed{s: s, mode: FeedReplication}
	f.state.Store(feedCurrent)
	k := feedSink{f: f, ready: func() {}}
	changed := func(do func(), table string) bool {
		seq := s.epochs.Now()
		do()
		return !s.epochs.UnchangedFor(seq, []string{table}, true, nil)
	}
	v := "5"
	if !changed(func() {
		k.Apply([]feed.Change{{Table: "public.items", New: map[string]*string{"id": &v}}, {Table: "public.other", Whole: true}}, time.Time{})
	}, "items") {
		t.Error("Apply did not invalidate the table")
	}
	if st := s.Stats(); st.FeedTransactions != 1 || st.FeedChanges != 2 {
		t.Errorf("after Apply: %d transactions, %d changes", st.FeedTransactions, st.FeedChanges)
	}
	if !changed(func() { k.Reapply([]feed.Change{{Table: "public.items", Whole: true}}) }, "items") {
		t.Error("Reapply did not invalidate the table")
	}
	if changed(func() { k.Reapply([]feed.Change{{Table: "public.other", Whole: true}}) }, "items") {
		t.Error("a change of another table invalidated items")
	}
	if !changed(k.Resync, "items") {
		t.Error("Resync did not invalidate")
	}
	if st := s.Stats(); st.FeedTransactions != 1 || st.FeedChanges != 2 || st.FeedResyncs != 1 {
		t.Errorf("after Reapply and Resync: %d transactions, %d changes, %d resyncs", st.FeedTransactions, st.FeedChanges, st.FeedResyncs)
	}
	f.lag.Store(int64(time.Hour))
	k.CaughtUp()
	if f.lag.Load() != 0 {
		t.Error("CaughtUp left the lag")
	}
	cs := changesOf([]feed.Change{{Table: "public.items", Whole: true}, {Table: "s.t", Old: map[string]*string{"id": nil}, New: map[string]*string{"id": &v}}})
	if len(cs) != 2 || cs[0].table != "public.items" || !cs[0].whole || cs[1].table != "s.t" || cs[1].whole ||
		len(cs[1].old) != 1 || cs[1].old["id"] != nil || cs[1].new["id"] != &v || changesOf(nil) != nil {
		t.Errorf("changesOf: %+v", cs)
	}
}
