package sqlflight

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"
)

// tierState is a Shield's side of its shared tier: the namespace, the
// timeouts, a breaker of its own, the invalidations waiting to be published
// and the subscription that hears other instances' writes.
//
// The breaker: every call is bounded by Options.RedisTimeout; a call that
// fails while its caller still waits counts as a failure (a caller that
// left says nothing of the tier). tierFailures failures in a row take the
// tier down: the Shield runs on L1 alone, with no error to any caller,
// until a probe (one call let through after the back-off) succeeds and the
// invalidations that could not be published meanwhile are.
type tierState struct {
	t        SharedTier
	ns       string
	timeout  time.Duration
	leaseTTL time.Duration
	source   string // this Shield's instance id, in what it publishes
	clock    Clock
	log      func(msg string, args ...any)

	down atomic.Bool
	mu   sync.Mutex // guards what follows
	// failures in a row; when down, the back-off and whether a probe runs
	failures  int
	openUntil time.Time
	downs     int
	probing   bool
	// invalidations that could not be published (pendingAll: of every table)
	pending    map[string]struct{}
	pendingAll bool

	stop func()

	stats tierCounters
}

type tierCounters struct {
	hits, misses, writes, superseded, leases, leaseWaits, leaseExpired atomic.Uint64
	errors, decodeErrors, published, received, resyncs, transitions    atomic.Uint64
	skippedPending                                                     atomic.Uint64
}

const (
	tierFailures   = 3 // failures in a row that take the tier down
	tierBackoffMin = 500 * time.Millisecond
	tierBackoffMax = 5 * time.Second
	maxPending     = 1024 // tables remembered for publishing; beyond, "all"
)

func newTierState(t SharedTier, o *Options, logWarn func(string, ...any)) *tierState {
	var id [8]byte
	_, _ = rand.Read(id[:])
	ts := &tierState{t: t, ns: o.KeyPrefix, timeout: o.RedisTimeout, leaseTTL: o.LeaseTTL,
		source: hex.EncodeToString(id[:]), clock: o.Clock, log: logWarn, pending: map[string]struct{}{}}
	if ts.ns == "" {
		ts.ns = DefaultKeyPrefix
	}
	if ts.timeout <= 0 {
		ts.timeout = DefaultRedisTimeout
	}
	if ts.leaseTTL <= 0 {
		ts.leaseTTL = DefaultLeaseTTL
	}
	return ts
}

// call runs f on the tier, bounded by the timeout, unless the tier is down.
func (ts *tierState) call(ctx context.Context, f func(context.Context) error) error {
	probe, ok := ts.allow()
	if !ok {
		return errTierDown
	}
	cctx, cancel := context.WithTimeout(ctx, ts.timeout)
	err := f(cctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		// The caller left: no verdict on the tier.
		if probe {
			ts.mu.Lock()
			ts.probing = false
			ts.mu.Unlock()
		}
		return err
	}
	ts.record(probe, err)
	return err
}

// allow reports whether a call may go to the tier, and whether it is the
// probe of a tier that is down.
func (ts *tierState) allow() (probe, ok bool) {
	if !ts.down.Load() {
		return false, true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.down.Load() {
		return false, true
	}
	if ts.probing || ts.clock.Now().Before(ts.openUntil) {
		return false, false
	}
	ts.probing = true
	return true, true
}

func (ts *tierState) record(probe bool, err error) {
	if err != nil {
		ts.stats.errors.Add(1)
	}
	ts.mu.Lock()
	if err == nil {
		ts.failures = 0
		if !probe {
			pend := ts.pendingAll || len(ts.pending) > 0
			ts.mu.Unlock()
			if pend {
				_ = ts.flush() // a publish that failed earlier; the next call tries again
			}
			return
		}
		// The probe went through: publish what waited, then serve again.
		ts.mu.Unlock()
		perr := ts.flush()
		ts.mu.Lock()
		ts.probing = false
		if perr == nil {
			ts.down.Store(false)
			ts.downs = 0
			ts.stats.transitions.Add(1)
			ts.mu.Unlock()
			ts.log("sqlflight: shared tier is back", "namespace", ts.ns)
			return
		}
		err = perr
	}
	ts.failures++
	if probe || (!ts.down.Load() && ts.failures >= tierFailures) {
		was := ts.down.Load()
		ts.probing = false
		ts.downs++
		wait := min(tierBackoffMin<<min(ts.downs-1, 8), tierBackoffMax)
		ts.openUntil = ts.clock.Now().Add(wait)
		ts.down.Store(true)
		if !was {
			ts.stats.transitions.Add(1)
			ts.mu.Unlock()
			ts.log("sqlflight: shared tier unavailable; running on the in-process cache alone",
				"namespace", ts.ns, "error", err, "retry_in", wait)
			return
		}
	}
	ts.mu.Unlock()
}

// publish tells the fleet about a write, or remembers it for when the tier
// is back. Names are table keys (see tableKey).
func (ts *tierState) publish(tables []string, all bool) {
	inv := Invalidation{Tables: tables, All: all, Source: ts.source}
	err := ts.call(context.Background(), func(ctx context.Context) error {
		_, err := ts.t.Publish(ctx, ts.ns, inv)
		return err
	})
	if err == nil {
		ts.stats.published.Add(1)
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if all || len(ts.pending)+len(tables) > maxPending {
		ts.pendingAll = true
		clear(ts.pending)
		return
	}
	for _, t := range tables {
		ts.pending[t] = struct{}{}
	}
}

// flush publishes the invalidations that waited for the tier.
func (ts *tierState) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), ts.timeout)
	defer cancel()
	return ts.flushCtx(ctx)
}

func (ts *tierState) flushCtx(ctx context.Context) error {
	ts.mu.Lock()
	all := ts.pendingAll
	tables := make([]string, 0, len(ts.pending))
	for t := range ts.pending {
		tables = append(tables, t)
	}
	ts.mu.Unlock()
	if !all && len(tables) == 0 {
		return nil
	}
	inv := Invalidation{Tables: tables, All: all, Source: ts.source}
	if all {
		inv.Tables = nil
	}
	if _, err := ts.t.Publish(ctx, ts.ns, inv); err != nil {
		return err
	}
	ts.stats.published.Add(1)
	ts.mu.Lock()
	if all {
		ts.pendingAll = false
	}
	for _, t := range tables {
		delete(ts.pending, t)
	}
	ts.mu.Unlock()
	return nil
}

// blocked reports whether a write to one of tables (to any table, when not
// known) waits to be published: the shared tier may hold results older than
// it that it cannot yet tell apart, so such reads leave it alone.
func (ts *tierState) blocked(tables []string, known bool) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.pendingAll || (!known && len(ts.pending) > 0) {
		return true
	}
	for _, t := range tables {
		if _, ok := ts.pending[tableKey(t)]; ok {
			return true
		}
	}
	return false
}

// usable reports whether the tier may be called: it is up, or down but
// due for a probe.
func (ts *tierState) usable() bool {
	if !ts.down.Load() {
		return true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return !ts.probing && !ts.clock.Now().Before(ts.openUntil)
}

func (ts *tierState) state() string {
	if ts.down.Load() {
		return "down"
	}
	return "up"
}

// onInvalidation applies a write another instance published.
func (s *Shield) onInvalidation(inv Invalidation) {
	ts := s.tier
	switch {
	case inv.Resync:
		// Writes may have been missed: nothing in L1 can be trusted.
		ts.stats.resyncs.Add(1)
		s.epochs.bump(nil, false)
	case inv.Source == ts.source:
		// Our own write: the epochs moved when it was made.
	default:
		ts.stats.received.Add(1)
		s.epochs.bump(inv.Tables, !inv.All)
	}
}

// attachTier starts s's use of t: its subscription to other instances'
// writes.
func (s *Shield) attachTier(t SharedTier) {
	s.tier = newTierState(t, &s.opts, func(msg string, args ...any) { s.log.Warn(msg, args...) })
	stop, err := t.Subscribe(s.tier.ns, s.onInvalidation)
	if err != nil {
		// Without hearing other instances' writes, L1 could serve results
		// they made stale: the tier is not used at all.
		s.log.Error("sqlflight: shared tier disabled: cannot subscribe to invalidations", "error", err)
		s.tier = nil
		return
	}
	s.tier.stop = stop
}

// publishWrite tells the fleet about a write through s.
func (s *Shield) publishWrite(tables []string, known bool) {
	ts := s.tier
	if ts == nil {
		return
	}
	if !known {
		ts.publish(nil, true)
		return
	}
	keys := make([]string, 0, len(tables))
	for _, t := range tables {
		k := tableKey(t)
		dup := false
		for _, o := range keys {
			dup = dup || o == k
		}
		if !dup {
			keys = append(keys, k)
		}
	}
	ts.publish(keys, false)
}
