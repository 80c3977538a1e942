package sqlflight

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"
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
