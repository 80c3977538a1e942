package sqlflight

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/sqlflight/sqlflight/internal/fresh"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// The life of a read with a shared tier (L2), on an L1 miss: the leader of
// the process's flight fetches the key from L2. A usable value (fresh or
// stale, newer than every write published to its tables) fills L1 and is
// the flight's result. Otherwise it tries to take the key's lease: the
// holder runs the origin query, writes L2 with the version its lease came
// with, and releases the lease; a loser polls L2 (jittered, growing
// intervals) and tries the lease again each time, up to the policy's wait,
// then queries through the guard like any leader. A background refresh of a
// stale L1 entry first looks for a newer value in L2, then refreshes only
// if it gets the lease (otherwise another instance is refreshing: it looks
// again a little later). Any tier error makes the read go on as if there
// were no tier.

// errLeasedElsewhere ends a background refresh whose key another instance
// is refreshing.
var errLeasedElsewhere = errors.New("sqlflight: another instance refreshes this key")

// sharedKey is the L2 key of a read (shared.Key): a digest of the scope's
// fleet-wide name and the read's key without the process's scope number.
// Reads of scopes without a fleet-wide name, of unknown tables, or of
// tables whose invalidation waits to be published do not use L2. (A read of
// no table at all is invalidated by writes to unknown tables alone, as in
// L1.)
func (s *Shield) sharedKey(rd *read) string {
	ts := s.tier
	if ts == nil || !rd.c.sc.sharing() || !rd.known || !ts.usable() {
		return ""
	}
	if ts.blocked(rd.tables, rd.known) {
		// Try to publish it now; until then, leave the tier alone.
		if ts.call(context.Background(), ts.flushCtx) != nil || ts.blocked(rd.tables, rd.known) {
			ts.stats.skippedPending.Add(1)
			return ""
		}
	}
	return shared.Key(rd.c.sc.shared, rd.key[8:]) // the key after the process's scope number
}

// fetchShared returns the L2 value of rd if it is usable now: decodable,
// newer than every write published to its tables (to the rows it depends
// on, for a read tagged by its rows), and not expired by rd's
// own policy (its fill time plus rd's hard, within the value's life). It returns the entry for L1 (not yet stored) and the value's
// version (0 when there is no usable value).
func (s *Shield) fetchShared(ctx context.Context, rd *read, seq uint64) (*entry, error) {
	ts := s.tier
	// A read tagged by its rows checks the epochs of those rows, not its
	// table's: the coarse epoch, its pin sets' and its tags'.
	tables := shared.EpochNames(rd.tables, rd.rows)
	var v SharedValue
	err := ts.call(ctx, func(ctx context.Context) error {
		var err error
		v, err = ts.t.Fetch(ctx, ts.ns, rd.l2, tables)
		return err
	})
	if err != nil || v.Data == nil {
		return nil, err
	}
	if len(v.Epochs) != len(tables)+1 {
		ts.stats.decodeErrors.Add(1)
		return nil, nil
	}
	// What the tier says of the writes raises what this instance knows;
	// what it no longer says (an epoch deleted or lowered) changes nothing.
	ts.floor.Learn(tables, v.Epochs, v.Seq)
	for _, ep := range v.Epochs {
		if ep >= v.Version {
			return nil, nil // computed before a write the fleet was told of
		}
	}
	if !ts.floor.AdmitsRows(v.Version, rd.tables, rd.rows) {
		return nil, nil // computed before a write this instance knows of
	}
	if v.Seq > 0 && v.Version > v.Seq {
		// A version no Acquire handed out (one that would outlive every
		// write): not the fleet's.
		ts.stats.decodeErrors.Add(1)
		ts.stats.forged.Add(1)
		return nil, nil
	}
	e, err := openShared(ts.ring, ts.ns, rd.l2, v, s.decodeLimits(rd.plan.pol))
	if err != nil {
		ts.stats.decodeErrors.Add(1)
		msg := "sqlflight: unreadable result in the shared tier; treated as a miss"
		if errors.Is(err, seal.ErrForged) {
			ts.stats.forged.Add(1)
			msg = "sqlflight: a result in the shared tier failed authentication (another secret, or written by someone else); treated as a miss"
		}
		s.warned.Warn(s.log, "l2-decode", rd.r.Normalized, msg, errText.Attr(err), "fingerprint", key.Fingerprint(rd.r.Normalized))
		return nil, nil
	}
	// The value's deadlines are the filler's; this reader judges it by its
	// own policy from the moment it was filled, within the value's life.
	e.jitter = fresh.Draw()
	if s.judge(e, rd.plan.pol).At(s.opts.Clock.Now()) == fresh.Expired {
		return nil, nil
	}
	e.key, e.version, e.seq, e.tables, e.known = rd.key, v.Version, seq, rd.tables, rd.known
	return e, nil
}

// sharedLead is the L2 step of a flight's leader before it queries. It
// reports true if f was answered from L2 (f is finished); otherwise the
// leader goes on to query, holding the lease if it got it. A loser waits
// for the holder's value at most until the policy's wait, the lease's TTL
// (the holder may have died) or half of what is left of its context's
// deadline (leaving it time to query), whichever comes first.
func (s *Shield) sharedLead(ctx context.Context, f *flight, rd *read, st *store) bool {
	ts := s.tier
	ttl := min(rd.originTimeout(s), ts.leaseTTL)
	limit := ttl
	if w := rd.plan.pol.Wait; w > 0 {
		limit = min(limit, w)
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
	// caller time (errTierSlow), whichever the scheduler shows first.
	gaveUp := func(waited bool, err error) bool {
		if waited && ctx.Err() == nil && (lctx.Err() != nil || errors.Is(err, errTierSlow)) {
			ts.stats.leaseExpired.Add(1)
		}
		return false
	}
	for waited := false; ; waited = true {
		e, err := s.fetchShared(lctx, rd, f.Seq())
		if err != nil || lctx.Err() != nil {
			return gaveUp(waited, err)
		}
		if e != nil {
			s.answerFromShared(st, f, rd, e)
			return true
		}
		if !waited {
			ts.stats.misses.Add(1)
		}
		held, err := s.acquire(lctx, rd, ttl)
		if held {
			// The holder before may have stored and released between our
			// look and our lease: look once more before querying.
			if e, err := s.fetchShared(lctx, rd, f.Seq()); err == nil && e != nil {
				s.releaseLease(rd)
				s.answerFromShared(st, f, rd, e)
				return true
			}
			return false
		}
		if err != nil || lctx.Err() != nil {
			return gaveUp(waited, err) // the tier failed, or no time is left
		}
		if !waited {
			ts.stats.leaseWaits.Add(1)
		}
		// Another instance queries: look again a little later.
		d := pause/2 + rand.N(pause)
		pause = min(pause*2, 40*time.Millisecond)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-lctx.Done():
			t.Stop()
			return gaveUp(true, nil)
		}
	}
}

// answerFromShared finishes f with an entry read from L2.
func (s *Shield) answerFromShared(st *store, f *flight, rd *read, e *entry) {
	s.fillFromShared(st, f, rd, e)
	s.finish(f, e.res, nil, nil)
}

// acquire tries to take rd's lease; it reports whether it did. rd.version
// is the version the lease came with; if the tier failed (the error), the
// one an earlier attempt of the same read came with, or 0. (Any version
// taken before the read's origin query runs may carry its result: an
// older one can only be superseded.)
func (s *Shield) acquire(ctx context.Context, rd *read, ttl time.Duration) (bool, error) {
	ts := s.tier
	var l Lease
	if err := ts.call(ctx, func(ctx context.Context) error {
		var err error
		l, err = ts.t.Acquire(ctx, ts.ns, rd.l2, ttl)
		return err
	}); err != nil {
		return false, err
	}
	rd.version = l.Version
	if l.Held {
		ts.stats.leases.Add(1)
		rd.lease = l
	}
	return l.Held, nil
}

// releaseLease gives rd's lease back, if it holds one. It is best effort
// and goes to the tier even while its breaker is open: a lease left behind
// makes other instances wait until it expires.
func (s *Shield) releaseLease(rd *read) {
	if !rd.lease.Held {
		return
	}
	l := rd.lease
	rd.lease = Lease{}
	ts := s.tier
	ctx, cancel := context.WithTimeout(context.Background(), ts.timeout)
	defer cancel()
	defer func() { _ = recover() }() // a panicking tier is not the caller's problem
	_ = ts.t.Release(ctx, ts.ns, rd.l2, l)
}

// fillFromShared counts an entry read from L2 as the answer of f and puts
// it into L1, unless a write to its tables happened through this process
// since f started.
func (s *Shield) fillFromShared(st *store, f *flight, rd *read, e *entry) {
	f.Data.fromShared = e // its followers judge its age by their own policies
	s.tier.stats.hits.Add(1)
	if !s.epochs.UnchangedFor(f.Seq(), rd.tables, rd.known, rd.rows) {
		return
	}
	st.Put(e, s.opts.Clock.Now())
}

// sharedRefresh is the L2 step of a background refresh of an entry of
// version rd.prevVersion: a newer value in L2 is taken as the refresh; else
// the refresh goes on only if it gets the key's lease (errLeasedElsewhere:
// another instance refreshes). A tier that fails lets it go on.
func (s *Shield) sharedRefresh(ctx context.Context, f *flight, rd *read, st *store) (*result, error) {
	newer := func() *entry {
		e, err := s.fetchShared(ctx, rd, f.Seq())
		if err != nil || e == nil || e.version <= rd.prevVersion ||
			s.judge(e, rd.plan.pol).At(s.opts.Clock.Now()) != fresh.Fresh {
			return nil
		}
		return e
	}
	if e := newer(); e != nil {
		s.fillFromShared(st, f, rd, e)
		return e.res, nil
	}
	if held, _ := s.acquire(ctx, rd, min(rd.originTimeout(s), s.tier.leaseTTL)); !held {
		if rd.version == 0 {
			return nil, nil // the tier failed: refresh locally
		}
		return nil, errLeasedElsewhere
	}
	if e := newer(); e != nil { // stored between our look and our lease
		s.releaseLease(rd)
		s.fillFromShared(st, f, rd, e)
		return e.res, nil
	}
	return nil, nil
}

// storeShared writes the entry an origin filled to L2 under the version
// its lease came with (a slower former holder cannot overwrite it), then
// releases the lease. It runs after the flight's waiters were answered.
func (s *Shield) storeShared(rd *read, e *entry) {
	ts := s.tier
	if e != nil && rd.version > 0 {
		ttl := e.last.Sub(s.opts.Clock.Now())
		if data, err := encodeShared(e); err == nil && ttl > 0 {
			data = ts.ring.SealValue(data, ts.ns, rd.l2, rd.version)
			var wrote bool
			if ts.call(context.Background(), func(ctx context.Context) error {
				var err error
				wrote, err = ts.t.Store(ctx, ts.ns, rd.l2, data, rd.version, ttl)
				return err
			}) == nil {
				if wrote {
					ts.stats.writes.Add(1)
				} else {
					ts.stats.superseded.Add(1)
				}
			}
		}
	}
	s.releaseLease(rd)
}

// originTimeout is the budget of rd's origin query.
func (rd *read) originTimeout(s *Shield) time.Duration {
	if t := rd.plan.pol.Timeout; t > 0 {
		return t
	}
	return s.opts.OriginTimeout
}

// L2 values: sealed around a body of a header of their own and the wire
// encoding of the result (internal/shared: Encode, Open).

// encodeShared returns the body of e's L2 value, with seal.Prefix bytes of
// room in front for SealValue.
func encodeShared(e *entry) ([]byte, error) {
	return shared.Encode(shared.Entry{Res: e.res, Filled: e.filled, Soft: e.soft, Hard: e.hard, Last: e.last, Delta: e.delta})
}

// errSharedFormat and errUnknownScanType are the misses of a value of
// another format, or naming a scan type this process does not know.
var (
	errSharedFormat    = shared.ErrFormat
	errUnknownScanType = shared.ErrUnknownScanType
)

// decodeLimits are the bounds of a value read from the tier for a reader
// of policy pol: the rows and bytes that reader would share from its own
// origin (see shared.Limits). A value over them is not read at all (a
// miss).
func (s *Shield) decodeLimits(pol Policy) wire.Limits {
	return shared.Limits(pol.MaxRows, pol.MaxBytes, s.opts.MaxResultRows, s.opts.MaxResultBytes)
}

// openShared checks the value v read under key and decodes it within lim
// (see shared.Open).
func openShared(ring *seal.Ring, ns, key string, v SharedValue, lim wire.Limits) (*entry, error) {
	se, err := shared.Open(ring, ns, key, v.Data, v.Version, lim)
	if err != nil {
		return nil, err
	}
	return entryOf(se), nil
}

// entryOf returns the entry for L1 of what a value carried (its key,
// version and tables not yet set).
func entryOf(se shared.Entry) *entry {
	return &entry{res: se.Res, empty: se.Res.Empty(), filled: se.Filled, delta: se.Delta,
		soft: se.Soft, hard: se.Hard, last: se.Last}
}
