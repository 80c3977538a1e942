package sqlflight

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
)

// tierState is a Shield's side of its shared tier: the namespace, the
// timeouts, the breaker and the queue of invalidations waiting to be
// published (package shared, whose door says when the tier is used, when
// it is down and what is never lost), and the subscription that hears
// other instances' writes.
type tierState struct {
	t        SharedTier
	ns       string
	timeout  time.Duration
	leaseTTL time.Duration
	source   string // this Shield's instance id, in what it publishes
	st       *shared.State

	stop func()

	// ring authenticates what the tier holds; trustMessages (the insecure
	// mode) acts on invalidations without checking their tags.
	ring          *seal.Ring
	trustMessages bool
	// floor is the least version a value of a table must exceed: the fleet
	// epochs of the writes this instance saw (its own, authenticated
	// messages, epochs it read), which Redis cannot take back.
	floor shared.Floor

	stats tierCounters
}

// tierCounters count what the Shield does with its tier; the calls'
// errors, the transitions and the invalidations published are counted by
// the tier's shared.State.
type tierCounters struct {
	hits, misses, writes, superseded, leases, leaseWaits, leaseExpired atomic.Uint64
	decodeErrors, received, resyncs                                    atomic.Uint64
	skippedPending, forged, rejected                                   atomic.Uint64
}

// tierRing returns the keys of o's secrets (shared.NewRing), or an error
// wrapping ErrNoSharedSecret (it never holds a secret). Without a secret and with
// InsecureTrustSharedTier, values are sealed under a key everybody knows
// (it detects corruption, not forgery) and messages are not checked.
func tierRing(o *Options) (ring *seal.Ring, trustMessages bool, err error) {
	switch {
	case o.SharedSecret == "" && o.InsecureTrustSharedTier:
		if o.SharedEncrypt {
			return nil, false, fmt.Errorf("%w: SharedEncrypt needs one", ErrNoSharedSecret)
		}
		return shared.InsecureRing(), true, nil
	case o.SharedSecret == "":
		return nil, false, fmt.Errorf("%w; set InsecureTrustSharedTier (sqlflight.insecure_trust_shared_tier=true) only if nobody else can write to the tier", ErrNoSharedSecret)
	case len(o.SharedSecret) < MinSharedSecret:
		return nil, false, fmt.Errorf("%w: SharedSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	case o.SharedPreviousSecret != "" && len(o.SharedPreviousSecret) < MinSharedSecret:
		return nil, false, fmt.Errorf("%w: SharedPreviousSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	}
	return shared.NewRing(o.SharedSecret, o.SharedPreviousSecret, o.SharedEncrypt), false, nil
}

// newTierState returns the state of a Shield's use of t, up, with the
// keys of ring and o's namespace and timeouts; logWarn tells of the tier
// going down and coming back.
func newTierState(t SharedTier, o *Options, ring *seal.Ring, logWarn func(string, ...any)) *tierState {
	var id [8]byte
	_, _ = rand.Read(id[:])
	ts := &tierState{t: t, ns: o.KeyPrefix, timeout: o.RedisTimeout, leaseTTL: o.LeaseTTL,
		source: hex.EncodeToString(id[:]), ring: ring}
	if ts.ns == "" {
		ts.ns = DefaultKeyPrefix
	}
	if ts.timeout <= 0 {
		ts.timeout = DefaultRedisTimeout
	}
	if ts.leaseTTL <= 0 {
		ts.leaseTTL = DefaultLeaseTTL
	}
	ts.st = shared.New(shared.Config{
		Timeout: ts.timeout,
		Clock:   o.Clock,
		Flush: func(ctx context.Context, all bool, tables []string) error {
			return ts.send(ctx, all, tables, nil)
		},
		TableKey: tableKey,
		Down: func(err error, retryIn time.Duration) {
			logWarn("sqlflight: shared tier unavailable; running on the in-process cache alone",
				"namespace", ts.ns, errText.Attr(err), "retry_in", retryIn)
		},
		Up: func() { logWarn("sqlflight: shared tier is back", "namespace", ts.ns) },
	})
	return ts
}

// call runs f on the tier unless the tier is down (then it returns
// shared.ErrDown), within Options.RedisTimeout, and tells the breaker how
// it went: see shared.State.Call (a caller whose deadline is near gets
// errTierSlow instead of waiting).
func (ts *tierState) call(ctx context.Context, f func(context.Context) error) error {
	return ts.st.Call(ctx, f)
}

// errTierSlow is what a call returns to a caller who could not wait for it.
var errTierSlow = shared.ErrSlow

// close stops the retries; calls in flight end on their own timeouts.
func (ts *tierState) close() { ts.st.Close() }

// begin marks a write's tables (nil: every table) as not yet known to the
// tier, before the write's local epochs move: from then until publish,
// reads of them leave the tier alone (it may hold results older than the
// write that it cannot yet tell apart).
func (ts *tierState) begin(tables []string) { ts.st.Begin(tables) }

// publish tells the fleet about w, a write whose tables begin marked
// (nil: every table), or remembers its tables for when the tier is back (a
// write published late is published as a write to its tables as a whole),
// then ends the mark.
func (ts *tierState) publish(tables []string, w write) {
	ts.st.Publish(tables, func(ctx context.Context) error {
		if tables == nil {
			return ts.send(ctx, true, nil, nil)
		}
		return ts.send(ctx, false, shared.EpochKeys(w.tables, true), shared.FleetRows[RowPins](w.rows))
	})
}

// flushCtx publishes the invalidations that waited for the tier.
func (ts *tierState) flushCtx(ctx context.Context) error { return ts.st.Flush(ctx) }

// send publishes a write to tables as a whole (to every table, when all;
// too many tables, or a name too long, count as every table) and to the
// rows that rows pin (too many, or too long, count as writes to their
// tables): it takes the write's fleet sequence number first, so that the
// message's MAC covers it, then records and publishes it. The write's
// number becomes this instance's floor of what it wrote.
func (ts *tierState) send(ctx context.Context, all bool, tables []string, rows []RowPins) error {
	all, tables, rows = shared.Bound(all, tables, rows)
	seq, err := ts.t.NextSeq(ctx, ts.ns)
	if err != nil {
		return err
	}
	inv := Invalidation{Tables: tables, Rows: rows, All: all, Seq: seq, Source: ts.source}
	inv.Tag = ts.ring.MessageTagRows(ts.ns, seq, inv.All, inv.Source, inv.Tables, shared.RowsFlat(inv.Rows))
	// Raised first: from now on, no value older than the write is taken,
	// whatever Redis says of its epochs.
	ts.floor.RaiseRows(tables, all, shared.LocalRows(rows), seq)
	return ts.t.Publish(ctx, ts.ns, inv)
}

// blocked reports whether a write to one of tables (to any table, when not
// known) is not yet known to the tier.
func (ts *tierState) blocked(tables []string, known bool) bool { return ts.st.Blocked(tables, known) }

// usable reports whether the tier may be called: it is up, or down but
// due for a probe.
func (ts *tierState) usable() bool { return ts.st.Usable() }

// state is the tier's Stats.SharedState: "up" or "down".
func (ts *tierState) state() string { return ts.st.Status() }

// onInvalidation applies a write another instance published. A message
// that did not parse, or whose MAC fails, is counted and ignored: it is
// not a write of the fleet, and treating it as one would let anybody who
// can publish on the channel empty every instance's L1.
func (s *Shield) onInvalidation(inv Invalidation) {
	ts := s.tier
	switch {
	case inv.Resync:
		// Writes may have been missed: nothing in L1 can be trusted.
		s.epochs.Bump(nil, false)
		ts.stats.resyncs.Add(1)
	case inv.Malformed ||
		!ts.trustMessages && !ts.ring.CheckMessageRows(inv.Tag, ts.ns, inv.Seq, inv.All, inv.Source, inv.Tables, shared.RowsFlat(inv.Rows)):
		ts.stats.rejected.Add(1)
	case inv.Source == ts.source:
		// Our own write: the epochs moved when it was made.
	default:
		// A row write past the bounds counts as a write to its table (one
		// whose table is past them, as a write to every table).
		all, tables, rows := shared.Bound(inv.All, inv.Tables, inv.Rows)
		local := shared.LocalRows(rows)
		ts.floor.RaiseRows(tables, all, local, inv.Seq)
		s.epochs.BumpRows(tables, !all, local)
		ts.stats.received.Add(1) // once applied: a reader that sees the count sees the write
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
		s.log.Error("sqlflight: shared tier disabled: cannot subscribe to invalidations", errText.Attr(err))
		s.tier = nil
		return
	}
	s.tier.stop = stop
}

// epochKeys returns the distinct epoch names of tables (nil when not known:
// every table): see shared.EpochKeys.
func epochKeys(tables []string, known bool) []string { return shared.EpochKeys(tables, known) }
