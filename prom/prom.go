// Package prom exports the statistics of a sqlflight Shield as Prometheus
// metrics.
//
//	shield := sqlflight.ShieldOf(db)
//	prometheus.MustRegister(prom.NewCollector(shield, prom.WithShieldName("orders")))
//
// Every metric carries a constant label shield (default "default"), so that
// several Shields can be registered side by side. The collector reads
// Shield.Stats once per scrape and keeps no state of its own.
//
// The metrics of the shared tier (sqlflight_shared_*, sqlflight_lease*_*,
// sqlflight_invalidations_sent_total, sqlflight_invalidations_heard_total,
// sqlflight_invalidations_rejected_total, sqlflight_invalidation_resyncs_total and the gauge sqlflight_shared_up)
// are exported only for a Shield that has a shared tier (Stats.SharedState
// is not empty). A Shield without one exports none of them, rather than
// zeros or a sqlflight_shared_up of 0 that would read as a tier that is
// down. A Shield whose tier could not be attached (its subscription
// failed) runs without one, and so exports none of them either.
//
// The metrics of the change feed (sqlflight_feed_*) are exported only for a
// Shield with a feed (Stats.FeedState is not empty): sqlflight_feed_state
// (1 for the current state, 0 for the others, by label state),
// sqlflight_feed_lag_seconds, sqlflight_feed_delay_seconds (commit to
// invalidation), and the counters sqlflight_feed_transactions_total,
// sqlflight_feed_changes_total, sqlflight_feed_resyncs_total and
// sqlflight_feed_errors_total.
//
// Each scope of a Shield (each DSN or connector: each database and user)
// has a circuit breaker of its own. sqlflight_breaker_state is the worst of
// them, sqlflight_breaker_open_scopes counts those not closed, and
// sqlflight_breaker_scope_state tells which, by label scope (the scope's
// label in Stats.Breakers: "database@host:port", a SharedConnector's name,
// or "scope N"; never a password). To keep that label bounded, at most
// MaxBreakerScopes series are exported per scrape: every scope when the
// Shield has no more, otherwise the scopes that are not closed first (by
// label), then closed ones, up to that number. sqlflight_breaker_open_scopes
// counts every scope whatever the cap.
//
// A Shield whose shared tier is trusted without a secret
// (InsecureTrustSharedTier, Stats.SharedTrusted) exports
// sqlflight_shared_trusted 1 (0 for a tier with a secret), with the other
// metrics of its tier: whoever can write to such a tier can make the
// Shield serve rows of their choosing, so alert on it.
//
// The per-policy-name metrics (sqlflight_policy_*, label name) are
// exported for at most DefaultMaxNames names per scrape, the busiest by
// queries (ties by name), or the number WithMaxNames sets;
// sqlflight_policy_names_dropped counts the names a scrape left out. A
// Shield counts at most 1,000 names apart (later ones count under
// "_other"), each at most sqlflight.MaxNameLen (128) bytes, and each name
// makes 7 series (24 samples, its histogram's buckets included): with
// 1,001 names of 58 bytes a scrape measured 3.3 MB (24,201 lines), with
// the default cap 219 KB (1,713 lines), without names 10 KB.
// A name that falls out of the top and comes back goes on with its
// cumulative counts, so rate() over it stays right but for the scrapes it
// missed. WithoutNames leaves them all out.
//
// Label values (the shield name, policy names, scopes) are made valid UTF-8 before
// they reach Prometheus, each invalid byte sequence becoming U+FFFD; policy
// names that then coincide are exported as one. A name= annotation that is
// not valid UTF-8 is malformed to begin with.
package prom

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sqlflight/sqlflight"
)

// DefaultShieldName is the value of the shield label when no WithShieldName
// option is given.
const DefaultShieldName = "default"

// OtherReason is the reason label of bypasses whose reason is not one of
// BypassReasons (a reason added by a later sqlflight version), so that the
// label stays bounded.
const OtherReason = "other"

// BypassReasons are the reason label values of sqlflight_bypassed_total,
// each exported (zero included) on every scrape.
var BypassReasons = []string{
	"exec", "transaction", "session", "write", "not shareable", "unverified", "policy",
	"arguments", "too large", "busy connection", "bad annotation",
}

// FeedStates are the state label values of sqlflight_feed_state, each
// exported on every scrape of a Shield with a change feed.
var FeedStates = []string{"starting", "current", "lagging", "down", "standby"}

// MaxBreakerScopes is the most sqlflight_breaker_scope_state series a
// scrape exports.
const MaxBreakerScopes = 10

// DefaultMaxNames is the most policy names whose sqlflight_policy_* series
// a scrape exports, unless WithMaxNames sets another number.
const DefaultMaxNames = 64

// An Option configures a collector.
type Option func(*config)

type config struct {
	shield   string
	names    bool
	maxNames int
}

// WithShieldName sets the value of the constant shield label of every
// metric (default DefaultShieldName).
func WithShieldName(name string) Option {
	return func(c *config) { c.shield = name }
}

// WithoutNames leaves out the per-policy-name metrics (sqlflight_policy_*
// and sqlflight_policy_names_dropped).
func WithoutNames() Option {
	return func(c *config) { c.names = false }
}

// WithMaxNames sets the most policy names whose sqlflight_policy_* series
// a scrape exports, the busiest by queries (default DefaultMaxNames); n < 1
// exports every name the Shield counts (at most 1,001).
func WithMaxNames(n int) Option {
	return func(c *config) { c.maxNames = n }
}

// Collector is a prometheus.Collector of one Shield's Stats.
type Collector struct {
	s        *sqlflight.Shield
	names    bool
	maxNames int // < 1: every name

	counters []counter
	gauges   []gauge
	shared   []counter // exported only with a shared tier
	feed     []counter // exported only with a change feed

	feedState, feedLag, feedDelay *prometheus.Desc

	sharedUp, sharedTrusted                       *prometheus.Desc
	bypassed, cacheHits, breakerState             *prometheus.Desc
	breakerOpenScopes, breakerScopeState          *prometheus.Desc
	originDuration, followerWait, probeDuration   *prometheus.Desc
	policyQueries, policyHits, policyMisses       *prometheus.Desc
	policyOrigin, policyErrors, policyOriginHisto *prometheus.Desc
	policyNamesDropped                            *prometheus.Desc
}

// A counter is one unlabelled counter and the Stats field it reads.
type counter struct {
	desc  *prometheus.Desc
	value func(*sqlflight.Stats) uint64
}

// A gauge is one unlabelled gauge and the Stats field it reads.
type gauge struct {
	desc  *prometheus.Desc
	value func(*sqlflight.Stats) int64
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector of s's Stats.
func New(s *sqlflight.Shield, opts ...Option) *Collector {
	cfg := config{shield: DefaultShieldName, names: true, maxNames: DefaultMaxNames}
	for _, o := range opts {
		o(&cfg)
	}
	constLabels := prometheus.Labels{"shield": labelValue(cfg.shield)}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sqlflight_"+name, help, labels, constLabels)
	}
	c := &Collector{s: s, names: cfg.names, maxNames: cfg.maxNames}
	cnt := func(name, help string, value func(*sqlflight.Stats) uint64) {
		c.counters = append(c.counters, counter{desc(name, help), value})
	}
	cnt("queries_total", "Statements seen (queries and execs, prepared or not).",
		func(st *sqlflight.Stats) uint64 { return st.Queries })
	cnt("flights_total", "Shared flights started (leaders).",
		func(st *sqlflight.Stats) uint64 { return st.Flights })
	cnt("followers_total", "Callers that joined a running flight instead of querying.",
		func(st *sqlflight.Stats) uint64 { return st.Followers })
	cnt("origin_executions_total", "Shared-flight queries that reached the database.",
		func(st *sqlflight.Stats) uint64 { return st.OriginExecutions })
	cnt("origin_errors_total", "Shared-flight queries that failed.",
		func(st *sqlflight.Stats) uint64 { return st.OriginErrors })
	cnt("batches_total", "Statements that answered the reads of many keys at once (batches).",
		func(st *sqlflight.Stats) uint64 { return st.Batches })
	cnt("batched_reads_total", "Reads answered by a batch of many keys.",
		func(st *sqlflight.Stats) uint64 { return st.BatchedReads })
	cnt("batch_alone_total", "Reads a batch could not answer, which ran their own statement.",
		func(st *sqlflight.Stats) uint64 { return st.BatchAlone })
	cnt("cache_misses_total", "Cacheable reads that found no usable cache entry.",
		func(st *sqlflight.Stats) uint64 { return st.Misses })
	cnt("cache_fills_total", "Results stored in the cache.",
		func(st *sqlflight.Stats) uint64 { return st.Fills })
	cnt("refreshes_total", "Background refreshes of cached results started (stale or early).",
		func(st *sqlflight.Stats) uint64 { return st.Refreshes })
	cnt("refresh_failures_total", "Background refreshes of cached results that failed.",
		func(st *sqlflight.Stats) uint64 { return st.RefreshFailures })
	cnt("stale_if_error_total", "Cached results served because the query to refresh them failed or was refused.",
		func(st *sqlflight.Stats) uint64 { return st.StaleIfError })
	cnt("shed_total", "Reads refused for want of an origin slot (ErrOverloaded or a stale result).",
		func(st *sqlflight.Stats) uint64 { return st.Shed })
	cnt("breaker_rejected_total", "Statements refused by the open circuit breaker.",
		func(st *sqlflight.Stats) uint64 { return st.BreakerRejected })
	cnt("breaker_transitions_total", "State changes of the circuit breaker.",
		func(st *sqlflight.Stats) uint64 { return st.BreakerTransitions })
	cnt("invalidations_total", "Write events that bumped table epochs.",
		func(st *sqlflight.Stats) uint64 { return st.Invalidations })
	cnt("too_large_total", "Shared results over the row or byte limit, handed to their own caller only.",
		func(st *sqlflight.Stats) uint64 { return st.TooLarge })
	cnt("wait_expired_total", "Followers that stopped waiting for a flight after wait= and queried themselves.",
		func(st *sqlflight.Stats) uint64 { return st.WaitExpired })
	cnt("bad_annotations_total", "Statements with a malformed sqlflight annotation.",
		func(st *sqlflight.Stats) uint64 { return st.BadAnnotations })
	cnt("panics_total", "Panics and Goexits caught in the origin path.",
		func(st *sqlflight.Stats) uint64 { return st.Panics })
	cnt("real_connections_opened_total", "Real database connections opened.",
		func(st *sqlflight.Stats) uint64 { return st.RealConnsOpened })
	cnt("probes_total", "Statement shapes whose verdict was asked of the server.",
		func(st *sqlflight.Stats) uint64 { return st.Probes })
	cnt("probe_failures_total", "Probes that failed (those statements ran unshared).",
		func(st *sqlflight.Stats) uint64 { return st.ProbeFailures })

	shr := func(name, help string, value func(*sqlflight.Stats) uint64) {
		c.shared = append(c.shared, counter{desc(name, help), value})
	}
	shr("shared_hits_total", "Results taken from the shared tier into the in-process cache instead of querying the database.",
		func(st *sqlflight.Stats) uint64 { return st.SharedHits })
	shr("shared_misses_total", "Flights that found no usable result in the shared tier.",
		func(st *sqlflight.Stats) uint64 { return st.SharedMisses })
	shr("shared_writes_total", "Results written to the shared tier.",
		func(st *sqlflight.Stats) uint64 { return st.SharedWrites })
	shr("shared_superseded_total", "Writes to the shared tier refused because it held a newer version.",
		func(st *sqlflight.Stats) uint64 { return st.SharedSuperseded })
	shr("shared_errors_total", "Calls to the shared tier that failed or timed out.",
		func(st *sqlflight.Stats) uint64 { return st.SharedErrors })
	shr("shared_decode_errors_total", "Values in the shared tier that could not be read (treated as misses).",
		func(st *sqlflight.Stats) uint64 { return st.SharedDecodeErrors })
	shr("shared_forged_total", "Values in the shared tier that failed authentication (another secret, or written by someone else; treated as misses).",
		func(st *sqlflight.Stats) uint64 { return st.SharedForged })
	shr("shared_skipped_total", "Reads that left the shared tier alone because a write to their tables waits to be published.",
		func(st *sqlflight.Stats) uint64 { return st.SharedSkipped })
	shr("shared_transitions_total", "Times the shared tier went down or came back.",
		func(st *sqlflight.Stats) uint64 { return st.SharedTransitions })
	shr("leases_acquired_total", "Leases this instance took to query for the fleet.",
		func(st *sqlflight.Stats) uint64 { return st.LeasesAcquired })
	shr("lease_waits_total", "Flights that waited for another instance's lease holder.",
		func(st *sqlflight.Stats) uint64 { return st.LeaseWaits })
	shr("lease_wait_expired_total", "Flights that stopped waiting for another instance's lease holder and queried themselves.",
		func(st *sqlflight.Stats) uint64 { return st.LeaseWaitExpired })
	shr("invalidations_sent_total", "Writes published to the other instances through the shared tier.",
		func(st *sqlflight.Stats) uint64 { return st.InvalidationsSent })
	shr("invalidations_heard_total", "Writes of other instances heard through the shared tier and applied here.",
		func(st *sqlflight.Stats) uint64 { return st.InvalidationsHeard })
	shr("invalidations_rejected_total", "Messages on the invalidation channel that did not parse or failed authentication (ignored).",
		func(st *sqlflight.Stats) uint64 { return st.InvalidationsRejected })
	shr("invalidation_resyncs_total", "Times the invalidation subscription was made again and the in-process cache dropped everything.",
		func(st *sqlflight.Stats) uint64 { return st.InvalidationResyncs })

	fd := func(name, help string, value func(*sqlflight.Stats) uint64) {
		c.feed = append(c.feed, counter{desc(name, help), value})
	}
	fd("feed_transactions_total", "Committed transactions the change feed applied.",
		func(st *sqlflight.Stats) uint64 { return st.FeedTransactions })
	fd("feed_changes_total", "Changed rows (and truncated tables) the change feed applied.",
		func(st *sqlflight.Stats) uint64 { return st.FeedChanges })
	fd("feed_resyncs_total", "Times the change feed was established again and the cache dropped every entry.",
		func(st *sqlflight.Stats) uint64 { return st.FeedResyncs })
	fd("feed_errors_total", "Failures of the change feed (connection lost, refused, slot gone).",
		func(st *sqlflight.Stats) uint64 { return st.FeedErrors })
	c.feedState = desc("feed_state", "State of the change feed: 1 for the current state (label state), 0 for the others.", "state")
	c.feedLag = desc("feed_lag_seconds", "How far behind the server the change feed was at its last applied transaction.")
	c.feedDelay = desc("feed_delay_seconds", "Time from a transaction's commit (server clock) to its invalidations.")

	gau := func(name, help string, value func(*sqlflight.Stats) int64) {
		c.gauges = append(c.gauges, gauge{desc(name, help), value})
	}
	gau("waiting", "Callers currently waiting on a flight.",
		func(st *sqlflight.Stats) int64 { return st.Waiting })
	gau("flights_in_progress", "Shared flights currently running.",
		func(st *sqlflight.Stats) int64 { return st.InFlight })
	gau("real_connections", "Real database connections currently open.",
		func(st *sqlflight.Stats) int64 { return st.RealConns })
	gau("cache_entries", "Results the cache holds, empty ones included.",
		func(st *sqlflight.Stats) int64 { return st.CacheEntries })
	gau("cache_bytes", "Estimated bytes of the results the cache holds.",
		func(st *sqlflight.Stats) int64 { return st.CacheBytes })

	c.bypassed = desc("bypassed_total", "Statements sent straight to the real connection, by reason.", "reason")
	c.cacheHits = desc("cache_hits_total", "Cached results served, by state (fresh, stale or negative).", "state")
	c.breakerState = desc("breaker_state", "State of the circuit breaker, the worst of the scopes': 0 closed, 1 half-open, 2 open.")
	c.breakerOpenScopes = desc("breaker_open_scopes", "Scopes (databases) whose circuit breaker is open or half-open.")
	c.breakerScopeState = desc("breaker_scope_state", "State of a scope's circuit breaker: 0 closed, 1 half-open, 2 open (at most MaxBreakerScopes scopes, those not closed first).", "scope")
	c.sharedUp = desc("shared_up", "Whether the shared tier is in use: 1 up, 0 down (running on the in-process cache alone).")
	c.sharedTrusted = desc("shared_trusted", "Whether the shared tier is trusted without a secret (InsecureTrustSharedTier): 1 when whoever can write to it can make this Shield serve rows of their choosing, 0 with a secret.")
	c.originDuration = desc("origin_duration_seconds", "Duration of shared origin queries (query and materialization).")
	c.probeDuration = desc("probe_duration_seconds", "Duration of the server's verdict on a new statement shape.")
	c.followerWait = desc("follower_wait_seconds", "Time followers waited for a shared flight.")
	c.policyQueries = desc("policy_queries_total", "Shareable reads of a policy name that reached the sharing path.", "name")
	c.policyHits = desc("policy_cache_hits_total", "Cached results served for a policy name, by state.", "name", "state")
	c.policyMisses = desc("policy_cache_misses_total", "Cacheable reads of a policy name that found no usable entry.", "name")
	c.policyOrigin = desc("policy_origin_executions_total", "Shared-flight queries of a policy name that reached the database.", "name")
	c.policyErrors = desc("policy_origin_errors_total", "Shared-flight queries of a policy name that failed.", "name")
	c.policyOriginHisto = desc("policy_origin_duration_seconds", "Duration of shared origin queries of a policy name.", "name")
	c.policyNamesDropped = desc("policy_names_dropped", "Policy names whose sqlflight_policy_* series this scrape left out: the least busy by queries, beyond the collector's cap (WithMaxNames).")
	return c
}

// NewCollector returns a prometheus.Collector of s's Stats; it is New as an
// interface.
func NewCollector(s *sqlflight.Shield, opts ...Option) prometheus.Collector {
	return New(s, opts...)
}

// Describe sends the descriptors of every metric c may collect.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.counters {
		ch <- m.desc
	}
	for _, m := range c.gauges {
		ch <- m.desc
	}
	for _, m := range c.shared {
		ch <- m.desc
	}
	for _, m := range c.feed {
		ch <- m.desc
	}
	ch <- c.feedState
	ch <- c.feedLag
	ch <- c.feedDelay
	ch <- c.sharedUp
	ch <- c.sharedTrusted
	ch <- c.bypassed
	ch <- c.cacheHits
	ch <- c.breakerState
	ch <- c.breakerOpenScopes
	ch <- c.breakerScopeState
	ch <- c.originDuration
	ch <- c.probeDuration
	ch <- c.followerWait
	if c.names {
		ch <- c.policyQueries
		ch <- c.policyHits
		ch <- c.policyMisses
		ch <- c.policyOrigin
		ch <- c.policyErrors
		ch <- c.policyOriginHisto
		ch <- c.policyNamesDropped
	}
}

// Collect reads the Shield's Stats once and sends them as metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, m := range c.counters {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value(&st)))
	}
	for _, m := range c.gauges {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(m.value(&st)))
	}
	if st.SharedState != "" { // a shared tier: see the package documentation
		for _, m := range c.shared {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value(&st)))
		}
		if v, ok := sharedStates[st.SharedState]; ok {
			ch <- prometheus.MustNewConstMetric(c.sharedUp, prometheus.GaugeValue, v)
		}
		trusted := 0.0
		if st.SharedTrusted {
			trusted = 1
		}
		ch <- prometheus.MustNewConstMetric(c.sharedTrusted, prometheus.GaugeValue, trusted)
	}
	if st.FeedState != "" { // a change feed: see the package documentation
		for _, m := range c.feed {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value(&st)))
		}
		for _, s := range FeedStates {
			v := 0.0
			if s == st.FeedState {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.feedState, prometheus.GaugeValue, v, s)
		}
		ch <- prometheus.MustNewConstMetric(c.feedLag, prometheus.GaugeValue, st.FeedLag.Seconds())
		ch <- constHistogram(c.feedDelay, st.FeedDelay)
	}

	reasons := make(map[string]uint64, len(BypassReasons)+1)
	for _, r := range BypassReasons {
		reasons[r] = 0
	}
	for r, n := range st.BypassReasons {
		if !slices.Contains(BypassReasons, r) {
			r = OtherReason
		}
		reasons[r] += n
	}
	for r, n := range reasons {
		ch <- prometheus.MustNewConstMetric(c.bypassed, prometheus.CounterValue, float64(n), r)
	}

	ch <- prometheus.MustNewConstMetric(c.cacheHits, prometheus.CounterValue, float64(st.FreshHits), "fresh")
	ch <- prometheus.MustNewConstMetric(c.cacheHits, prometheus.CounterValue, float64(st.StaleHits), "stale")
	ch <- prometheus.MustNewConstMetric(c.cacheHits, prometheus.CounterValue, float64(st.NegativeHits), "negative")

	if v, ok := breakerStates[st.BreakerState]; ok {
		ch <- prometheus.MustNewConstMetric(c.breakerState, prometheus.GaugeValue, v)
	}
	ch <- prometheus.MustNewConstMetric(c.breakerOpenScopes, prometheus.GaugeValue, float64(st.BreakerOpen))
	for scope, v := range breakerScopes(st.Breakers) {
		ch <- prometheus.MustNewConstMetric(c.breakerScopeState, prometheus.GaugeValue, v, scope)
	}

	ch <- constHistogram(c.originDuration, st.OriginDuration)
	ch <- constHistogram(c.probeDuration, st.ProbeDuration)
	ch <- constHistogram(c.followerWait, st.FollowerWait)

	if !c.names {
		return
	}
	names, dropped := busiestNames(validNames(st.Names), c.maxNames)
	ch <- prometheus.MustNewConstMetric(c.policyNamesDropped, prometheus.GaugeValue, float64(dropped))
	for name, ns := range names {
		ch <- prometheus.MustNewConstMetric(c.policyQueries, prometheus.CounterValue, float64(ns.Queries), name)
		ch <- prometheus.MustNewConstMetric(c.policyHits, prometheus.CounterValue, float64(ns.FreshHits), name, "fresh")
		ch <- prometheus.MustNewConstMetric(c.policyHits, prometheus.CounterValue, float64(ns.StaleHits), name, "stale")
		ch <- prometheus.MustNewConstMetric(c.policyHits, prometheus.CounterValue, float64(ns.NegativeHits), name, "negative")
		ch <- prometheus.MustNewConstMetric(c.policyMisses, prometheus.CounterValue, float64(ns.Misses), name)
		ch <- prometheus.MustNewConstMetric(c.policyOrigin, prometheus.CounterValue, float64(ns.OriginExecutions), name)
		ch <- prometheus.MustNewConstMetric(c.policyErrors, prometheus.CounterValue, float64(ns.OriginErrors), name)
		ch <- constHistogram(c.policyOriginHisto, ns.OriginDuration, name)
	}
}

// labelValue makes s valid UTF-8, as a Prometheus label value must be:
// each invalid byte sequence becomes U+FFFD. One value that is not would
// fail every scrape.
func labelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// validNames returns names keyed by valid label values; names that become
// equal are merged (two metrics with one label value would fail a scrape).
func validNames(names map[string]sqlflight.NameStats) map[string]sqlflight.NameStats {
	out := make(map[string]sqlflight.NameStats, len(names))
	for name, ns := range names {
		v := labelValue(name)
		if prev, ok := out[v]; ok {
			ns = mergeNameStats(prev, ns)
		}
		out[v] = ns
	}
	return out
}

// busiestNames returns the limit names of names with the most queries
// (ties by name; every one when limit < 1) and how many it left out.
func busiestNames(names map[string]sqlflight.NameStats, limit int) (map[string]sqlflight.NameStats, int) {
	if limit < 1 || len(names) <= limit {
		return names, 0
	}
	keys := make([]string, 0, len(names))
	for name := range names {
		keys = append(keys, name)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if qa, qb := names[a].Queries, names[b].Queries; qa != qb {
			if qa > qb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	out := make(map[string]sqlflight.NameStats, limit)
	for _, name := range keys[:limit] {
		out[name] = names[name]
	}
	return out, len(names) - limit
}

func mergeNameStats(a, b sqlflight.NameStats) sqlflight.NameStats {
	a.Queries += b.Queries
	a.FreshHits += b.FreshHits
	a.StaleHits += b.StaleHits
	a.NegativeHits += b.NegativeHits
	a.Misses += b.Misses
	a.OriginExecutions += b.OriginExecutions
	a.OriginErrors += b.OriginErrors
	h := a.OriginDuration
	h.Counts = slices.Clone(h.Counts)
	for i := range min(len(h.Counts), len(b.OriginDuration.Counts)) {
		h.Counts[i] += b.OriginDuration.Counts[i]
	}
	h.Sum += b.OriginDuration.Sum
	h.Count += b.OriginDuration.Count
	a.OriginDuration = h
	return a
}

// breakerScopes returns the breaker_scope_state gauges to export, by
// label value: at most MaxBreakerScopes, those not closed first.
func breakerScopes(breakers map[string]sqlflight.BreakerStats) map[string]float64 {
	names := make([]string, 0, len(breakers))
	for name := range breakers {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if ca, cb := breakers[a].State == "closed", breakers[b].State == "closed"; ca != cb {
			if cb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	out := make(map[string]float64, min(len(names), MaxBreakerScopes))
	for _, name := range names {
		if len(out) == MaxBreakerScopes {
			break
		}
		v, ok := breakerStates[breakers[name].State]
		if !ok {
			continue
		}
		out[labelValue(name)] = max(out[labelValue(name)], v) // two names made equal: the worse
	}
	return out
}

// breakerStates maps Stats.BreakerState to the breaker_state gauge.
var breakerStates = map[string]float64{"closed": 0, "half-open": 1, "open": 2}

// sharedStates maps Stats.SharedState to the shared_up gauge; a state not
// listed (none without a tier, or one a later sqlflight version adds)
// exports no gauge rather than a guess.
var sharedStates = map[string]float64{"up": 1, "down": 0}

// constHistogram turns h (per-bucket counts, the last above every bound)
// into a Prometheus histogram (cumulative counts). The count is the sum of
// the buckets, so that the +Inf bucket always equals it.
func constHistogram(desc *prometheus.Desc, h sqlflight.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			cum += h.Counts[i]
		}
		buckets[b] = cum
	}
	count := h.Count
	if len(h.Counts) > 0 {
		count = cum
		for _, n := range h.Counts[min(len(h.Bounds), len(h.Counts)):] {
			count += n
		}
	}
	return prometheus.MustNewConstHistogram(desc, count, h.Sum, buckets, labels...)
}
