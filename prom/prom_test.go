package prom_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/internal/leaktest"
	"github.com/sqlflight/sqlflight/prom"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// testDriver is a trivial database: every query returns one row (1), every
// exec affects one row.
type testDriver struct{}

func (testDriver) Connect(context.Context) (driver.Conn, error) { return testConn{}, nil }
func (d testDriver) Driver() driver.Driver                      { return d }
func (testDriver) Open(string) (driver.Conn, error)             { return testConn{}, nil }

type testConn struct{}

func (testConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (testConn) Close() error                        { return nil }
func (testConn) Begin() (driver.Tx, error)           { return testTx{}, nil } //nolint:staticcheck

func (testConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &testRows{}, nil
}

func (testConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(1), nil
}

type testTx struct{}

func (testTx) Commit() error   { return nil }
func (testTx) Rollback() error { return nil }

type testRows struct{ done bool }

func (*testRows) Columns() []string { return []string{"n"} }
func (*testRows) Close() error      { return nil }
func (r *testRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = int64(1)
	return nil
}

// drive runs a few statements through s: a cached named read three times
// (miss, then fresh hits), a write and a bad annotation (bypasses).
func drive(t *testing.T, s *sqlflight.Shield) {
	t.Helper()
	db := s.OpenDB(testDriver{})
	defer db.Close()
	readAndWrite(t, db)
	rows, err := db.QueryContext(context.Background(), "/* sqlflight: sfot=1s */ SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
}

// readAndWrite runs a cached named read three times (miss, then fresh
// hits) and a write.
func readAndWrite(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		var n int
		if err := db.QueryRowContext(ctx, "/* sqlflight: soft=1m name=product */ SELECT n FROM products WHERE id = 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "UPDATE stock SET n = 2"); err != nil {
		t.Fatal(err)
	}
}

func newShield(t *testing.T) *sqlflight.Shield {
	s := sqlflight.New(sqlflight.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestCollectorMetrics(t *testing.T) {
	s := newShield(t)
	drive(t, s)
	st := s.Stats()
	if st.FreshHits == 0 || st.Misses == 0 || st.Bypassed == 0 {
		t.Fatalf("the test queries did not exercise the cache and bypasses: %+v", st)
	}

	c := prom.NewCollector(s, prom.WithShieldName("orders"))
	const lbl = `shield="orders"`
	want := `
# HELP sqlflight_cache_hits_total Cached results served, by state (fresh, stale or negative).
# TYPE sqlflight_cache_hits_total counter
sqlflight_cache_hits_total{` + lbl + `,state="fresh"} ` + u(st.FreshHits) + `
sqlflight_cache_hits_total{` + lbl + `,state="negative"} ` + u(st.NegativeHits) + `
sqlflight_cache_hits_total{` + lbl + `,state="stale"} ` + u(st.StaleHits) + `
# HELP sqlflight_cache_misses_total Cacheable reads that found no usable cache entry.
# TYPE sqlflight_cache_misses_total counter
sqlflight_cache_misses_total{` + lbl + `} ` + u(st.Misses) + `
# HELP sqlflight_queries_total Statements seen (queries and execs, prepared or not).
# TYPE sqlflight_queries_total counter
sqlflight_queries_total{` + lbl + `} ` + u(st.Queries) + `
# HELP sqlflight_breaker_state State of the circuit breaker, the worst of the scopes': 0 closed, 1 half-open, 2 open.
# TYPE sqlflight_breaker_state gauge
sqlflight_breaker_state{` + lbl + `} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"sqlflight_cache_hits_total", "sqlflight_cache_misses_total", "sqlflight_queries_total", "sqlflight_breaker_state"); err != nil {
		t.Error(err)
	}

	// Every bypass reason is exported, zero included, and sums to Bypassed.
	if n := testutil.CollectAndCount(c, "sqlflight_bypassed_total"); n != len(prom.BypassReasons) {
		t.Errorf("%d bypass series, want %d", n, len(prom.BypassReasons))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			var shield string
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "shield" {
					shield = lp.GetValue()
				}
			}
			if shield != "orders" {
				t.Errorf("%s has shield label %q", mf.GetName(), shield)
			}
		}
		if mf.GetName() == "sqlflight_bypassed_total" {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "reason" && (lp.GetValue() == "exec" || lp.GetValue() == "bad annotation") &&
						m.GetCounter().GetValue() == 0 {
						t.Errorf("no bypass counted under reason=%q", lp.GetValue())
					}
				}
			}
			if uint64(sum) != st.Bypassed {
				t.Errorf("bypasses by reason sum to %v, Bypassed is %d", sum, st.Bypassed)
			}
		}
	}
	for _, name := range []string{
		"sqlflight_queries_total", "sqlflight_bypassed_total", "sqlflight_flights_total", "sqlflight_followers_total",
		"sqlflight_origin_executions_total", "sqlflight_origin_errors_total", "sqlflight_cache_hits_total",
		"sqlflight_cache_misses_total", "sqlflight_cache_fills_total", "sqlflight_refreshes_total",
		"sqlflight_refresh_failures_total", "sqlflight_stale_if_error_total", "sqlflight_shed_total",
		"sqlflight_breaker_rejected_total", "sqlflight_breaker_transitions_total", "sqlflight_invalidations_total",
		"sqlflight_too_large_total", "sqlflight_wait_expired_total", "sqlflight_bad_annotations_total",
		"sqlflight_panics_total", "sqlflight_real_connections_opened_total",
		"sqlflight_probes_total", "sqlflight_probe_failures_total", "sqlflight_probe_duration_seconds",
		"sqlflight_waiting", "sqlflight_flights_in_progress", "sqlflight_real_connections", "sqlflight_breaker_state",
		"sqlflight_origin_duration_seconds", "sqlflight_follower_wait_seconds",
		"sqlflight_policy_queries_total", "sqlflight_policy_cache_hits_total", "sqlflight_policy_cache_misses_total",
		"sqlflight_policy_origin_executions_total", "sqlflight_policy_origin_errors_total",
		"sqlflight_policy_origin_duration_seconds", "sqlflight_policy_names_dropped",
	} {
		if !got[name] {
			t.Errorf("%s not exported", name)
		}
	}
}

func TestCollectorNamesAndHistograms(t *testing.T) {
	s := newShield(t)
	drive(t, s)
	st := s.Stats()
	ns, ok := st.Names["product"]
	if !ok {
		t.Fatalf("no stats for name product: %+v", st.Names)
	}
	c := prom.NewCollector(s)
	const lbl = `name="product",shield="default"`
	want := `
# HELP sqlflight_policy_cache_hits_total Cached results served for a policy name, by state.
# TYPE sqlflight_policy_cache_hits_total counter
sqlflight_policy_cache_hits_total{` + lbl + `,state="fresh"} ` + u(ns.FreshHits) + `
sqlflight_policy_cache_hits_total{` + lbl + `,state="negative"} ` + u(ns.NegativeHits) + `
sqlflight_policy_cache_hits_total{` + lbl + `,state="stale"} ` + u(ns.StaleHits) + `
# HELP sqlflight_policy_origin_executions_total Shared-flight queries of a policy name that reached the database.
# TYPE sqlflight_policy_origin_executions_total counter
sqlflight_policy_origin_executions_total{` + lbl + `} ` + u(ns.OriginExecutions) + `
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"sqlflight_policy_cache_hits_total", "sqlflight_policy_origin_executions_total"); err != nil {
		t.Error(err)
	}

	// The origin histogram is cumulative, its +Inf bucket is its count.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sqlflight_origin_duration_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != st.OriginDuration.Count || h.GetSampleCount() == 0 {
			t.Errorf("origin histogram count %d, Stats %d", h.GetSampleCount(), st.OriginDuration.Count)
		}
		var prev uint64
		for _, b := range h.GetBucket() {
			if b.GetCumulativeCount() < prev || b.GetCumulativeCount() > h.GetSampleCount() {
				t.Errorf("bucket %v: cumulative %d after %d, count %d", b.GetUpperBound(), b.GetCumulativeCount(), prev, h.GetSampleCount())
			}
			prev = b.GetCumulativeCount()
		}
		if len(h.GetBucket()) != len(st.OriginDuration.Bounds) {
			t.Errorf("%d buckets, want %d", len(h.GetBucket()), len(st.OriginDuration.Bounds))
		}
	}

	if n := testutil.CollectAndCount(prom.NewCollector(s, prom.WithoutNames()),
		"sqlflight_policy_queries_total", "sqlflight_policy_origin_duration_seconds"); n != 0 {
		t.Errorf("WithoutNames: %d policy series", n)
	}
}

func TestCollectorLint(t *testing.T) {
	s := newShield(t)
	drive(t, s)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prom.NewCollector(s))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestTwoShields registers two collectors side by side, told apart by the
// shield label.
func TestTwoShields(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prom.NewCollector(newShield(t), prom.WithShieldName("a")))
	reg.MustRegister(prom.NewCollector(newShield(t), prom.WithShieldName("b")))
	if n, err := testutil.GatherAndCount(reg, "sqlflight_queries_total"); err != nil || n != 2 {
		t.Errorf("%d series of sqlflight_queries_total, err %v; want 2", n, err)
	}
}

func u(n uint64) string { return strconv.FormatUint(n, 10) }

// sharedMetrics are the metrics of the shared tier, exported only for a
// Shield that has one.
var sharedMetrics = []string{
	"sqlflight_shared_hits_total", "sqlflight_shared_misses_total", "sqlflight_shared_writes_total",
	"sqlflight_shared_superseded_total", "sqlflight_shared_errors_total", "sqlflight_shared_decode_errors_total",
	"sqlflight_shared_forged_total", "sqlflight_shared_skipped_total", "sqlflight_shared_transitions_total",
	"sqlflight_leases_acquired_total", "sqlflight_lease_waits_total", "sqlflight_lease_wait_expired_total",
	"sqlflight_invalidations_sent_total", "sqlflight_invalidations_heard_total", "sqlflight_invalidations_rejected_total",
	"sqlflight_invalidation_resyncs_total",
	"sqlflight_shared_up", "sqlflight_shared_trusted",
}

// memTier is an in-memory sqlflight.SharedTier; while failing is set,
// every call fails.
type memTier struct {
	failing atomic.Bool

	mu     sync.Mutex
	seq    uint64
	vals   map[string]sqlflight.SharedValue
	leases map[string]string
}

var errTierFailing = errors.New("memTier: failing")

func newMemTier() *memTier {
	return &memTier{vals: map[string]sqlflight.SharedValue{}, leases: map[string]string{}}
}

func (m *memTier) Fetch(_ context.Context, ns, key string, tables []string) (sqlflight.SharedValue, error) {
	if m.failing.Load() {
		return sqlflight.SharedValue{}, errTierFailing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.vals[ns+key]
	v.Epochs = make([]uint64, len(tables)+1) // no write is ever published here
	return v, nil
}

func (m *memTier) Store(_ context.Context, ns, key string, data []byte, version uint64, _ time.Duration) (bool, error) {
	if m.failing.Load() {
		return false, errTierFailing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.vals[ns+key].Version >= version {
		return false, nil
	}
	m.vals[ns+key] = sqlflight.SharedValue{Data: append([]byte(nil), data...), Version: version}
	return true, nil
}

func (m *memTier) Acquire(_ context.Context, ns, key string, _ time.Duration) (sqlflight.Lease, error) {
	if m.failing.Load() {
		return sqlflight.Lease{}, errTierFailing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	tok := strconv.FormatUint(m.seq, 10)
	if _, taken := m.leases[ns+key]; taken {
		return sqlflight.Lease{Token: tok, Version: m.seq}, nil
	}
	m.leases[ns+key] = tok
	return sqlflight.Lease{Held: true, Token: tok, Version: m.seq}, nil
}

func (m *memTier) Release(_ context.Context, ns, key string, l sqlflight.Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[ns+key] == l.Token {
		delete(m.leases, ns+key)
	}
	return nil
}

func (m *memTier) NextSeq(context.Context, string) (uint64, error) {
	if m.failing.Load() {
		return 0, errTierFailing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	return m.seq, nil
}

func (m *memTier) Publish(context.Context, string, sqlflight.Invalidation) error {
	if m.failing.Load() {
		return errTierFailing
	}
	return nil
}

func (m *memTier) Subscribe(string, func(sqlflight.Invalidation)) (func(), error) {
	return func() {}, nil
}

// newTierShield returns a Shield on a memTier.
func newTierShield(t *testing.T) (*sqlflight.Shield, *memTier) {
	tier := newMemTier()
	s := sqlflight.New(sqlflight.Options{Logger: slog.New(slog.DiscardHandler),
		SharedSecret: "a test fleet secret, 32 bytes.."}, sqlflight.Shared(tier))
	t.Cleanup(func() { s.Close() })
	return s, tier
}

// driveShared runs drive's statements through a connector whose results
// go to the shared tier, and waits for the write to the tier (it follows
// the caller's answer).
func driveShared(t *testing.T, s *sqlflight.Shield) *sql.DB {
	t.Helper()
	db := sql.OpenDB(s.SharedConnector(testDriver{}, "prom-test"))
	t.Cleanup(func() { db.Close() })
	readAndWrite(t, db)
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().SharedWrites == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no write to the shared tier: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	return db
}

func TestCollectorWithoutTier(t *testing.T) {
	s := newShield(t)
	drive(t, s)
	if st := s.Stats(); st.SharedState != "" {
		t.Fatalf("SharedState %q without a tier", st.SharedState)
	}
	c := prom.NewCollector(s)
	for _, name := range sharedMetrics {
		if n := testutil.CollectAndCount(c, name); n != 0 {
			t.Errorf("%s: %d series without a shared tier, want none", name, n)
		}
	}
}

func TestCollectorSharedTier(t *testing.T) {
	s, tier := newTierShield(t)
	db := driveShared(t, s)
	st := s.Stats()
	if st.SharedState != "up" || st.SharedMisses != 1 || st.LeasesAcquired != 1 || st.SharedWrites != 1 ||
		st.InvalidationsSent != 1 {
		t.Fatalf("the test queries did not exercise the shared tier: %+v", st)
	}

	c := prom.NewCollector(s, prom.WithShieldName("orders"))
	var want strings.Builder
	metric := func(name, typ, help string, v uint64) {
		fmt.Fprintf(&want, "# HELP %s %s\n# TYPE %s %s\n%s{shield=\"orders\"} %d\n", name, help, name, typ, name, v)
	}
	metric("sqlflight_shared_hits_total", "counter", "Results taken from the shared tier into the in-process cache instead of querying the database.", st.SharedHits)
	metric("sqlflight_shared_misses_total", "counter", "Flights that found no usable result in the shared tier.", st.SharedMisses)
	metric("sqlflight_shared_writes_total", "counter", "Results written to the shared tier.", st.SharedWrites)
	metric("sqlflight_shared_superseded_total", "counter", "Writes to the shared tier refused because it held a newer version.", st.SharedSuperseded)
	metric("sqlflight_shared_errors_total", "counter", "Calls to the shared tier that failed or timed out.", st.SharedErrors)
	metric("sqlflight_shared_decode_errors_total", "counter", "Values in the shared tier that could not be read (treated as misses).", st.SharedDecodeErrors)
	metric("sqlflight_shared_forged_total", "counter", "Values in the shared tier that failed authentication (another secret, or written by someone else; treated as misses).", st.SharedForged)
	metric("sqlflight_shared_skipped_total", "counter", "Reads that left the shared tier alone because a write to their tables waits to be published.", st.SharedSkipped)
	metric("sqlflight_shared_transitions_total", "counter", "Times the shared tier went down or came back.", st.SharedTransitions)
	metric("sqlflight_leases_acquired_total", "counter", "Leases this instance took to query for the fleet.", st.LeasesAcquired)
	metric("sqlflight_lease_waits_total", "counter", "Flights that waited for another instance's lease holder.", st.LeaseWaits)
	metric("sqlflight_lease_wait_expired_total", "counter", "Flights that stopped waiting for another instance's lease holder and queried themselves.", st.LeaseWaitExpired)
	metric("sqlflight_invalidations_sent_total", "counter", "Writes published to the other instances through the shared tier.", st.InvalidationsSent)
	metric("sqlflight_invalidations_heard_total", "counter", "Writes of other instances heard through the shared tier and applied here.", st.InvalidationsHeard)
	metric("sqlflight_invalidations_rejected_total", "counter", "Messages on the invalidation channel that did not parse or failed authentication (ignored).", st.InvalidationsRejected)
	metric("sqlflight_invalidation_resyncs_total", "counter", "Times the invalidation subscription was made again and the in-process cache dropped everything.", st.InvalidationResyncs)
	metric("sqlflight_shared_up", "gauge", "Whether the shared tier is in use: 1 up, 0 down (running on the in-process cache alone).", 1)
	metric("sqlflight_shared_trusted", "gauge", sharedTrustedHelp, 0)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want.String()), sharedMetrics...); err != nil {
		t.Error(err)
	}

	// The tier fails: a few reads of distinct keys take it down, and the
	// gauge says so.
	tier.failing.Store(true)
	ctx := context.Background()
	for i := 2; s.Stats().SharedState != "down"; i++ {
		if i > 50 {
			t.Fatalf("the failing tier is not down: %+v", s.Stats())
		}
		var n int
		q := fmt.Sprintf("/* sqlflight: soft=1m */ SELECT n FROM products WHERE id = %d", i)
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if v := value(t, c, "sqlflight_shared_up"); v != 0 {
		t.Errorf("sqlflight_shared_up %v with the tier down, want 0", v)
	}
	st = s.Stats()
	if v := value(t, c, "sqlflight_shared_errors_total"); v == 0 || uint64(v) != st.SharedErrors {
		t.Errorf("sqlflight_shared_errors_total %v, Stats %d", v, st.SharedErrors)
	}
	if v := value(t, c, "sqlflight_shared_transitions_total"); v != 1 {
		t.Errorf("sqlflight_shared_transitions_total %v, want 1", v)
	}
}

// value returns the value of the one series of the counter or gauge name
// that c exports.
func value(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: %d series, want 1", name, len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s not exported", name)
	return 0
}

func TestCollectorLintSharedTier(t *testing.T) {
	s, _ := newTierShield(t)
	driveShared(t, s)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prom.NewCollector(s))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range sharedMetrics {
		if !got[name] {
			t.Errorf("%s not exported with a shared tier", name)
		}
	}
}
