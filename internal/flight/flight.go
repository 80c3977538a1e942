// Package flight shares one origin execution of a key among every caller
// that asks for it while it runs: a singleflight whose flights know the
// writes they may not be joined across, linger for a herd that is still
// draining, run on without a waiter when their result fills a cache, and
// hand a result too large to share to their leader alone.
//
// # What a caller gets
//
// [Group.JoinOrLead] either joins the key's flight (the caller is a
// follower) or starts a new one (the caller is its leader, who runs the
// origin and ends the flight with [Group.Finish]). Every caller, leader or
// follower, waits on [Flight.Done] and then takes [Flight.Outcome]: the
// shared result, which every caller reads on its own (the group copies
// nothing), or the flight's error. A follower is told to start over with
// [ErrRetry] when the flight failed on the leader's connection (its error
// is driver.ErrBadConn) or when the leader left before the origin began
// ([ErrLeaderGone]); it is told to run its own query with [ErrNotShared]
// when the result went to the leader alone (a handoff, [Group.Handoff]).
//
// # When a caller may join
//
// A flight remembers the sequence of the last write when it started
// ([Group.Seq], taken under the group's lock); a caller joins it only if
// its own test, unchanged(seq), says that none of what its read depends on
// was written since. The group does not know what a write is: the test is
// the caller's. A flight older than such a write stays out of the way (its
// own waiters still get its result) and a new flight replaces it under its
// key. A caller whose read fills a cache does not start a flight when the
// cache holds, by now, an entry it did not see (filled): a flight ended
// since it looked, and it looks again instead of falling in between.
//
// # What lingers, and why
//
// A flight that had followers, fills no cache and ended with a shared
// result stays joinable after it ended, for as long as it ran and at most
// [MaxLinger]: under a capped connection pool the callers of one herd
// queue for connections while the flight runs, and without the linger they
// would break into one flight per batch the pool lets through. While it
// lingers a caller joins it (counted in [Group.Late]) if some caller of
// the flight still owes it, or if the caller's connection is the heir of
// one that did: see [Debtor]. Once every caller of the herd gave its
// connection back and nobody waited for one, a read runs a flight of its
// own however soon it comes. A flight that fills a cache never lingers:
// the cache holds its result.
//
// # The leader's departure
//
// Any caller may leave on its own context ([Group.Leave]); a leader that
// leaves does not end the flight for its followers. The last waiter to
// leave a flight that fills no cache cancels its origin with
// [ErrAbandoned] and takes it out of the group; a flight that fills a
// cache runs on with nobody waiting, as a background refresh
// ([Group.StartRefresh]) does from its start. A handoff whose leader left
// is closed by Finish.
//
// # Concurrency
//
// A Group is safe for concurrent use; its zero value, with Now and Seq
// set, is ready, and it must not be copied after first use. One mutex
// guards the group's map and each flight's waiters, its leader's
// departure, its end, its handoff, its followers and the callers that owe
// it, and every Debtor's owed flight (swapped only under it). A flight's
// result, error and Data are written before Done is closed and read after
// it; the leader sets its cancel function (SetCancel) once, before it
// starts the origin. Now, Seq and the caller's unchanged and filled run
// under the lock and must not call back into the group. A handoff whose
// leader left is closed outside it, and a lingering flight is taken out of
// the group by a timer of the time package (its duration told by Now).
package flight

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// MaxLinger bounds how long an ended flight stays joinable
// ([Group.JoinOrLead]); it lingers as long as it ran, at most this long.
const MaxLinger = time.Second

var (
	// ErrAbandoned cancels an origin nobody waits for any more.
	ErrAbandoned = errors.New("sqlflight: origin abandoned by every caller")
	// ErrRetry tells a follower to try again: the leader's connection broke.
	ErrRetry = errors.New("sqlflight: flight failed on the leader's connection")
	// ErrLeaderGone fails a flight whose leader left before its origin began.
	ErrLeaderGone = errors.New("sqlflight: leader left before the origin started")
	// ErrNotShared tells a follower that the result went to the leader only.
	ErrNotShared = errors.New("sqlflight: result not shared")
)

// lingerIDs numbers the flights that may linger (Flight.ID), across every
// group of the process.
var lingerIDs atomic.Uint64

// A Flight is one origin execution of a key, shared by every caller that
// joins it while it runs; R is its shared result, D what its owner keeps
// with it. Fields below done are written once, before done is closed;
// waiters, leaderLeft, finished, handoff, joined and out are guarded by
// the group's mutex.
type Flight[R, D any] struct {
	key    string
	seq    uint64 // the sequence of the last write when the flight started
	fills  bool   // its result goes to a cache: it runs on when nobody waits
	done   chan struct{}
	cancel context.CancelCauseFunc

	res       *R
	err       error
	notShared bool // the result could not be shared: followers run their own query

	// Data is the owner's, written by the leader before Finish and read by
	// its callers after Done; the group never looks at it.
	Data D

	waiters    int
	leaderLeft bool
	finished   bool
	handoff    io.Closer // the unshared result, streamed to the leader only

	// A flight that had followers and caches nothing stays joinable for a
	// while after it ended (lingers; JoinOrLead). joined counts its
	// followers, out its callers whose connection has not gone back to its
	// pool nor served another statement since.
	started time.Time
	joined  int
	out     int
	linger  time.Time // joinable until then, once finished
	// id names a flight that may linger to the connections of its callers;
	// 0 for one that fills a cache.
	id uint64
}

// Key returns the key f runs for.
func (f *Flight[R, D]) Key() string { return f.key }

// Seq returns the sequence of the last write when f started (Group.Seq).
func (f *Flight[R, D]) Seq() uint64 { return f.seq }

// Fills reports whether f's result goes to a cache (it never lingers and
// runs on when nobody waits).
func (f *Flight[R, D]) Fills() bool { return f.fills }

// ID returns the number that names f to the connections of its callers
// (Debtor.Heir), or 0 for a flight that fills a cache and never lingers.
func (f *Flight[R, D]) ID() uint64 { return f.id }

// Done returns a channel closed once f finished (Group.Finish).
func (f *Flight[R, D]) Done() <-chan struct{} { return f.done }

// SetCancel sets the function the last waiter to leave cancels f's origin
// with (ErrAbandoned); the leader sets it once, before it starts the origin.
func (f *Flight[R, D]) SetCancel(cancel context.CancelCauseFunc) { f.cancel = cancel }

// Result returns f's shared result (nil if none) and its error; it may be
// called only once Done is closed.
func (f *Flight[R, D]) Result() (*R, error) { return f.res, f.err }

// Outcome returns what f gives a caller once Done is closed (and, for the
// leader, once it took no handoff): the shared result, else ErrNotShared
// if the result went to the leader only, else, for a follower of a flight
// that failed with driver.ErrBadConn or ErrLeaderGone, ErrRetry, else the
// flight's error.
func (f *Flight[R, D]) Outcome(lead bool) (*R, error) {
	switch {
	case f.err == nil && f.res != nil:
		return f.res, nil
	case f.notShared:
		return nil, ErrNotShared
	case !lead && (errors.Is(f.err, driver.ErrBadConn) || f.err == ErrLeaderGone):
		return nil, ErrRetry
	}
	return nil, f.err
}

// A Debtor is what the group needs of a caller's connection: where it
// keeps the flight its last caller took a result from and still owes (so
// that a lingering flight knows its herd is not over), and the flight it
// inherited. A connection owes at most one flight at a time.
type Debtor[R, D any] interface {
	// Owed returns the connection's owed flight: nil, or the flight whose
	// result its last caller took, until the connection goes back to its
	// pool or serves another statement (Group.Release). The group swaps it
	// only under its lock.
	Owed() *atomic.Pointer[Flight[R, D]]
	// Heir returns the ID of a flight whose caller gave the connection
	// back and whose pool handed it straight to a caller queued for one,
	// for that caller's first statement: the caller may join the flight
	// while it lingers. 0: none.
	Heir() uint64
}

// A Group holds the flights of its keys. Now and Seq must be set before
// first use; Late is optional.
type Group[R, D any] struct {
	// Now tells the time a flight starts and lingers by.
	Now func() time.Time
	// Seq returns the sequence of the last write, remembered by a flight
	// that starts (Flight.Seq).
	Seq func() uint64
	// Late, if set, counts the callers that joined a flight while it
	// lingered.
	Late *atomic.Uint64

	mu sync.Mutex
	m  map[string]*Flight[R, D]
}

// JoinOrLead joins the key's flight if it started after the last write
// the caller's read depends on (unchanged(f.Seq()) holds), and reports
// false; or starts a new one, led by the caller, and reports true. d is
// the caller's connection, which owes the flight it joined or leads if
// that flight fills no cache.
//
// An ended flight that lingers is joined as if it still ran while some
// caller of it (a late one included) still owes it, or when d is the heir
// of one that did (Debtor.Heir), until it ran as long again as it had (at
// most MaxLinger).
//
// A caller whose read fills a cache (fills) and finds no running flight
// gets (nil, false) if filled reports, under the group's lock, that the
// cache holds by now an entry it did not see: it looks in the cache again.
func (g *Group[R, D]) JoinOrLead(key string, unchanged func(seq uint64) bool, fills bool, filled func() bool, d Debtor[R, D]) (*Flight[R, D], bool) {
	heir := d.Heir()
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.m[key]
	if f != nil && unchanged(f.seq) {
		switch {
		case !f.finished:
			f.waiters++
			f.joined++
			owe(d, f)
			return f, false
		case (f.out > 0 || heir != 0 && heir == f.id) && g.Now().Before(f.linger):
			if g.Late != nil {
				g.Late.Add(1)
			}
			owe(d, f)
			return f, false
		}
	}
	if fills && (f == nil || f.finished) && filled() {
		return nil, false
	}
	// A flight older than a write to its tables stays out of the map (its
	// own waiters still get its result); a new one replaces it.
	f = &Flight[R, D]{key: key, seq: g.Seq(), fills: fills, done: make(chan struct{}), waiters: 1, started: g.Now()}
	if !fills {
		f.id = lingerIDs.Add(1)
	}
	if g.m == nil {
		g.m = make(map[string]*Flight[R, D])
	}
	g.m[key] = f
	owe(d, f)
	return f, true
}

// owe counts d among the callers of f, a flight that may linger, until its
// connection goes back (Release); g.mu is held.
func owe[R, D any](d Debtor[R, D], f *Flight[R, D]) {
	if f.fills {
		return
	}
	if old := d.Owed().Swap(f); old != nil {
		old.out--
	}
	f.out++
}

// Release stops counting d among the callers of the flight it owes, and
// returns that flight if a caller could still join it — it runs, or it
// lingers — else nil (none owed, or it ended without lingering): d went
// back to its pool, or serves another statement.
func (g *Group[R, D]) Release(d Debtor[R, D]) *Flight[R, D] {
	owed := d.Owed()
	if owed.Load() == nil {
		return nil
	}
	g.mu.Lock()
	f := owed.Swap(nil)
	if f != nil {
		f.out--
		if f.finished && f.linger.IsZero() {
			f = nil // it never lingered: no heir can join it
		}
	}
	g.mu.Unlock()
	return f
}

// StartRefresh starts a flight with no waiter, which fills a cache, for a
// background refresh, and reports true; it reports false if the key has a
// flight running that the refresh could join (unchanged(f.Seq()) holds),
// or if filled reports, under the group's lock, that the cache holds by
// now another entry than the one to refresh (a flight ended since it was
// read).
func (g *Group[R, D]) StartRefresh(key string, unchanged func(seq uint64) bool, filled func() bool) (*Flight[R, D], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.m[key]; f != nil && !f.finished && unchanged(f.seq) {
		return nil, false
	}
	if filled() {
		return nil, false // refreshed meanwhile
	}
	f := &Flight[R, D]{key: key, seq: g.Seq(), fills: true, done: make(chan struct{}), leaderLeft: true}
	if g.m == nil {
		g.m = make(map[string]*Flight[R, D])
	}
	g.m[key] = f
	return f, true
}

// Finish publishes the outcome of f to its waiters (res, or err, or, with
// handoff set, a result for the leader alone) and takes f out of the group,
// or lets it linger: see JoinOrLead. A flight that fills a cache put its
// result there first, where readers see it from then on. The handoff goes
// to the leader if it still waits (Handoff), and is closed here if it left;
// followers are told ErrNotShared. Finish is called once per flight.
func (g *Group[R, D]) Finish(f *Flight[R, D], res *R, err error, handoff io.Closer) {
	g.mu.Lock()
	var linger time.Duration
	if g.m[f.key] == f {
		if f.joined > 0 && !f.fills && err == nil && res != nil && handoff == nil {
			now := g.Now()
			linger = min(now.Sub(f.started), MaxLinger)
			f.linger = now.Add(linger)
		} else {
			delete(g.m, f.key)
		}
	}
	f.res, f.err, f.finished = res, err, true
	var orphan io.Closer
	if handoff != nil {
		f.notShared = true
		if f.leaderLeft {
			orphan = handoff
		} else {
			f.handoff = handoff
		}
	}
	close(f.done)
	g.mu.Unlock()
	if orphan != nil {
		_ = orphan.Close()
	}
	if linger > 0 {
		time.AfterFunc(linger, func() {
			g.mu.Lock()
			if g.m[f.key] == f {
				delete(g.m, f.key)
			}
			g.mu.Unlock()
		})
	}
}

// Solo takes f, a flight that fills no cache, out of the group when its
// leader is the only caller it ever had (no follower joined it, and the
// leader still waits), and reports whether it did: the leader may then read
// the origin's result on its own, unrecorded (Finish with a handoff), and a
// caller that comes later runs a flight of its own. It reports false, and
// changes nothing, for any other flight.
func (g *Group[R, D]) Solo(f *Flight[R, D]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.fills || f.finished || f.joined > 0 || f.leaderLeft || f.waiters != 1 {
		return false
	}
	if g.m[f.key] == f {
		delete(g.m, f.key)
	}
	return true
}

// Handoff takes the unshared result of f, once Done is closed, for its
// leader: it returns it once, then nil; nil too if there is none.
func (g *Group[R, D]) Handoff(f *Flight[R, D]) io.Closer {
	g.mu.Lock()
	h := f.handoff
	f.handoff = nil
	g.mu.Unlock()
	return h
}

// Leave takes a waiter off f and reports true; if f already finished it
// reports false and the caller takes the outcome after all (so that a
// leader never leaves a handoff behind). The last waiter to leave a flight
// that fills no cache takes it out of the group and cancels its origin
// with ErrAbandoned.
func (g *Group[R, D]) Leave(f *Flight[R, D], lead bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.finished {
		return false
	}
	f.waiters--
	if lead {
		f.leaderLeft = true
	}
	if f.waiters == 0 && !f.fills {
		if g.m[f.key] == f {
			delete(g.m, f.key)
		}
		if f.cancel != nil {
			f.cancel(ErrAbandoned)
		}
	}
	return true
}

// Len returns the number of keys that have a flight in the group, running
// or lingering.
func (g *Group[R, D]) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}
