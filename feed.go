package sqlflight

import (
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlflight/sqlflight/internal/feed"
	"github.com/sqlflight/sqlflight/internal/identity"
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

// validPublication reports whether name may name a publication: letters,
// digits, '_' and '$', at most 63 bytes (it is quoted as given, so case
// matters).
func validPublication(name string) bool { return feed.ValidPublication(name) }

// feedCounters are a Shield's feeds, one per scope, and their counters
// (feed.Group).
type feedCounters = feed.Group

// scopeFeed is the change feed of one scope: its lifecycle (start, lease,
// back-off, state) is feed.Feed's, over the scope's feedHost.
type scopeFeed = feed.Feed

// feedHost is what the feed of one scope needs from its Shield (feed.Host):
// its source's stream, the fleet's lease through the shared tier, the
// Shield's invalidations, its log, and the scope's open connections.
type feedHost struct {
	s    *Shield
	sc   *scope
	mode FeedMode
	cfg  *pgx.ConnConfig // Options.FeedDSN's, or the scope's first real connection's
	own  bool            // cfg is FeedDSN's: check that it reaches the scope's database
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
	fc := feed.Config{Mode: string(mode), Classify: errorClass, Group: &s.feedStats}
	if s.tier != nil && sc.sharing() {
		sum := sha256.Sum256([]byte("sqlflight feed\x00" + sc.shared))
		fc.Fleet = "feed-" + hex.EncodeToString(sum[:])
		fc.LeaseTTL = s.opts.FeedLeaseTTL // how long the fleet's feed lease lasts
		if fc.LeaseTTL <= 0 {
			fc.LeaseTTL = DefaultFeedLeaseTTL
		}
	}
	f := feed.New(&feedHost{s: s, sc: sc, mode: mode, cfg: cfg, own: own}, fc)
	if err := f.Start(ctx); err != nil {
		return err
	}
	s.feedStats.Add(f)
	sc.feed.Store(f)
	if s.isClosed() {
		f.Stop()
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

// closeFeeds ends every feed of s (Shield.Close).
func (s *Shield) closeFeeds() { s.feedStats.Stop() }

// Stream runs one stream of the scope's feed, NOTIFY or replication, with
// the feed's connection configuration.
func (h *feedHost) Stream(ctx context.Context, sink feed.Sink) error {
	src := feed.Source{Conn: h.cfg, SameServer: h.sameServer, Classify: errorClass}
	if h.mode == FeedNotify {
		return feed.Notify(ctx, src, sink)
	}
	src.Publication = h.s.feedPublication()
	return feed.Replicate(ctx, src, sink)
}

// Lease tries to take the fleet's feed lease on key through the shared
// tier.
func (h *feedHost) Lease(ctx context.Context, key string, ttl time.Duration) (feed.Lease, bool, error) {
	ts := h.s.tier
	var lease Lease
	err := ts.Call(ctx, func(c context.Context) error {
		var err error
		lease, err = ts.T.Acquire(c, ts.NS, key, ttl)
		return err
	})
	return feed.Lease{Token: lease.Token, Version: lease.Version}, err == nil && lease.Held, err
}

// tierLease is the tier's form of a lease Lease took.
func tierLease(l feed.Lease) Lease { return Lease{Held: true, Token: l.Token, Version: l.Version} }

// Renew extends the fleet's feed lease l on key through the shared tier.
func (h *feedHost) Renew(ctx context.Context, key string, l feed.Lease, ttl time.Duration) (bool, error) {
	ts := h.s.tier
	var held bool
	err := ts.Call(ctx, func(c context.Context) error {
		var err error
		held, err = ts.T.Renew(c, ts.NS, key, tierLease(l), ttl)
		return err
	})
	return held, err
}

// Release gives the fleet's feed lease l on key back through the shared
// tier.
func (h *feedHost) Release(ctx context.Context, key string, l feed.Lease) error {
	ts := h.s.tier
	return ts.Call(ctx, func(c context.Context) error {
		return ts.T.Release(c, ts.NS, key, tierLease(l))
	})
}

// Bump drops every cached entry, in the fleet too.
func (h *feedHost) Bump() { h.s.bump(nil, false) }

// Apply invalidates what the changes may have changed (applyChanges).
func (h *feedHost) Apply(cs []feed.Change) { h.s.applyChanges(changesOf(cs)) }

// Log writes a log line of the feed to the Shield's logger, its "error"
// attribute as errAttr describes the error: without its text.
func (h *feedHost) Log(level slog.Level, msg string, attrs ...any) {
	out := make([]any, 0, len(attrs))
	for i := 0; i < len(attrs); i++ {
		if k, ok := attrs[i].(string); ok && k == "error" && i+1 < len(attrs) {
			err, _ := attrs[i+1].(error)
			out = append(out, errAttr(err))
			i++
			continue
		}
		out = append(out, attrs[i])
	}
	h.s.log.Log(context.Background(), level, msg, out...)
}

// Live returns how many virtual connections of the scope are open.
func (h *feedHost) Live() int64 { return h.sc.live.Load() }

// sameServer checks, when the feed connects with Options.FeedDSN, that its
// connection pc reaches the scope's database: the same database (its OID)
// of the same server (its system identifier, where both roles may read
// it). A feed watching another database would report nothing and look
// current.
func (h *feedHost) sameServer(ctx context.Context, pc *pgconn.PgConn) error {
	if !h.own {
		return nil
	}
	h.sc.idMu.Lock()
	want := h.sc.server
	h.sc.idMu.Unlock()
	got, ok, err := identity.OfPgx(ctx, pc)
	switch {
	case err != nil:
		return feed.Unavailable(err, "cannot tell which database Options.FeedDSN reaches (%s)", errorClass(err))
	case !ok || want == nil:
		return feed.Unavailable(nil, "cannot tell whether Options.FeedDSN reaches the scope's database")
	case got.Database != want.Database || got.System != "" && want.System != "" && got.System != want.System:
		return feed.Unavailable(nil, "Options.FeedDSN reaches another database than the scope's")
	}
	return nil
}

// feedSnapshot fills the feed fields of st.
func (s *Shield) feedSnapshot(st *Stats) {
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

// parseFeedMode reads the sqlflight.feed DSN parameter.
func parseFeedMode(v string) (FeedMode, error) {
	switch m := FeedMode(strings.ToLower(v)); m {
	case FeedReplication, FeedNotify, FeedNone:
		return m, nil
	}
	return "", fmt.Errorf("want %q or %q", FeedReplication, FeedNotify)
}
