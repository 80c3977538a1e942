package feed

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// The states of a Feed (Feed.State, Snapshot.State).
const (
	Starting = "starting" // opening its connection, or waiting to open it again
	Current  = "current"  // streaming, caught up
	Lagging  = "lagging"  // streaming, more than a second behind
	Down     = "down"     // failed; tried again after a back-off
	Standby  = "standby"  // another instance of the fleet holds it
)

const (
	// lagLimit is how far behind the server a streaming feed may be
	// before its state is Lagging.
	lagLimit = time.Second
	// startTimeout bounds the first establishment of a feed, which Start
	// waits for (along with its context).
	startTimeout = 30 * time.Second
	// The back-off between attempts to open a feed that failed.
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Lease is a fleet lease a Host took: its token and fleet version, handed
// back to the Host's Renew and Release unchanged.
type Lease struct {
	Token   string
	Version uint64
}

// Host is what a Feed needs from the cache it feeds, one Host per Feed (a
// scope of a Shield). Its methods may be called from the Feed's
// goroutines, never after Stop returned.
type Host interface {
	// Stream runs one stream of the feed's source (Notify or Replicate)
	// until it fails or ctx ends, reporting to sink; a nil error means
	// the stream ended without one (the Feed counts it as a failure all
	// the same unless ctx ended).
	Stream(ctx context.Context, sink Sink) error
	// Lease tries to take the fleet's lease on key for ttl through the
	// shared tier; held is false when another instance holds it, and an
	// error (the tier failed) counts as not held. It is called only when
	// Config.Fleet is set.
	Lease(ctx context.Context, key string, ttl time.Duration) (l Lease, held bool, err error)
	// Renew extends the lease l on key to ttl from now if this instance
	// still holds it, and reports whether it did; an error means the tier
	// did not say (the Feed tries again until the lease may have run out).
	Renew(ctx context.Context, key string, l Lease, ttl time.Duration) (bool, error)
	// Release gives the lease l on key back if this instance still holds
	// it; its error is ignored (the lease runs out on its own).
	Release(ctx context.Context, key string, l Lease) error
	// Bump drops every cached entry, in this process and in the fleet: a
	// resync, anything may have changed.
	Bump()
	// Apply invalidates what the committed changes cs may have changed;
	// it is called for a first application and again for a Reapply.
	Apply(cs []Change)
	// Log writes one log line at level with attrs (slog's key-value
	// pairs); the value of the key "error" is an error (or nil, then the
	// attribute is left out) that the Host writes without its text.
	Log(level slog.Level, msg string, attrs ...any)
	// Live returns how many connections of the feed's scope are open:
	// PauseIfIdle pauses the feed only when none is.
	Live() int64
}

// Config says how a Feed runs besides its Host.
type Config struct {
	// Mode names the feed's source in its log lines ("replication" or
	// "notify").
	Mode string
	// Fleet is the key of the feed's lease in the shared tier: with it,
	// the feed runs only while this instance holds the lease, and every
	// stream resyncs. "" runs the feed without a lease.
	Fleet string
	// LeaseTTL is how long the lease lasts without renewal; it is renewed
	// every third of it. It must be positive when Fleet is set.
	LeaseTTL time.Duration
	// Classify describes an error without its text, for
	// Snapshot.LastError; nil describes it by its Go type.
	Classify func(error) string
	// Group is the set of feeds whose counters this feed adds to; nil
	// gives the feed a Group of its own.
	Group *Group
}

// Feed is the lifecycle of one change feed: it runs streams of its Host's
// source one after another (the first waited for by Start, the others
// after a back-off of 100 ms doubling to 5 s, jittered), in a fleet only
// while it holds the lease, and records its state, lag and counters.
// Every stream after the first, and every stream in a fleet, resyncs
// (Host.Bump): what happened between two streams is unknown.
type Feed struct {
	h   Host
	cfg Config

	state atomic.Value // string
	lag   atomic.Int64 // nanoseconds
	// established counts the streams this feed established: every one
	// after the first (and, in a fleet, every one) resyncs.
	established atomic.Uint64

	mu      sync.Mutex
	cancel  context.CancelFunc // stops the running loop; nil when none runs
	done    chan struct{}      // closed when the running loop returned
	stopped bool               // stopped for good: never again
}

// New returns a Feed of h, Starting and not running (Start runs it).
func New(h Host, cfg Config) *Feed {
	if cfg.Group == nil {
		cfg.Group = new(Group)
	}
	f := &Feed{h: h, cfg: cfg}
	f.state.Store(Starting)
	return f
}

// Start runs the feed and waits until its first stream is established,
// or, in a fleet, until it knows another instance holds the lease: then
// it returns nil and the feed goes on in the background. It returns the
// first attempt's error when that failed, or an error wrapping
// ErrUnavailable and ctx's when ctx ended or 30 s passed first; the feed
// is then stopped for good. It returns nil at once on a feed that is
// running or stopped.
func (f *Feed) Start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	first := make(chan error, 1)
	if !f.start(first) {
		return nil // stopped meanwhile, or running already
	}
	select {
	case err := <-first:
		if err != nil {
			f.Stop()
			return err
		}
	case <-ctx.Done():
		f.Stop()
		return Unavailable(ctx.Err(), "the feed was not established before the connection's context ended")
	}
	return nil
}

// start runs the feed's loop unless it runs; first, if not nil, hears how
// the first attempt went (nil: established, or in a fleet, another holds
// it) and the loop ends after a failed first attempt. It reports whether
// it started the loop: not when the feed is stopped or its loop runs (then
// first hears nothing).
func (f *Feed) start(first chan error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped || f.cancel != nil {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go f.loop(ctx, f.done, first)
	return true
}

// Ensure runs the feed again if PauseIfIdle paused it (its scope had no
// connection left); it does nothing to a running or stopped feed.
func (f *Feed) Ensure() {
	f.mu.Lock()
	running := f.cancel != nil || f.stopped
	f.mu.Unlock()
	if !running {
		f.start(nil)
	}
}

// pause stops the loop and waits until it returned; Ensure runs it again.
func (f *Feed) pause() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.cancel, f.done = nil, nil
	f.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// PauseIfIdle pauses the feed, waiting until its stream ended, if its
// scope has no open connection (Host.Live); one that opened since keeps it
// running. Ensure and PauseIfIdle are ordered by the Feed's lock.
func (f *Feed) PauseIfIdle() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	if f.h.Live() > 0 || cancel == nil {
		f.mu.Unlock()
		return
	}
	f.cancel, f.done = nil, nil
	f.mu.Unlock()
	cancel()
	<-done
}

// Stop ends the feed for good, waiting until its stream ended (and its
// lease was released); Start and Ensure do nothing after it.
func (f *Feed) Stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.pause()
}

// State returns the feed's state: Starting, Current, Lagging, Down or
// Standby.
func (f *Feed) State() string {
	s, _ := f.state.Load().(string)
	return s
}

// Lag returns how far behind the server the feed was at its last applied
// transaction (0 once the server said it is caught up).
func (f *Feed) Lag() time.Duration { return time.Duration(f.lag.Load()) }

// setState records the feed's state and logs the change.
func (f *Feed) setState(to string, err error) {
	from, _ := f.state.Swap(to).(string)
	if from == to {
		return
	}
	switch to {
	case Down, Lagging:
		attrs := []any{"mode", f.cfg.Mode, "from", from, "error", err, "lag", f.Lag()}
		// An ErrUnavailable's reason is the feed's own words (no data, no
		// secret): it says what to fix.
		if reason, ok := Reason(err); ok {
			attrs = append(attrs, "reason", reason)
		}
		f.h.Log(slog.LevelWarn, "sqlflight: change feed "+to, attrs...)
	default:
		f.h.Log(slog.LevelInfo, "sqlflight: change feed "+to, "mode", f.cfg.Mode, "from", from)
	}
}

// fail records an error of the feed.
func (f *Feed) fail(err error) {
	g := f.cfg.Group
	g.errors.Add(1)
	class := Source{Classify: f.cfg.Classify}.classify(err)
	g.mu.Lock()
	g.lastError = class
	g.mu.Unlock()
	f.setState(Down, err)
}

// resync drops every cached entry and counts it.
func (f *Feed) resync() {
	f.h.Bump()
	f.cfg.Group.resyncs.Add(1)
}

// loop runs the feed until ctx ends: in a fleet, only while it holds the
// lease; after a failure, again after a back-off.
func (f *Feed) loop(ctx context.Context, done chan struct{}, first chan error) {
	defer close(done)
	backoff := backoffMin
	for ctx.Err() == nil {
		sctx, release, held := f.hold(ctx)
		if !held {
			f.setState(Standby, nil)
			if first != nil {
				first <- nil // another instance holds it: the Connect goes on
				first = nil
			}
			if !sleepCtx(ctx, f.cfg.LeaseTTL/3) {
				return
			}
			continue
		}
		if f.State() == Standby {
			f.setState(Starting, nil)
		}
		ready := false
		err := f.h.Stream(sctx, sink{f: f, ready: func() {
			ready = true
			backoff = backoffMin
			// What happened before this stream is unknown: drop it all.
			if f.established.Add(1) > 1 || f.cfg.Fleet != "" {
				f.resync()
			}
			f.lag.Store(0)
			f.setState(Current, nil)
			if first != nil {
				first <- nil
				first = nil
			}
		}})
		release()
		if ctx.Err() != nil {
			return
		}
		if sctx.Err() != nil {
			// The lease was lost: another instance may hold the feed now.
			f.setState(Standby, nil)
			continue
		}
		if err == nil {
			err = errors.New("sqlflight: the change feed's stream ended")
		}
		f.fail(err)
		if first != nil && !ready {
			first <- err
			return
		}
		if !sleepCtx(ctx, backoff/2+rand.N(backoff/2+1)) {
			return
		}
		backoff = min(backoff*2, backoffMax)
	}
}

// sink is what one stream of a Feed reports to: its Host's invalidations,
// the feed's counters, lag and log.
type sink struct {
	f     *Feed
	ready func()
}

// Ready tells the feed's loop the stream is established.
func (k sink) Ready() { k.ready() }

// Apply applies one committed transaction's changes and counts it.
func (k sink) Apply(cs []Change, commit time.Time) { k.f.applyAt(cs, commit) }

// Reapply applies changes again, uncounted (the replication source's
// visibility check).
func (k sink) Reapply(cs []Change) { k.f.h.Apply(cs) }

// CaughtUp records that the feed is not behind the server.
func (k sink) CaughtUp() { k.f.noteLag(0) }

// Resync drops every cached entry: the source missed changes.
func (k sink) Resync() { k.f.resync() }

// Warn logs a warning of the source, its error without its text.
func (k sink) Warn(msg string, err error) { k.f.h.Log(slog.LevelWarn, msg, "error", err) }

// applyAt applies the changes of one committed transaction, committed at
// commitTime on the server's clock (zero: not known), and counts it.
func (f *Feed) applyAt(cs []Change, commitTime time.Time) {
	f.h.Apply(cs)
	g := f.cfg.Group
	g.transactions.Add(1)
	g.changes.Add(uint64(len(cs)))
	if commitTime.IsZero() {
		return
	}
	d := max(time.Since(commitTime), 0)
	g.delay.Observe(d)
	f.noteLag(d)
}

// noteLag records how far behind the server the feed is.
func (f *Feed) noteLag(d time.Duration) {
	f.lag.Store(int64(d))
	switch s := f.State(); {
	case d > lagLimit && s == Current:
		f.setState(Lagging, nil)
	case d <= lagLimit && s == Lagging:
		f.setState(Current, nil)
	}
}

// hold takes the fleet's lease (without a fleet, there is nothing to take)
// and keeps renewing it: the context it returns ends when the lease is
// lost or could not be renewed in time. release gives it back.
func (f *Feed) hold(ctx context.Context) (context.Context, func(), bool) {
	key := f.cfg.Fleet
	if key == "" {
		return ctx, func() {}, true
	}
	ttl := f.cfg.LeaseTTL
	lease, held, err := f.h.Lease(ctx, key, ttl)
	if err != nil || !held {
		return nil, nil, false
	}
	hctx, cancel := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		last := time.Now()
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
			held, err := f.h.Renew(hctx, key, lease, ttl)
			switch {
			case err == nil && held:
				last = time.Now()
			case err == nil || time.Since(last) > ttl*2/3:
				// Lost, or about to run out: another instance may take it.
				cancel()
				return
			}
		}
	}()
	return hctx, func() {
		cancel()
		<-renewed
		_ = f.h.Release(context.Background(), key, lease)
	}, true
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still on.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Group is a set of feeds (a Shield's, one per scope) and the counters
// they add to. Its zero value is an empty Group; it must not be copied.
type Group struct {
	transactions, changes, resyncs, errors atomic.Uint64
	delay                                  stats.Durations
	mu                                     sync.Mutex
	lastError                              string
	feeds                                  map[*Feed]struct{}
}

// Add puts f in the set whose states Snapshot reports and Stop stops;
// adding it twice is adding it once. f's counters go to its Config.Group
// whether it was added or not.
func (g *Group) Add(f *Feed) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.feeds == nil {
		g.feeds = map[*Feed]struct{}{}
	}
	g.feeds[f] = struct{}{}
}

// Stop stops every feed of the set for good (Feed.Stop), one after
// another; a feed added later is not stopped.
func (g *Group) Stop() {
	g.mu.Lock()
	feeds := make([]*Feed, 0, len(g.feeds))
	for f := range g.feeds {
		feeds = append(feeds, f)
	}
	g.mu.Unlock()
	for _, f := range feeds {
		f.Stop()
	}
}

// Snapshot is what a Group reports of its feeds.
type Snapshot struct {
	// State is the worst state of the set's feeds, from best to worst
	// Current, Standby, Starting, Lagging, Down; "" for an empty set.
	State string
	// Lag is the largest lag of the set's feeds, a fleet's standby feeds
	// aside.
	Lag time.Duration
	// Transactions and Changes count the committed transactions and the
	// changes applied (not those applied again), Resyncs the resyncs,
	// Errors the failures; LastError is the last failure's class
	// (Config.Classify), "" before any.
	Transactions, Changes, Resyncs, Errors uint64
	LastError                              string
	// Delay is the distribution of the delays from each transaction's
	// commit (server clock) to its invalidations, for those whose commit
	// time the source knew.
	Delay stats.Histogram
}

// rank orders the states from best to worst for Snapshot.State.
var rank = map[string]int{Current: 1, Standby: 2, Starting: 3, Lagging: 4, Down: 5}

// Snapshot returns the set's worst state and largest lag and the counters
// so far.
func (g *Group) Snapshot() Snapshot {
	var st Snapshot
	g.mu.Lock()
	st.LastError = g.lastError
	for f := range g.feeds {
		state := f.State()
		if rank[state] > rank[st.State] {
			st.State = state
		}
		if f.cfg.Fleet == "" || state != Standby {
			st.Lag = max(st.Lag, f.Lag())
		}
	}
	g.mu.Unlock()
	st.Transactions = g.transactions.Load()
	st.Changes = g.changes.Load()
	st.Resyncs = g.resyncs.Load()
	st.Errors = g.errors.Load()
	st.Delay = g.delay.Snapshot()
	return st
}
