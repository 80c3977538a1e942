package sqlflight

import (
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlflight/sqlflight/internal/feed"
)

// The change feed: every committed change to the database, whoever made it,
// turned into invalidations (see Options.Feed).
//
// Each PostgreSQL scope of a Shield with a feed runs one: a dedicated
// connection of its own (not from the pool, never a spare), opened with the
// configuration the scope's first real connection used. The first Connect
// of the scope opens it and waits until it streams; if it cannot (the
// server or the role lacks what the feed needs), that Connect fails with an
// error wrapping ErrFeedUnavailable and the next Connect tries again. Once
// established, a feed that breaks is opened again in the background, with
// a back-off; everything that happened while it was away is unknown, so
// once the new stream is established the Shield drops every cached entry
// (a resync). When the scope's last connection closes (DB.Close), its feed
// closes too; the next Connect opens it again (and resyncs).
//
// With a shared tier, one instance of the fleet holds the feed of a scope
// (a lease in the tier under a name derived from the scope's fleet name):
// it publishes what the feed reports through the tier's invalidations; the
// others open no feed connection. When the holder goes away (its lease
// runs out, or it releases it on Close), another instance takes the feed
// over and resyncs the whole fleet.
//
// A feed never makes anything fresher than its TTLs allow: entries keep
// their deadlines whatever the feed's state; a feed that is down or late
// only means writes by other clients are seen later (at worst at the end
// of the entries' TTLs).

// FeedMode selects the source of a Shield's change feed (Options.Feed).
type FeedMode string

const (
	// FeedNone runs no feed: only writes through the Shield invalidate.
	FeedNone FeedMode = ""
	// FeedReplication follows PostgreSQL's logical replication stream
	// (the pgoutput plugin, a publication, a temporary slot). The server
	// needs wal_level = logical and a free replication slot and WAL
	// sender; the role needs the REPLICATION attribute, and the
	// publication (Options.FeedPublication) must exist: the feed never
	// makes one (a table in a publication of updates and deletes needs a
	// replica identity for UPDATE and DELETE).
	FeedReplication FeedMode = "replication"
	// FeedNotify LISTENs for the notifications of the triggers that
	// `sqlflight triggers install` creates.
	FeedNotify FeedMode = "notify"
)

// Defaults of the feed Options.
const (
	// DefaultFeedPublication is the publication a replication feed reads
	// when Options.FeedPublication is empty (CREATE PUBLICATION sqlflight
	// FOR ALL TABLES, or FOR TABLE …).
	DefaultFeedPublication = "sqlflight"
	// DefaultFeedLeaseTTL is how long a fleet's feed holder's lease lasts
	// without renewal (Options.FeedLeaseTTL).
	DefaultFeedLeaseTTL = 5 * time.Second
)

// ErrFeedUnavailable is wrapped by the error of the first Connect of a
// scope whose change feed cannot be established (Options.Feed): the
// error's text says what is missing — wal_level = logical, the role's
// REPLICATION attribute, the publication or the privilege to create it, a
// free replication slot or WAL sender, installed triggers — and errors.As
// finds the server's *pgconn.PgError when there is one. It never holds a
// password or data of the database.
var ErrFeedUnavailable = feed.ErrUnavailable

// Feed states (Stats.FeedState).
const (
	feedStarting = "starting" // opening its connection, or waiting to open it again
	feedCurrent  = "current"  // streaming, caught up
	feedLagging  = "lagging"  // streaming, more than feedLagLimit behind
	feedDown     = "down"     // failed; tried again after a back-off
	feedStandby  = "standby"  // another instance of the fleet holds it
)

const (
	// feedLagLimit is how far behind the server a streaming feed may be
	// before its state is "lagging".
	feedLagLimit = time.Second
	// feedStartTimeout bounds the first establishment of a feed, which the
	// first Connect of its scope waits for (along with its context).
	feedStartTimeout = 30 * time.Second
	// The back-off between attempts to open a feed that failed.
	feedBackoffMin = 100 * time.Millisecond
	feedBackoffMax = 5 * time.Second
)

// validPublication reports whether name may name a publication: letters,
// digits, '_' and '$', at most 63 bytes (it is quoted as given, so case
// matters).
func validPublication(name string) bool { return feed.ValidPublication(name) }

// feedCounters are a Shield's feed counters, over its scopes.
type feedCounters struct {
	transactions, changes, resyncs, errors atomic.Uint64
	delay                                  histogram
	mu                                     sync.Mutex
	lastError                              string
	feeds                                  map[*scopeFeed]struct{}
}

// scopeFeed is the change feed of one scope.
type scopeFeed struct {
	s     *Shield
	sc    *scope
	mode  FeedMode
	cfg   *pgx.ConnConfig // Options.FeedDSN's, or the scope's first real connection's
	own   bool            // cfg is FeedDSN's: check that it reaches the scope's database
	fleet string          // the lease's key in the tier; "" when the feed is this process's alone

	state atomic.Value // string
	lag   atomic.Int64 // nanoseconds
	// established counts the streams this feed established: every one
	// after the first (and, in a fleet, every one) resyncs.
	established atomic.Uint64

	mu      sync.Mutex
	cancel  context.CancelFunc // stops the running loop; nil when none runs
	done    chan struct{}      // closed when the running loop returned
	stopped bool               // the Shield closed: never again
}

// startFeed starts the feed of sc, whose first real connection is rc,
// when the Shield has one, and waits until it is established (or, in a
// fleet, until it knows another instance holds it). It returns an error
// wrapping ErrFeedUnavailable when it cannot; sc then has no feed.
func (s *Shield) startFeed(ctx context.Context, sc *scope, rc driver.Conn) error {
	mode := s.opts.Feed
	if mode == FeedNone {
		return nil
	}
	switch mode {
	case FeedReplication, FeedNotify:
	default:
		return feed.Unavailable(nil, "unknown Options.Feed %q (want %q or %q)", string(mode), FeedReplication, FeedNotify)
	}
	if mode == FeedReplication && !validPublication(s.feedPublication()) {
		return feed.Unavailable(nil, "Options.FeedPublication must be 1 to 63 letters, digits, '_' or '$'")
	}
	var cfg *pgx.ConnConfig
	own := s.opts.FeedDSN != ""
	switch pc, ok := rc.(*stdlib.Conn); {
	case own:
		var err error
		if cfg, err = pgx.ParseConfig(s.opts.FeedDSN); err != nil {
			// pgx's error may quote the DSN: not shown.
			return feed.Unavailable(nil, "Options.FeedDSN does not parse as a PostgreSQL DSN (the value is not shown)")
		}
	case ok:
		cfg = pc.Conn().Config()
	default:
		return feed.Unavailable(nil, "a change feed needs a pgx connection, and this scope's parent driver is not pgx v5: set Options.FeedDSN (sqlflight.feed_dsn) to a DSN for the feed")
	}
	f := &scopeFeed{s: s, sc: sc, mode: mode, cfg: cfg, own: own}
	f.state.Store(feedStarting)
	if s.tier != nil && sc.sharing() {
		sum := sha256.Sum256([]byte("sqlflight feed\x00" + sc.shared))
		f.fleet = "feed-" + hex.EncodeToString(sum[:])
	}
	ctx, cancel := context.WithTimeout(ctx, feedStartTimeout)
	defer cancel()
	first := make(chan error, 1)
	if !f.start(first) {
		return nil // the Shield closed meanwhile
	}
	select {
	case err := <-first:
		if err != nil {
			f.stop()
			return err
		}
	case <-ctx.Done():
		f.stop()
		return feed.Unavailable(ctx.Err(), "the feed was not established before the connection's context ended")
	}
	s.feedStats.mu.Lock()
	if s.feedStats.feeds == nil {
		s.feedStats.feeds = map[*scopeFeed]struct{}{}
	}
	s.feedStats.feeds[f] = struct{}{}
	s.feedStats.mu.Unlock()
	sc.feed.Store(f)
	if s.isClosed() {
		f.stop()
	}
	return nil
}

// feedPublication is the publication a replication feed reads.
func (s *Shield) feedPublication() string {
	if s.opts.FeedPublication != "" {
		return s.opts.FeedPublication
	}
	return DefaultFeedPublication
}

// start runs the feed's loop unless it runs; first, if not nil, hears how
// the first attempt went (nil: established, or in a fleet, another holds
// it) and the loop ends after a failed first attempt.
func (f *scopeFeed) start(first chan error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped || f.cancel != nil {
		return !f.stopped
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go f.loop(ctx, f.done, first)
	return true
}

// ensure runs the feed again if it was stopped because its scope had no
// connection left.
func (f *scopeFeed) ensure() {
	f.mu.Lock()
	running := f.cancel != nil || f.stopped
	f.mu.Unlock()
	if !running {
		f.start(nil)
	}
}

// pause stops the loop (the scope's last connection closed); ensure runs
// it again.
func (f *scopeFeed) pause() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.cancel, f.done = nil, nil
	f.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// pauseIfIdle pauses the feed if its scope has no open connection (one
// that opened since resumes it; ensure and this are ordered by f.mu).
func (f *scopeFeed) pauseIfIdle() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	if f.sc.live.Load() > 0 || cancel == nil {
		f.mu.Unlock()
		return
	}
	f.cancel, f.done = nil, nil
	f.mu.Unlock()
	cancel()
	<-done
}

// stop ends the feed for good.
func (f *scopeFeed) stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.pause()
}

// closeFeeds ends every feed of s (Shield.Close).
func (s *Shield) closeFeeds() {
	s.feedStats.mu.Lock()
	feeds := make([]*scopeFeed, 0, len(s.feedStats.feeds))
	for f := range s.feedStats.feeds {
		feeds = append(feeds, f)
	}
	s.feedStats.mu.Unlock()
	for _, f := range feeds {
		f.stop()
	}
}

// setState records the feed's state and logs the change.
func (f *scopeFeed) setState(to string, err error) {
	from, _ := f.state.Swap(to).(string)
	if from == to {
		return
	}
	switch to {
	case feedDown, feedLagging:
		attrs := []any{"mode", string(f.mode), "from", from, errAttr(err), "lag", time.Duration(f.lag.Load())}
		// An ErrFeedUnavailable's reason is the feed's own words (no data,
		// no secret): it says what to fix.
		if reason, ok := feed.Reason(err); ok {
			attrs = append(attrs, "reason", reason)
		}
		f.s.log.Warn("sqlflight: change feed "+to, attrs...)
	default:
		f.s.log.Info("sqlflight: change feed "+to, "mode", string(f.mode), "from", from)
	}
}

// fail records an error of the feed.
func (f *scopeFeed) fail(err error) {
	f.s.feedStats.errors.Add(1)
	f.s.feedStats.mu.Lock()
	f.s.feedStats.lastError = errorClass(err)
	f.s.feedStats.mu.Unlock()
	f.setState(feedDown, err)
}

// loop runs the feed until ctx ends: in a fleet, only while it holds the
// lease; after a failure, again after a back-off.
func (f *scopeFeed) loop(ctx context.Context, done chan struct{}, first chan error) {
	defer close(done)
	backoff := feedBackoffMin
	for ctx.Err() == nil {
		sctx, release, held := f.hold(ctx)
		if !held {
			f.setState(feedStandby, nil)
			if first != nil {
				first <- nil // another instance holds it: the Connect goes on
				first = nil
			}
			if !sleepCtx(ctx, f.leaseTTL()/3) {
				return
			}
			continue
		}
		if f.state.Load() == feedStandby {
			f.setState(feedStarting, nil)
		}
		ready := false
		err := f.session(sctx, func() {
			ready = true
			backoff = feedBackoffMin
			// What happened before this stream is unknown: drop it all.
			if f.established.Add(1) > 1 || f.fleet != "" {
				f.s.bump(nil, false)
				f.s.feedStats.resyncs.Add(1)
			}
			f.lag.Store(0)
			f.setState(feedCurrent, nil)
			if first != nil {
				first <- nil
				first = nil
			}
		})
		release()
		if ctx.Err() != nil {
			return
		}
		if sctx.Err() != nil {
			// The lease was lost: another instance may hold the feed now.
			f.setState(feedStandby, nil)
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
		backoff = min(backoff*2, feedBackoffMax)
	}
}

// session runs one stream of the feed until it fails or ctx ends; ready is
// called once the stream is established.
func (f *scopeFeed) session(ctx context.Context, ready func()) error {
	src := feed.Source{Conn: f.cfg, SameServer: f.sameServer, Classify: errorClass}
	sink := feedSink{f: f, ready: ready}
	if f.mode == FeedNotify {
		return feed.Notify(ctx, src, sink)
	}
	src.Publication = f.s.feedPublication()
	return feed.Replicate(ctx, src, sink)
}

// feedSink is what one stream of a scope's feed reports to: the Shield's
// invalidations, the feed's counters, lag and log.
type feedSink struct {
	f     *scopeFeed
	ready func()
}

// Ready tells the feed's loop the stream is established.
func (k feedSink) Ready() { k.ready() }

// Apply applies one committed transaction's changes and counts it.
func (k feedSink) Apply(cs []feed.Change, commit time.Time) { k.f.applyAt(changesOf(cs), commit) }

// Reapply applies changes again, uncounted (the replication source's
// visibility check).
func (k feedSink) Reapply(cs []feed.Change) { k.f.s.applyChanges(changesOf(cs)) }

// CaughtUp records that the feed is not behind the server.
func (k feedSink) CaughtUp() { k.f.noteLag(0) }

// Resync drops every cached entry: the source missed changes.
func (k feedSink) Resync() {
	k.f.s.bump(nil, false)
	k.f.s.feedStats.resyncs.Add(1)
}

// Warn logs a warning of the source, its error without its text.
func (k feedSink) Warn(msg string, err error) { k.f.s.log.Warn(msg, errAttr(err)) }

// sameServer checks, when the feed connects with Options.FeedDSN, that its
// connection pc reaches the scope's database: the same database (its OID)
// of the same server (its system identifier, where both roles may read
// it). A feed watching another database would report nothing and look
// current.
func (f *scopeFeed) sameServer(ctx context.Context, pc *pgconn.PgConn) error {
	if !f.own {
		return nil
	}
	f.sc.idMu.Lock()
	want := f.sc.server
	f.sc.idMu.Unlock()
	got, ok, err := pgxIdentity(ctx, pc)
	switch {
	case err != nil:
		return feed.Unavailable(err, "cannot tell which database Options.FeedDSN reaches (%s)", errorClass(err))
	case !ok || want == nil:
		return feed.Unavailable(nil, "cannot tell whether Options.FeedDSN reaches the scope's database")
	case got.database != want.database || got.system != "" && want.system != "" && got.system != want.system:
		return feed.Unavailable(nil, "Options.FeedDSN reaches another database than the scope's")
	}
	return nil
}

// applyAt applies the changes of one committed transaction, committed at
// commitTime on the server's clock (zero: not known), and counts it.
func (f *scopeFeed) applyAt(cs []change, commitTime time.Time) {
	f.s.applyChanges(cs)
	st := &f.s.feedStats
	st.transactions.Add(1)
	st.changes.Add(uint64(len(cs)))
	if commitTime.IsZero() {
		return
	}
	d := max(time.Since(commitTime), 0)
	st.delay.observe(d)
	f.noteLag(d)
}

// noteLag records how far behind the server the feed is.
func (f *scopeFeed) noteLag(d time.Duration) {
	f.lag.Store(int64(d))
	switch s, _ := f.state.Load().(string); {
	case d > feedLagLimit && s == feedCurrent:
		f.setState(feedLagging, nil)
	case d <= feedLagLimit && s == feedLagging:
		f.setState(feedCurrent, nil)
	}
}

// leaseTTL is how long the fleet's feed lease lasts.
func (f *scopeFeed) leaseTTL() time.Duration {
	if d := f.s.opts.FeedLeaseTTL; d > 0 {
		return d
	}
	return DefaultFeedLeaseTTL
}

// hold takes the fleet's feed lease (without a fleet, there is nothing to
// take) and keeps renewing it: the context it returns ends when the lease
// is lost or could not be renewed in time. release gives it back.
func (f *scopeFeed) hold(ctx context.Context) (context.Context, func(), bool) {
	ts := f.s.tier
	if f.fleet == "" || ts == nil {
		return ctx, func() {}, true
	}
	ttl := f.leaseTTL()
	var lease Lease
	err := ts.call(ctx, func(c context.Context) error {
		var err error
		lease, err = ts.t.Acquire(c, ts.ns, f.fleet, ttl)
		return err
	})
	if err != nil || !lease.Held {
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
			var held bool
			err := ts.call(hctx, func(c context.Context) error {
				var err error
				held, err = ts.t.Renew(c, ts.ns, f.fleet, lease, ttl)
				return err
			})
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
		_ = ts.call(context.Background(), func(c context.Context) error {
			return ts.t.Release(c, ts.ns, f.fleet, lease)
		})
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

// feedSnapshot fills the feed fields of st.
func (s *Shield) feedSnapshot(st *Stats) {
	c := &s.feedStats
	c.mu.Lock()
	st.FeedLastError = c.lastError
	rank := map[string]int{feedCurrent: 1, feedStandby: 2, feedStarting: 3, feedLagging: 4, feedDown: 5}
	for f := range c.feeds {
		state, _ := f.state.Load().(string)
		if rank[state] > rank[st.FeedState] {
			st.FeedState = state
		}
		if f.fleet == "" || state != feedStandby {
			st.FeedLag = max(st.FeedLag, time.Duration(f.lag.Load()))
		}
	}
	c.mu.Unlock()
	if st.FeedState == "" && s.opts.Feed != FeedNone {
		st.FeedState = feedStarting // no scope connected yet
	}
	st.FeedTransactions = c.transactions.Load()
	st.FeedChanges = c.changes.Load()
	st.FeedResyncs = c.resyncs.Load()
	st.FeedErrors = c.errors.Load()
	st.FeedDelay = c.delay.snapshot()
}

// parseFeedMode reads the sqlflight.feed DSN parameter.
func parseFeedMode(v string) (FeedMode, error) {
	switch m := FeedMode(strings.ToLower(v)); m {
	case FeedReplication, FeedNotify, FeedNone:
		return m, nil
	}
	return "", fmt.Errorf("want %q or %q", FeedReplication, FeedNotify)
}
