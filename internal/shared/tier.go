package shared

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// The tier's own types are the root package's (SharedValue, Lease,
// Invalidation, RowPins): a Tier takes them by their shape, so that it
// calls the Shield's tier as it is.

// Value is the shape of what the tier's Fetch returns (the root
// package's SharedValue).
type Value interface{ ~value }

// value is a Value's shape, whose fields can be read.
type value = struct {
	Data    []byte
	Version uint64
	Epochs  []uint64
	Seq     uint64
}

// Lease is the shape of a lease the tier hands out (the root package's
// Lease).
type Lease interface{ ~lease }

// lease is a Lease's shape, whose fields can be read.
type lease = struct {
	Held    bool
	Token   string
	Version uint64
}

// Message is the shape of an invalidation whose row writes are P (the
// root package's Invalidation).
type Message[P Pins] interface{ ~message[P] }

// message is a Message's shape, whose fields can be read.
type message[P Pins] = struct {
	Tables    []string
	Rows      []P
	All       bool
	Seq       uint64
	Source    string
	Tag       []byte
	Resync    bool
	Malformed bool
}

// Backend is the tier's interface (the root package's SharedTier) in its
// own types: invalidations M, values V and leases L.
type Backend[M, V, L any] interface {
	Fetch(ctx context.Context, ns, key string, tables []string) (V, error)
	Store(ctx context.Context, ns, key string, data []byte, version uint64, ttl time.Duration) (bool, error)
	Acquire(ctx context.Context, ns, key string, ttl time.Duration) (L, error)
	Release(ctx context.Context, ns, key string, lease L) error
	Renew(ctx context.Context, ns, key string, lease L, ttl time.Duration) (bool, error)
	NextSeq(ctx context.Context, ns string) (uint64, error)
	Publish(ctx context.Context, ns string, inv M) error
	Subscribe(ns string, fn func(M)) (stop func(), err error)
}

// Counters count what a Shield does with its tier; the calls' errors, the
// transitions and the invalidations published are counted by its State.
type Counters struct {
	Hits, Misses, Writes, Superseded, Leases, LeaseWaits, LeaseExpired atomic.Uint64
	DecodeErrors, Received, Resyncs                                    atomic.Uint64
	SkippedPending, Forged, Rejected                                   atomic.Uint64
}

// TierConfig is what NewTier needs of its Shield. Every field is required
// (the caller applies its defaults).
type TierConfig struct {
	NS       string        // the namespace (Options.KeyPrefix)
	Timeout  time.Duration // of every call (Options.RedisTimeout)
	LeaseTTL time.Duration // the longest a lease is taken for (Options.LeaseTTL)
	Clock    Clock
	// Ring seals what the tier holds; TrustMessages (the insecure mode)
	// acts on invalidations without checking their tags.
	Ring          *seal.Ring
	TrustMessages bool
	// Epochs are the Shield's, which the writes heard move.
	Epochs *epoch.Epochs
	// Down and Up are told of the tier going down and coming back (see
	// Config).
	Down func(err error, retryIn time.Duration)
	Up   func()
}

// Tier is a Shield's side of its shared tier T: the namespace, the
// timeouts, the breaker and the queue of invalidations waiting to be
// published (the embedded State), the keys, the floor, and the
// subscription that hears other instances' writes. P, M, V and L are the
// root package's RowPins, Invalidation, SharedValue and Lease. Make one
// with NewTier.
type Tier[P Pins, M Message[P], V Value, L Lease] struct {
	*State
	T  Backend[M, V, L]
	NS string
	// Ring authenticates what the tier holds; TrustMessages (the insecure
	// mode) acts on invalidations without checking their tags.
	Ring          *seal.Ring
	TrustMessages bool
	// Floor is the least version a value of a table must exceed: the
	// fleet epochs of the writes this instance saw (its own, authenticated
	// messages, epochs it read), which the tier cannot take back.
	Floor Floor
	Stats Counters

	timeout, leaseTTL time.Duration
	source            string // this Shield's instance id, in what it publishes
	epochs            *epoch.Epochs
	stop              func()
}

// NewTier returns the state of a Shield's use of t, up, not yet
// subscribed (Subscribe), under a fresh random instance id.
func NewTier[P Pins, M Message[P], V Value, L Lease](t Backend[M, V, L], c TierConfig) *Tier[P, M, V, L] {
	var id [8]byte
	_, _ = crand.Read(id[:])
	ts := &Tier[P, M, V, L]{T: t, NS: c.NS, Ring: c.Ring, TrustMessages: c.TrustMessages,
		timeout: c.Timeout, leaseTTL: c.LeaseTTL, source: hex.EncodeToString(id[:]), epochs: c.Epochs}
	ts.State = New(Config{
		Timeout: c.Timeout,
		Clock:   c.Clock,
		Flush: func(ctx context.Context, all bool, tables []string) error {
			return ts.send(ctx, all, tables, nil)
		},
		TableKey: epoch.TableKey,
		Down:     c.Down,
		Up:       c.Up,
	})
	return ts
}

// Subscribe starts hearing other instances' writes (Hear). Without them,
// the Shield's L1 could serve results they made stale: a Tier whose
// Subscribe fails is not to be used at all.
func (t *Tier[P, M, V, L]) Subscribe() error {
	stop, err := t.T.Subscribe(t.NS, t.Hear)
	t.stop = stop
	return err
}

// Close stops hearing other instances (idempotent) and the retries of the
// State; calls in flight end on their own timeouts.
func (t *Tier[P, M, V, L]) Close() {
	if t.stop != nil {
		t.stop()
	}
	t.State.Close()
}

// Hear applies a write another instance published. A message that did not
// parse, or whose MAC fails, is counted and ignored: it is not a write of
// the fleet, and treating it as one would let anybody who can publish on
// the channel empty every instance's L1.
func (t *Tier[P, M, V, L]) Hear(m M) {
	inv := message[P](m)
	switch {
	case inv.Resync:
		// Writes may have been missed: nothing in L1 can be trusted.
		t.epochs.Bump(nil, false)
		t.Stats.Resyncs.Add(1)
	case inv.Malformed ||
		!t.TrustMessages && !t.Ring.CheckMessageRows(inv.Tag, t.NS, inv.Seq, inv.All, inv.Source, inv.Tables, RowsFlat(inv.Rows)):
		t.Stats.Rejected.Add(1)
	case inv.Source == t.source:
		// Our own write: the epochs moved when it was made.
	default:
		// A row write past the bounds counts as a write to its table (one
		// whose table is past them, as a write to every table).
		all, tables, rows := Bound(inv.All, inv.Tables, inv.Rows)
		local := LocalRows(rows)
		t.Floor.RaiseRows(tables, all, local, inv.Seq)
		t.epochs.BumpRows(tables, !all, local)
		t.Stats.Received.Add(1) // once applied: a reader that sees the count sees the write
	}
}

// WriteKeys are the epoch keys a write marks in the tier (see EpochKeys):
// its tables and the tables of its row writes (nil: every table, when
// not known).
func WriteKeys(tables []string, known bool, rows []epoch.RowWrite) []string {
	all := tables
	if len(rows) > 0 {
		all = slices.Clone(tables)
		for _, rw := range rows {
			all = append(all, rw.Table)
		}
	}
	return EpochKeys(all, known)
}

// BeginWrite marks a write to tables (every table, when not known) and
// rows as not yet known to the tier (State.Begin of its WriteKeys), before
// the write's local epochs move: from then until PublishWrite, reads of
// them leave the tier alone.
func (t *Tier[P, M, V, L]) BeginWrite(tables []string, known bool, rows []epoch.RowWrite) {
	t.Begin(WriteKeys(tables, known, rows))
}

// PublishWrite tells the fleet about a write BeginWrite marked, or
// remembers its tables for when the tier is back (a write published late
// is published as a write to its tables as a whole), then ends the mark
// (State.Publish).
func (t *Tier[P, M, V, L]) PublishWrite(tables []string, known bool, rows []epoch.RowWrite) {
	keys := WriteKeys(tables, known, rows)
	t.Publish(keys, func(ctx context.Context) error {
		if keys == nil {
			return t.send(ctx, true, nil, nil)
		}
		return t.send(ctx, false, EpochKeys(tables, true), FleetRows[P](rows))
	})
}

// send publishes a write to tables as a whole (to every table, when all;
// too many tables, or a name too long, count as every table) and to the
// rows that rows pin (too many, or too long, count as writes to their
// tables): it takes the write's fleet sequence number first, so that the
// message's MAC covers it, then records and publishes it. The write's
// number becomes this instance's floor of what it wrote.
func (t *Tier[P, M, V, L]) send(ctx context.Context, all bool, tables []string, rows []P) error {
	all, tables, rows = Bound(all, tables, rows)
	seq, err := t.T.NextSeq(ctx, t.NS)
	if err != nil {
		return err
	}
	inv := message[P]{Tables: tables, Rows: rows, All: all, Seq: seq, Source: t.source}
	inv.Tag = t.Ring.MessageTagRows(t.NS, seq, inv.All, inv.Source, inv.Tables, RowsFlat(inv.Rows))
	// Raised first: from now on, no value older than the write is taken,
	// whatever the tier says of its epochs.
	t.Floor.RaiseRows(tables, all, LocalRows(rows), seq)
	return t.T.Publish(ctx, t.NS, M(inv))
}

// ReadKey is the tier key (Key) of a read keyed key of known tables, by a
// scope of fleet-wide name fleet, or "" when the read leaves the tier
// alone: the tier may not be called (State.Usable), or a write to one of
// tables waits to be published and cannot be now (counted as
// Stats.SkippedPending).
func (t *Tier[P, M, V, L]) ReadKey(fleet, key string, tables []string) string {
	if !t.Usable() {
		return ""
	}
	if t.Blocked(tables, true) {
		// Try to publish it now; until then, leave the tier alone.
		if t.Call(context.Background(), t.Flush) != nil || t.Blocked(tables, true) {
			t.Stats.SkippedPending.Add(1)
			return ""
		}
	}
	return Key(fleet, key)
}

// Fetch returns the value under key of a read of tables (of the rows rows
// pin, for a read tagged by its rows; rows may be nil) and its version, if
// it is usable: newer than every write the tier reports for its epoch
// names (EpochNames) and every write this instance knows of (Floor,
// which what the tier reports raises), of a version the fleet handed out,
// and one Open reads within lim. The version is 0 when there is no usable
// value; the error is the tier's. A value that cannot be opened is counted
// (Stats.DecodeErrors, and Stats.Forged for seal.ErrForged) and its error
// told to bad.
func (t *Tier[P, M, V, L]) Fetch(ctx context.Context, key string, tables []string, rows *epoch.RowDeps, lim wire.Limits, bad func(error)) (Entry, uint64, error) {
	// A read tagged by its rows checks the epochs of those rows, not its
	// table's: the coarse epoch, its pin sets' and its tags'.
	names := EpochNames(tables, rows)
	tv, err := CallFor(t.State, ctx, func(ctx context.Context) (V, error) { return t.T.Fetch(ctx, t.NS, key, names) })
	if err != nil {
		return Entry{}, 0, err
	}
	v := value(tv)
	if v.Data == nil {
		return Entry{}, 0, nil
	}
	if len(v.Epochs) != len(names)+1 {
		t.Stats.DecodeErrors.Add(1)
		return Entry{}, 0, nil
	}
	// What the tier says of the writes raises what this instance knows;
	// what it no longer says (an epoch deleted or lowered) changes nothing.
	t.Floor.Learn(names, v.Epochs, v.Seq)
	for _, ep := range v.Epochs {
		if ep >= v.Version {
			return Entry{}, 0, nil // computed before a write the fleet was told of
		}
	}
	if !t.Floor.AdmitsRows(v.Version, tables, rows) {
		return Entry{}, 0, nil // computed before a write this instance knows of
	}
	if v.Seq > 0 && v.Version > v.Seq {
		// A version no Acquire handed out (one that would outlive every
		// write): not the fleet's.
		t.Stats.DecodeErrors.Add(1)
		t.Stats.Forged.Add(1)
		return Entry{}, 0, nil
	}
	e, err := Open(t.Ring, t.NS, key, v.Data, v.Version, lim)
	if err != nil {
		t.Stats.DecodeErrors.Add(1)
		if errors.Is(err, seal.ErrForged) {
			t.Stats.Forged.Add(1)
		}
		bad(err)
		return Entry{}, 0, nil
	}
	return e, v.Version, nil
}

// Store writes e, sealed, under key with version (its lease's: a slower
// former holder cannot overwrite it) for ttl, and counts whether it wrote
// (Stats.Writes) or the tier held a newer version (Stats.Superseded). An
// entry that does not encode, or whose ttl is over, is not written.
func (t *Tier[P, M, V, L]) Store(key string, e Entry, version uint64, ttl time.Duration) {
	data, err := Encode(e)
	if err != nil || ttl <= 0 {
		return
	}
	data = t.Ring.SealValue(data, t.NS, key, version)
	if wrote, err := CallFor(t.State, context.Background(), func(ctx context.Context) (bool, error) {
		return t.T.Store(ctx, t.NS, key, data, version, ttl)
	}); err == nil {
		if wrote {
			t.Stats.Writes.Add(1)
		} else {
			t.Stats.Superseded.Add(1)
		}
	}
}

// LeaseFor is the TTL of the lease of a read whose origin query has
// timeout (def when 0 or less): that, at most TierConfig.LeaseTTL.
func (t *Tier[P, M, V, L]) LeaseFor(timeout, def time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = def
	}
	return min(timeout, t.leaseTTL)
}

// Acquire tries to take the lease on key for ttl; it reports whether it
// did (counted as Stats.Leases), and puts the lease into *held. *version
// is the version the lease came with; if the tier failed (the error), it
// is left as it was (the one an earlier attempt of the same read came
// with, or 0). (Any version taken before the read's origin query runs may
// carry its result: an older one can only be superseded.)
func (t *Tier[P, M, V, L]) Acquire(ctx context.Context, key string, ttl time.Duration, version *uint64, held *L) (bool, error) {
	tl, err := CallFor(t.State, ctx, func(ctx context.Context) (L, error) { return t.T.Acquire(ctx, t.NS, key, ttl) })
	if err != nil {
		return false, err
	}
	l := lease(tl)
	*version = l.Version
	if l.Held {
		t.Stats.Leases.Add(1)
		*held = tl
	}
	return l.Held, nil
}

// Release gives *held, the lease on key, back if it is held, and clears
// it; a nil Tier holds no lease and does nothing. It is best effort and
// goes to the tier even while its breaker is open: a lease left behind
// makes other instances wait until it expires.
func (t *Tier[P, M, V, L]) Release(key string, held *L) {
	if !lease(*held).Held {
		return
	}
	l := *held
	var none L
	*held = none
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	defer func() { _ = recover() }() // a panicking tier is not the caller's problem
	_ = t.T.Release(ctx, t.NS, key, l)
}

// Lead is the tier's step of a flight's leader before it queries, for the
// read of key whose lease lasts ttl and whose policy waits at most wait (0:
// no bound of its own). It looks for a usable value (look, which reports
// whether it found one, or the tier's error); otherwise it tries to take
// the key's lease (Acquire, into *version and *held). It reports true if
// look found the value the flight is answered with (a lease taken on the
// way is released); false when the leader goes on to query, holding the
// lease if it got it. A loser polls the tier (jittered, growing
// intervals) and tries the lease again each time, at most until wait,
// ttl (the holder may have died) or half of what is left of ctx's
// deadline (leaving it time to query), whichever comes first; one who
// gave up after waiting, because that time was over while ctx was not, is
// counted as Stats.LeaseExpired.
func (t *Tier[P, M, V, L]) Lead(ctx context.Context, key string, ttl, wait time.Duration, version *uint64, held *L, look func(context.Context) (bool, error)) bool {
	limit := ttl
	if wait > 0 {
		limit = min(limit, wait)
	}
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl)/2)
	}
	// Every call below is bounded by what is left of limit (each takes at
	// most half of it), so the whole step is.
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	pause := 2 * time.Millisecond
	// gaveUp counts a wait for another instance's holder that ran out
	// (wherever the bound struck: in a look, a lease attempt or a pause).
	// The bound strikes as lctx's end or as a call cut short to leave the
	// caller time (ErrSlow), whichever the scheduler shows first.
	gaveUp := func(waited bool, err error) bool {
		if waited && ctx.Err() == nil && (lctx.Err() != nil || errors.Is(err, ErrSlow)) {
			t.Stats.LeaseExpired.Add(1)
		}
		return false
	}
	for waited := false; ; waited = true {
		found, err := look(lctx)
		if err != nil || lctx.Err() != nil {
			return gaveUp(waited, err)
		}
		if found {
			return true
		}
		if !waited {
			t.Stats.Misses.Add(1)
		}
		got, err := t.Acquire(lctx, key, ttl, version, held)
		if got {
			// The holder before may have stored and released between our
			// look and our lease: look once more before querying.
			if found, err := look(lctx); err == nil && found {
				t.Release(key, held)
				return true
			}
			return false
		}
		if err != nil || lctx.Err() != nil {
			return gaveUp(waited, err) // the tier failed, or no time is left
		}
		if !waited {
			t.Stats.LeaseWaits.Add(1)
		}
		// Another instance queries: look again a little later.
		d := pause/2 + rand.N(pause)
		pause = min(pause*2, 40*time.Millisecond)
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-lctx.Done():
			tm.Stop()
			return gaveUp(true, nil)
		}
	}
}
