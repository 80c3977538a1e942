package prom_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/prom"
)

// Renew makes memTier a sqlflight.Leaser: it extends nothing (its leases
// never expire) and reports whether the lease is still held.
func (m *memTier) Renew(_ context.Context, ns, key string, l sqlflight.Lease, _ time.Duration) (bool, error) {
	if m.failing.Load() {
		return false, errTierFailing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return l.Held && m.leases[ns+key] == l.Token, nil
}

var feedMetrics = []string{
	"sqlflight_feed_transactions_total", "sqlflight_feed_changes_total", "sqlflight_feed_resyncs_total",
	"sqlflight_feed_errors_total", "sqlflight_feed_state", "sqlflight_feed_lag_seconds", "sqlflight_feed_delay_seconds",
}

// TestCollectorFeed: a Shield with a change feed exports the feed's
// metrics (its state one-hot by label), and they pass the linter; one
// without exports none.
func TestCollectorFeed(t *testing.T) {
	s := sqlflight.New(sqlflight.Options{Feed: sqlflight.FeedReplication, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { s.Close() })
	c := prom.NewCollector(s)
	for _, name := range feedMetrics {
		want := 1
		if name == "sqlflight_feed_state" {
			want = len(prom.FeedStates)
		}
		if n := testutil.CollectAndCount(c, name); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP sqlflight_feed_state State of the change feed: 1 for the current state (label state), 0 for the others.
# TYPE sqlflight_feed_state gauge
sqlflight_feed_state{shield="default",state="current"} 0
sqlflight_feed_state{shield="default",state="down"} 0
sqlflight_feed_state{shield="default",state="lagging"} 0
sqlflight_feed_state{shield="default",state="standby"} 0
sqlflight_feed_state{shield="default",state="starting"} 1
`), "sqlflight_feed_state")
	if err != nil {
		t.Error(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	none := prom.NewCollector(newShield(t))
	for _, name := range feedMetrics {
		if n := testutil.CollectAndCount(none, name); n != 0 {
			t.Errorf("%s: %d series without a feed, want none", name, n)
		}
	}
}
