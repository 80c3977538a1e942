package sqlflight

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlflight/sqlflight/internal/feed"
	"github.com/sqlflight/sqlflight/internal/identity"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/shared"
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

// feedCounters are a Shield's feeds, one per scope, and their counters
// (feed.Group).
type feedCounters = feed.Group

// scopeFeed is the change feed of one scope: its lifecycle (start, lease,
// back-off, state) is feed.Feed's, over the scope's feed.Scope.
type scopeFeed = feed.Feed

// feedHost is what the feed of one scope needs from its Shield
// (feed.Cache): the fleet's lease through the shared tier, the Shield's
// invalidations, and who the scope's server is.
type feedHost struct {
	s  *engine
	sc *scope
}

var _ feed.Cache = (*feedHost)(nil)

// startFeed starts the feed of sc, whose first real connection is rc,
// when the Shield has one, and waits until it is established (or, in a
// fleet, until it knows another instance holds it). It returns an error
// wrapping ErrFeedUnavailable when it cannot; sc then has no feed.
func (s *engine) startFeed(ctx context.Context, sc *scope, rc driver.Conn) error {
	if s.opts.Feed == FeedNone {
		return nil
	}
	fs := feed.Scope{
		Mode: string(s.opts.Feed), DSN: s.opts.FeedDSN, Conn: rc,
		Publication: s.opts.FeedPublication, LeaseTTL: s.opts.FeedLeaseTTL,
		Live: sc.live.Load, Logger: s.log, ErrAttr: errText.Attr, Classify: errText.Class, Group: &s.feedStats,
	}
	if s.tier != nil && sc.sharing() {
		fs.Fleet = sc.shared
	}
	f, err := fs.Start(ctx, &feedHost{s: s, sc: sc})
	if err != nil {
		return err
	}
	sc.feed.Store(f)
	if s.store.Closed() {
		f.Stop()
	}
	return nil
}

// Lease tries to take the fleet's feed lease on key through the shared
// tier.
func (h *feedHost) Lease(ctx context.Context, key string, ttl time.Duration) (feed.Lease, bool, error) {
	ts := h.s.tier
	lease, err := shared.CallFor(ts.State, ctx, func(c context.Context) (Lease, error) { return ts.T.Acquire(c, ts.NS, key, ttl) })
	if err != nil {
		return feed.Lease{}, false, err
	}
	return feed.Lease{Token: lease.Token, Version: lease.Version}, lease.Held, nil
}

// Renew extends the fleet's feed lease l on key through the shared tier.
func (h *feedHost) Renew(ctx context.Context, key string, l feed.Lease, ttl time.Duration) (bool, error) {
	ts := h.s.tier
	return shared.CallFor(ts.State, ctx, func(c context.Context) (bool, error) {
		return ts.T.Renew(c, ts.NS, key, Lease{Held: true, Token: l.Token, Version: l.Version}, ttl)
	})
}

// Release gives the fleet's feed lease l on key back through the shared
// tier.
func (h *feedHost) Release(ctx context.Context, key string, l feed.Lease) error {
	ts := h.s.tier
	return ts.Call(ctx, func(c context.Context) error {
		return ts.T.Release(c, ts.NS, key, Lease{Held: true, Token: l.Token, Version: l.Version})
	})
}

// Apply invalidates what committed changes may have changed, as writes
// through the Shield do, in this process and, with a shared tier, in the
// fleet (which hears of the tables): the rows they pin, the tables they
// write as a whole, or every table (rowlevel.Changes).
func (h *feedHost) Apply(cs []feed.Change) {
	tables, rows, known := rowlevel.Changes(cs, &h.s.rowCols, &h.s.schemaGen)
	h.s.bumpWrite(write{tables: tables, known: known, rows: rows})
}

// Server returns what the scope's first real connection's server said of
// itself.
func (h *feedHost) Server() (feed.Server, bool) {
	h.sc.idMu.Lock()
	defer h.sc.idMu.Unlock()
	if id := h.sc.server; id != nil {
		return feed.Server{System: id.System, Database: id.Database}, true
	}
	return feed.Server{}, false
}

// Identify asks the server of pc, a feed's connection, who it is
// (identity.OfPgx).
func (h *feedHost) Identify(ctx context.Context, pc *pgconn.PgConn) (feed.Server, bool, error) {
	id, ok, err := identity.OfPgx(ctx, pc)
	return feed.Server{System: id.System, Database: id.Database}, ok, err
}

// feedSnapshot fills the feed fields of st.
func (s *engine) feedSnapshot(st *Stats) {
	fs := s.feedStats.Snapshot()
	st.FeedLastError = fs.LastError
	st.FeedState, st.FeedLag = fs.State, fs.Lag
	if st.FeedState == "" && s.opts.Feed != FeedNone {
		st.FeedState = feed.Starting // no scope connected yet
	}
	st.FeedTransactions = fs.Transactions
	st.FeedChanges = fs.Changes
	st.FeedResyncs = fs.Resyncs
	st.FeedErrors = fs.Errors
	st.FeedDelay = fs.Delay
}
