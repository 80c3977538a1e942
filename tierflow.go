package sqlflight

import (
	"context"
	"errors"

	"github.com/sqlflight/sqlflight/internal/fresh"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
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

// sharedKey is the L2 key of a read (shared.Tier.ReadKey): a digest of
// the scope's fleet-wide name and the read's key without the process's
// scope number. Reads of scopes without a fleet-wide name, of unknown
// tables, or of tables whose invalidation waits to be published do not use
// L2. (A read of no table at all is invalidated by writes to unknown tables
// alone, as in L1.)
func (s *engine) sharedKey(rd *read) string {
	if ts := s.tier; ts != nil && rd.c.sc.sharing() && rd.known {
		return ts.ReadKey(rd.c.sc.shared, rd.key[8:], rd.tables) // the key after the process's scope number
	}
	return ""
}

// fetchShared returns the L2 value of rd if it is usable now (see
// shared.Tier.Fetch: decodable within the bounds of rd's policy, newer than
// every write published to its tables, to the rows it depends on for a
// read tagged by its rows) and not expired by rd's own policy (its fill
// time plus rd's hard, within the value's life). It returns the entry for
// L1 (not yet stored), nil when there is no usable value.
func (s *engine) fetchShared(ctx context.Context, rd *read, seq uint64) (*entry, error) {
	pol := rd.plan.pol
	// A value over what this reader would share from its own origin is not
	// read at all (a miss).
	lim := shared.Limits(pol.MaxRows, pol.MaxBytes, s.opts.MaxResultRows, s.opts.MaxResultBytes)
	se, version, err := s.tier.Fetch(ctx, rd.l2, rd.tables, rd.rows, lim, func(err error) {
		msg := "sqlflight: unreadable result in the shared tier; treated as a miss"
		if errors.Is(err, seal.ErrForged) {
			msg = "sqlflight: a result in the shared tier failed authentication (another secret, or written by someone else); treated as a miss"
		}
		s.warned.Warn(s.log, "l2-decode", rd.r.ShapeKey, msg, errText.Attr(err), "fingerprint", key.Fingerprint(rd.r.ShapeKey))
	})
	if err != nil || version == 0 {
		return nil, err
	}
	// The value's deadlines are the filler's; this reader judges it by its
	// own policy from the moment it was filled, within the value's life.
	e := &entry{res: se.Res, empty: se.Res.Empty(), filled: se.Filled, delta: se.Delta,
		soft: se.Soft, hard: se.Hard, last: se.Last}
	e.jitter = fresh.Draw()
	if s.judge(e, pol).At(s.opts.Clock.Now()) == fresh.Expired {
		return nil, nil
	}
	e.key, e.version, e.seq, e.tables, e.known = rd.key, version, seq, rd.tables, rd.known
	return e, nil
}

// sharedLead is the L2 step of a flight's leader before it queries (see
// shared.Tier.Lead). It reports true if f was answered from L2 (f is
// finished); otherwise the leader goes on to query, holding the lease if
// it got it.
func (s *engine) sharedLead(ctx context.Context, f *flight, rd *read, st *store) bool {
	ts := s.tier
	var e *entry
	look := func(ctx context.Context) (bool, error) {
		var err error
		e, err = s.fetchShared(ctx, rd, f.Seq())
		return e != nil, err
	}
	ttl := ts.LeaseFor(rd.plan.pol.Timeout, s.opts.OriginTimeout)
	if !ts.Lead(ctx, rd.l2, ttl, rd.plan.pol.Wait, &rd.version, &rd.lease, look) {
		return false
	}
	s.fillFromShared(st, f, rd, e)
	s.finish(f, e.res, nil, nil)
	return true
}

// fillFromShared counts an entry read from L2 as the answer of f and puts
// it into L1, unless a write to its tables happened through this process
// since f started.
func (s *engine) fillFromShared(st *store, f *flight, rd *read, e *entry) {
	f.Data.fromShared = e // its followers judge its age by their own policies
	s.tier.Stats.Hits.Add(1)
	if !s.epochs.UnchangedFor(f.Seq(), rd.tables, rd.known, rd.rows) {
		return
	}
	st.Put(e, s.opts.Clock.Now())
}

// sharedRefresh is the L2 step of a background refresh of an entry of
// version rd.prevVersion: a newer value in L2 is taken as the refresh; else
// the refresh goes on only if it gets the key's lease (errLeasedElsewhere:
// another instance refreshes). A tier that fails lets it go on.
func (s *engine) sharedRefresh(ctx context.Context, f *flight, rd *read, st *store) (*result, error) {
	ts := s.tier
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
	ttl := ts.LeaseFor(rd.plan.pol.Timeout, s.opts.OriginTimeout)
	if held, _ := ts.Acquire(ctx, rd.l2, ttl, &rd.version, &rd.lease); !held {
		if rd.version == 0 {
			return nil, nil // the tier failed: refresh locally
		}
		return nil, errLeasedElsewhere
	}
	if e := newer(); e != nil { // stored between our look and our lease
		ts.Release(rd.l2, &rd.lease)
		s.fillFromShared(st, f, rd, e)
		return e.res, nil
	}
	return nil, nil
}

// storeShared writes the entry an origin filled to L2 under the version
// its lease came with (a slower former holder cannot overwrite it), then
// releases the lease. It runs after the flight's waiters were answered.
func (s *engine) storeShared(rd *read, e *entry) {
	ts := s.tier
	if e != nil && rd.version > 0 {
		ttl := e.last.Sub(s.opts.Clock.Now())
		ts.Store(rd.l2, shared.Entry{Res: e.res, Filled: e.filled, Soft: e.soft, Hard: e.hard, Last: e.last, Delta: e.delta}, rd.version, ttl)
	}
	ts.Release(rd.l2, &rd.lease)
}
