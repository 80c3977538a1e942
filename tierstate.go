package sqlflight

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/seal"
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
	// Writes not yet known to the tier: being published (inflight) or
	// whose publish failed (pending, by the generation of the latest such
	// write, so that a flush forgets only what it published). "*" stands
	// for every table.
	inflight map[string]int
	pending  map[string]uint64
	gen      uint64
	flushing atomic.Bool    // a background flush runs
	retry    *time.Timer    // the next retry of a flush, while some wait
	closed   atomic.Bool    // the Shield was closed: no more background work
	bg       sync.WaitGroup // background flushes

	stop func()

	// ring authenticates what the tier holds; trustMessages (the insecure
	// mode) acts on invalidations without checking their tags.
	ring          *seal.Ring
	trustMessages bool
	// floor is the least version a value of a table must exceed: the fleet
	// epochs of the writes this instance saw (its own, authenticated
	// messages, epochs it read), which Redis cannot take back.
	floor fleetFloor

	stats tierCounters
}

type tierCounters struct {
	hits, misses, writes, superseded, leases, leaseWaits, leaseExpired atomic.Uint64
	errors, decodeErrors, published, received, resyncs, transitions    atomic.Uint64
	skippedPending, forged, rejected                                   atomic.Uint64
}

const (
	tierFailures   = 3 // failures in a row that take the tier down
	tierBackoffMin = 200 * time.Millisecond
	tierBackoffMax = 2 * time.Second
	maxPending     = 1024 // tables remembered for publishing; beyond, "all"
	// An invalidation names at most maxMessageTables tables, each at most
	// maxTableName bytes long and maxMessageNames together: a write to
	// more, or to longer names, is published (and, received, applied) as a
	// write to every table.
	maxMessageTables = 256
	maxTableName     = 255
	// maxMessageNames bounds the bytes of an invalidation's names together,
	// so that its message, whatever the bus's quoting (up to four bytes a
	// byte), stays within what a subscriber reads (redistier: 64 KiB).
	maxMessageNames = 8 << 10
	// maxFloorTables bounds the tables whose fleet epochs an instance
	// remembers; past it, one floor for every table.
	maxFloorTables = 4096
	// flushRetryInterval is how often invalidations that could not be
	// published are tried again.
	flushRetryInterval = 500 * time.Millisecond
)

// tierRing returns the keys of o's secrets, or an error wrapping
// ErrNoSharedSecret (it never holds a secret). Without a secret and with
// InsecureTrustSharedTier, values are sealed under a key everybody knows
// (it detects corruption, not forgery) and messages are not checked.
func tierRing(o *Options) (ring *seal.Ring, trustMessages bool, err error) {
	switch {
	case o.SharedSecret == "" && o.InsecureTrustSharedTier:
		if o.SharedEncrypt {
			return nil, false, fmt.Errorf("%w: SharedEncrypt needs one", ErrNoSharedSecret)
		}
		return &seal.Ring{Current: insecureKeys}, true, nil
	case o.SharedSecret == "":
		return nil, false, fmt.Errorf("%w; set InsecureTrustSharedTier (sqlflight.insecure_trust_shared_tier=true) only if nobody else can write to the tier", ErrNoSharedSecret)
	case len(o.SharedSecret) < MinSharedSecret:
		return nil, false, fmt.Errorf("%w: SharedSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	case o.SharedPreviousSecret != "" && len(o.SharedPreviousSecret) < MinSharedSecret:
		return nil, false, fmt.Errorf("%w: SharedPreviousSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	}
	ring = &seal.Ring{Current: seal.Derive([]byte(o.SharedSecret)), Encrypt: o.SharedEncrypt}
	if o.SharedPreviousSecret != "" && o.SharedPreviousSecret != o.SharedSecret {
		ring.Previous = seal.Derive([]byte(o.SharedPreviousSecret))
	}
	return ring, false, nil
}

// insecureKeys seal the values of a tier trusted without a secret.
var insecureKeys = seal.Derive([]byte("sqlflight: no secret, the tier is trusted"))

func newTierState(t SharedTier, o *Options, ring *seal.Ring, logWarn func(string, ...any)) *tierState {
	var id [8]byte
	_, _ = rand.Read(id[:])
	ts := &tierState{t: t, ns: o.KeyPrefix, timeout: o.RedisTimeout, leaseTTL: o.LeaseTTL,
		source: hex.EncodeToString(id[:]), clock: o.Clock, log: logWarn, ring: ring,
		inflight: map[string]int{}, pending: map[string]uint64{}}
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

// call runs f on the tier unless the tier is down, and returns within
// Options.RedisTimeout even if f does not honour its context (f then goes
// on in its goroutine and its late answer is dropped). The verdict on the
// tier is the whole call's, whether or not its caller still waits: a caller
// whose deadline is near waits at most half of what is left of it (then
// gets errTierSlow, so that it has time to query the database), while the
// call runs on to its own timeout and tells the breaker how it went. A
// panic in the tier is an error of the tier.
func (ts *tierState) call(ctx context.Context, f func(context.Context) error) error {
	probe, ok := ts.allow()
	if !ok {
		return errTierDown
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ts.timeout)
	var once sync.Once
	verdict := func(err error) { once.Do(func() { ts.record(probe, err) }) }
	timedOut := fmt.Errorf("%w: the shared tier did not answer within %v", context.DeadlineExceeded, ts.timeout)
	stop := context.AfterFunc(cctx, func() { verdict(timedOut) })
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("sqlflight: shared tier panicked: %v", r)
			}
			if stop() { // answered before the timeout
				verdict(err)
			}
			done <- err
			cancel()
		}()
		err = f(cctx)
	}()
	var capped <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		if half := time.Until(dl) / 2; half < ts.timeout {
			t := time.NewTimer(max(half, 0))
			defer t.Stop()
			capped = t.C
		}
	}
	select {
	case err := <-done:
		return err
	case <-cctx.Done():
		select {
		case err := <-done:
			return err
		default:
		}
		verdict(timedOut)
		return timedOut
	case <-capped:
		return errTierSlow
	}
}

// errTierSlow is what a call returns to a caller who could not wait for it.
var errTierSlow = errors.New("sqlflight: the shared tier is slower than the caller's deadline allows")

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

// record tells the breaker how a call went.
func (ts *tierState) record(probe bool, err error) {
	if err != nil {
		ts.stats.errors.Add(1)
	}
	ts.mu.Lock()
	if err == nil {
		ts.failures = 0
		pend := len(ts.pending) > 0
		back := probe && ts.down.Load()
		if probe {
			ts.probing = false
		}
		if back {
			ts.down.Store(false)
			ts.downs = 0
			ts.stats.transitions.Add(1)
		}
		ts.mu.Unlock()
		if back {
			ts.log("sqlflight: shared tier is back", "namespace", ts.ns)
		}
		if pend {
			ts.kick() // publish what waited (this process's reads of it leave the tier alone meanwhile)
		}
		return
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
				"namespace", ts.ns, errAttr(err), "retry_in", wait)
			return
		}
	}
	ts.mu.Unlock()
}

// kick publishes the invalidations that wait, in the background, once at a
// time.
func (ts *tierState) kick() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed.Load() || !ts.flushing.CompareAndSwap(false, true) {
		return
	}
	ts.bg.Add(1) // under mu, which close takes to set closed
	go func() {
		defer ts.bg.Done()
		defer ts.flushing.Store(false)
		_ = ts.call(context.Background(), ts.flushCtx)
	}()
}

// retryLater makes sure that invalidations waiting for the tier are tried
// again even if this process makes no other call to it: every
// flushRetryInterval until none waits.
func (ts *tierState) retryLater() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.retry != nil || ts.closed.Load() {
		return
	}
	ts.retry = time.AfterFunc(flushRetryInterval, func() {
		ts.mu.Lock()
		ts.retry = nil
		pend := len(ts.pending) > 0
		ts.mu.Unlock()
		if !pend || ts.closed.Load() {
			return
		}
		if ts.usable() {
			ts.kick()
		}
		ts.retryLater()
	})
}

// close stops the retries; calls in flight end on their own timeouts.
func (ts *tierState) close() {
	ts.mu.Lock()
	ts.closed.Store(true)
	if ts.retry != nil {
		ts.retry.Stop()
		ts.retry = nil
	}
	ts.mu.Unlock()
	ts.bg.Wait()
}

// begin marks a write's tables (nil: every table) as not yet known to the
// tier, before the write's local epochs move: from then until end, reads of
// them leave the tier alone (it may hold results older than the write that
// it cannot yet tell apart).
func (ts *tierState) begin(tables []string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tables == nil {
		ts.inflight["*"]++
		return
	}
	for _, t := range tables {
		ts.inflight[t]++
	}
}

// publish tells the fleet about a write marked by begin, or remembers it
// for when the tier is back, then ends the mark.
func (ts *tierState) publish(tables []string) {
	err := ts.call(context.Background(), func(ctx context.Context) error {
		return ts.send(ctx, tables)
	})
	if err != nil {
		defer ts.retryLater() // runs after the deferred Unlock below
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err == nil {
		ts.stats.published.Add(1)
	} else {
		ts.gen++
		if tables == nil || len(ts.pending)+len(tables) > maxPending {
			clear(ts.pending)
			ts.pending["*"] = ts.gen
		} else {
			for _, t := range tables {
				ts.pending[t] = ts.gen
			}
		}
	}
	if tables == nil {
		tables = []string{"*"}
	}
	for _, t := range tables {
		if ts.inflight[t]--; ts.inflight[t] <= 0 {
			delete(ts.inflight, t)
		}
	}
}

// flushCtx publishes the invalidations that waited for the tier.
func (ts *tierState) flushCtx(ctx context.Context) error {
	ts.mu.Lock()
	sent := maps.Clone(ts.pending)
	ts.mu.Unlock()
	if len(sent) == 0 {
		return nil
	}
	var tables []string // nil: every table
	if _, all := sent["*"]; !all {
		tables = slices.Sorted(maps.Keys(sent))
	}
	if err := ts.send(ctx, tables); err != nil {
		return err
	}
	ts.stats.published.Add(1)
	ts.mu.Lock()
	for t, g := range sent {
		if ts.pending[t] == g { // not failed again since
			delete(ts.pending, t)
		}
	}
	ts.mu.Unlock()
	return nil
}

// send publishes a write to tables (nil: every table; too many, or a name
// too long, count as every table): it takes the write's fleet sequence
// number first, so that the message's MAC covers it, then records and
// publishes it. The write's number becomes this instance's floor of its
// tables.
func (ts *tierState) send(ctx context.Context, tables []string) error {
	if !boundedTables(tables) {
		tables = nil
	}
	seq, err := ts.t.NextSeq(ctx, ts.ns)
	if err != nil {
		return err
	}
	inv := Invalidation{Tables: tables, All: tables == nil, Seq: seq, Source: ts.source}
	inv.Tag = ts.ring.MessageTag(ts.ns, seq, inv.All, inv.Source, inv.Tables)
	// Raised first: from now on, no value older than the write is taken,
	// whatever Redis says of its epochs.
	ts.floor.raise(tables, inv.All, seq)
	return ts.t.Publish(ctx, ts.ns, inv)
}

// boundedTables reports whether an invalidation may name tables one by one.
func boundedTables(tables []string) bool {
	if len(tables) > maxMessageTables {
		return false
	}
	n := 0
	for _, t := range tables {
		if len(t) > maxTableName {
			return false
		}
		n += len(t)
	}
	return n <= maxMessageNames
}

// fleetFloor keeps, per table, the highest fleet epoch this instance knows
// of, in bounded memory: past maxFloorTables tables it keeps one floor for
// every table (the highest it knew), which refuses more values than
// needed, never fewer.
type fleetFloor struct {
	mu     sync.RWMutex
	all    uint64
	tables map[string]uint64
}

// raise records a write of fleet sequence seq to tables (every table when
// all).
func (f *fleetFloor) raise(tables []string, all bool, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if all {
		f.all = max(f.all, seq)
		return
	}
	if f.tables == nil {
		f.tables = make(map[string]uint64)
	}
	for _, t := range tables {
		k := tableKey(t)
		if f.tables[k] >= seq || f.all >= seq {
			continue
		}
		if _, ok := f.tables[k]; !ok && len(f.tables) >= maxFloorTables {
			for _, v := range f.tables {
				f.all = max(f.all, v)
			}
			f.all = max(f.all, seq)
			clear(f.tables)
			return
		}
		f.tables[k] = seq
	}
}

// learn raises the floors of tables (epoch keys) to the epochs a Fetch
// reported for them (epochs[len(tables)]: every table's), when they are
// within the fleet sequence seq (0: not known).
func (f *fleetFloor) learn(tables []string, epochs []uint64, seq uint64) {
	f.mu.RLock()
	higher := false
	for i, ep := range epochs {
		if ep <= f.all || (seq > 0 && ep > seq) {
			continue
		}
		if i < len(tables) && f.tables[tables[i]] >= ep {
			continue
		}
		higher = true
		break
	}
	f.mu.RUnlock()
	if !higher {
		return
	}
	for i, ep := range epochs {
		if ep == 0 || (seq > 0 && ep > seq) {
			continue
		}
		if i < len(tables) {
			f.raise(tables[i:i+1], false, ep)
		} else {
			f.raise(nil, true, ep)
		}
	}
}

// admits reports whether a value of version may be newer than every write
// to tables (epoch keys) this instance knows of.
func (f *fleetFloor) admits(version uint64, tables []string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if version <= f.all {
		return false
	}
	for _, t := range tables {
		if version <= f.tables[t] {
			return false
		}
	}
	return true
}

// blocked reports whether a write to one of tables (to any table, when not
// known) is not yet known to the tier.
func (ts *tierState) blocked(tables []string, known bool) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.pending) == 0 && len(ts.inflight) == 0 {
		return false
	}
	if !known || ts.pending["*"] > 0 || ts.inflight["*"] > 0 {
		return true
	}
	for _, t := range tables {
		k := tableKey(t)
		if ts.pending[k] > 0 || ts.inflight[k] > 0 {
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

// onInvalidation applies a write another instance published. A message
// that did not parse, or whose MAC fails, is counted and ignored: it is
// not a write of the fleet, and treating it as one would let anybody who
// can publish on the channel empty every instance's L1.
func (s *Shield) onInvalidation(inv Invalidation) {
	ts := s.tier
	switch {
	case inv.Resync:
		// Writes may have been missed: nothing in L1 can be trusted.
		ts.stats.resyncs.Add(1)
		s.epochs.bump(nil, false)
	case inv.Malformed ||
		!ts.trustMessages && !ts.ring.CheckMessage(inv.Tag, ts.ns, inv.Seq, inv.All, inv.Source, inv.Tables):
		ts.stats.rejected.Add(1)
	case inv.Source == ts.source:
		// Our own write: the epochs moved when it was made.
	default:
		ts.stats.received.Add(1)
		all := inv.All || !boundedTables(inv.Tables)
		tables := inv.Tables
		if all {
			tables = nil
		}
		ts.floor.raise(tables, all, inv.Seq)
		s.epochs.bump(tables, !all)
	}
}

// attachTier starts s's use of t: its subscription to other instances'
// writes. Without a usable secret it sets s.tierErr instead, and every
// connection of s fails with it.
func (s *Shield) attachTier(t SharedTier) {
	ring, trust, err := tierRing(&s.opts)
	if err != nil {
		s.tierErr = err
		return
	}
	s.tier = newTierState(t, &s.opts, ring, func(msg string, args ...any) { s.log.Warn(msg, args...) })
	s.tier.trustMessages = trust
	stop, err := t.Subscribe(s.tier.ns, s.onInvalidation)
	if err != nil {
		// Without hearing other instances' writes, L1 could serve results
		// they made stale: the tier is not used at all.
		s.log.Error("sqlflight: shared tier disabled: cannot subscribe to invalidations", errAttr(err))
		s.tier = nil
		return
	}
	s.tier.stop = stop
}

// epochKeys returns the distinct epoch names of tables (nil when not known:
// every table).
func epochKeys(tables []string, known bool) []string {
	if !known {
		return nil
	}
	keys := make([]string, 0, len(tables))
	for _, t := range tables {
		if k := tableKey(t); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}
