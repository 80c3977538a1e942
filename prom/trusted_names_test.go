package prom_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/prom"
)

const sharedTrustedHelp = "Whether the shared tier is trusted without a secret (InsecureTrustSharedTier): 1 when whoever can write to it can make this Shield serve rows of their choosing, 0 with a secret."

// TestCollectorSharedTrusted: a tier trusted without a secret exports
// sqlflight_shared_trusted 1, a tier with a secret 0 (TestCollectorSharedTier),
// a Shield without a tier nothing (TestCollectorWithoutTier).
func TestCollectorSharedTrusted(t *testing.T) {
	s := sqlflight.New(sqlflight.Options{Logger: slog.New(slog.DiscardHandler), InsecureTrustSharedTier: true},
		sqlflight.Shared(newMemTier()))
	t.Cleanup(func() { s.Close() })
	if !s.Stats().SharedTrusted {
		t.Fatal("Stats.SharedTrusted is false")
	}
	want := "# HELP sqlflight_shared_trusted " + sharedTrustedHelp + "\n# TYPE sqlflight_shared_trusted gauge\n" +
		"sqlflight_shared_trusted{shield=\"fleet\"} 1\n"
	if err := testutil.CollectAndCompare(prom.NewCollector(s, prom.WithShieldName("fleet")), strings.NewReader(want),
		"sqlflight_shared_trusted"); err != nil {
		t.Error(err)
	}
}

// namedShield returns a Shield that ran busy names (busy00 …, two queries
// each) and quiet ones (quiet00 …, one query each).
func namedShield(t *testing.T, busy, quiet int) *sqlflight.Shield {
	t.Helper()
	s := newShield(t)
	db := s.OpenDB(testDriver{})
	t.Cleanup(func() { db.Close() })
	read := func(name string) {
		var n int
		q := fmt.Sprintf("/* sqlflight: soft=1m name=%s */ SELECT n FROM products WHERE id = 1", name)
		if err := db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	for i := range busy {
		read(fmt.Sprintf("busy%02d", i))
		read(fmt.Sprintf("busy%02d", i))
	}
	for i := range quiet {
		read(fmt.Sprintf("quiet%02d", i))
	}
	if n := len(s.Stats().Names); n != busy+quiet {
		t.Fatalf("the Shield counts %d names, want %d", n, busy+quiet)
	}
	return s
}

// exported returns the name labels of sqlflight_policy_queries_total, the
// samples of every sqlflight_policy_* metric, and the value of
// sqlflight_policy_names_dropped (-1 when not exported).
func exported(t *testing.T, c prometheus.Collector) (names map[string]bool, samples int, dropped float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names, dropped = map[string]bool{}, -1
	for _, mf := range mfs {
		switch n := mf.GetName(); {
		case n == "sqlflight_policy_names_dropped":
			dropped = mf.GetMetric()[0].GetGauge().GetValue()
		case strings.HasPrefix(n, "sqlflight_policy_"):
			for _, m := range mf.GetMetric() {
				samples++
				if h := m.GetHistogram(); h != nil {
					samples += len(h.GetBucket()) + 2 // the buckets, +Inf, _sum and _count
				}
				if n == "sqlflight_policy_queries_total" {
					for _, l := range m.GetLabel() {
						if l.GetName() == "name" {
							names[l.GetValue()] = true
						}
					}
				}
			}
		}
	}
	return names, samples, dropped
}

// TestCollectorMaxNames: a scrape exports the DefaultMaxNames busiest
// names (by queries, ties by name), WithMaxNames raises or lowers the cap
// (0: every name), and sqlflight_policy_names_dropped counts the others.
func TestCollectorMaxNames(t *testing.T) {
	s := namedShield(t, prom.DefaultMaxNames, 16)
	const perName = 24 // 6 counters (hits by 3 states), and a histogram of 14 buckets, +Inf, _sum, _count

	names, samples, dropped := exported(t, prom.NewCollector(s))
	if len(names) != prom.DefaultMaxNames || dropped != 16 || samples != perName*prom.DefaultMaxNames {
		t.Errorf("default: %d names (%d samples), %v dropped; want %d, %d, 16", len(names), samples, dropped,
			prom.DefaultMaxNames, perName*prom.DefaultMaxNames)
	}
	for name := range names {
		if !strings.HasPrefix(name, "busy") {
			t.Errorf("default: %s exported, a quieter name than every busy one", name)
		}
	}

	names, _, dropped = exported(t, prom.NewCollector(s, prom.WithMaxNames(3)))
	if len(names) != 3 || !names["busy00"] || !names["busy01"] || !names["busy02"] || dropped != float64(prom.DefaultMaxNames+16-3) {
		t.Errorf("WithMaxNames(3): %v, %v dropped", names, dropped)
	}
	names, samples, dropped = exported(t, prom.NewCollector(s, prom.WithMaxNames(0)))
	if len(names) != prom.DefaultMaxNames+16 || dropped != 0 || samples != perName*(prom.DefaultMaxNames+16) {
		t.Errorf("WithMaxNames(0): %d names, %v dropped", len(names), dropped)
	}
	if names, samples, dropped = exported(t, prom.NewCollector(s, prom.WithoutNames())); len(names) != 0 || samples != 0 || dropped != -1 {
		t.Errorf("WithoutNames: %d names, %d samples, dropped %v", len(names), samples, dropped)
	}

	// A Shield with fewer names than the cap drops none, and says so.
	if names, _, dropped = exported(t, prom.NewCollector(namedShield(t, 2, 1))); len(names) != 3 || dropped != 0 {
		t.Errorf("3 names: %v exported, %v dropped", names, dropped)
	}
}
