package feed

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
)

// The modes of a Scope, as ParseMode reads them ("" is no feed).
const (
	ModeReplication = "replication" // Replicate
	ModeNotify      = "notify"      // Notify
)

// The defaults of a Scope.
const (
	// DefaultPublication is the publication a replication feed reads when
	// Scope.Publication is empty.
	DefaultPublication = "sqlflight"
	// DefaultLeaseTTL is how long a fleet's feed lease lasts without
	// renewal when Scope.LeaseTTL is not positive.
	DefaultLeaseTTL = 5 * time.Second
)

// ParseMode reads a mode as a DSN parameter spells it, in any case:
// ModeReplication, ModeNotify or "" (no feed); anything else is an error
// that names the two.
func ParseMode(v string) (string, error) {
	switch m := strings.ToLower(v); m {
	case ModeReplication, ModeNotify, "":
		return m, nil
	}
	return "", fmt.Errorf("want %q or %q", ModeReplication, ModeNotify)
}

// Cache is what the feed of one scope needs from the cache it feeds
// besides what its Scope says: the fleet's lease through the shared tier
// (Host's Lease, Renew and Release, called only when Scope.Fleet is set),
// the invalidations, and who the servers are.
type Cache interface {
	Lease(ctx context.Context, key string, ttl time.Duration) (l Lease, held bool, err error)
	Renew(ctx context.Context, key string, l Lease, ttl time.Duration) (bool, error)
	Release(ctx context.Context, key string, l Lease) error
	// Apply invalidates what the committed changes cs may have changed
	// (Host.Apply). A resync (Host.Bump) is an Apply of one change with an
	// empty Table: any table may have changed.
	Apply(cs []Change)
	// Server returns what the server of the scope's real connections said
	// of itself, false when it said nothing; Identify asks pc's server
	// (false: it tells nothing, an error: pc is unusable). Both are asked
	// only when Scope.DSN is set, for every new stream's connection.
	Server() (Server, bool)
	Identify(ctx context.Context, pc *pgconn.PgConn) (Server, bool, error)
}

// Server is what a server says of itself that tells two databases apart.
type Server struct {
	// System is pg_control_system().system_identifier; "" if the role may
	// not read it.
	System string
	// Database is the OID of the database.
	Database string
}

// Scope is the feed of one scope of a cache (a Shield's Options.Feed and
// its kin, and what the scope knows): Start runs it over a Cache.
type Scope struct {
	// Mode is the feed's source, ModeReplication or ModeNotify.
	Mode string
	// DSN is the feed's own DSN; with it, every stream checks that its
	// connection reaches the scope's database (Cache.Server). "" opens
	// the feed's connections with Conn's configuration.
	DSN string
	// Conn is the scope's first real connection: a pgx v5 connection
	// (*stdlib.Conn) unless DSN is set.
	Conn driver.Conn
	// Publication is the publication a replication feed reads; ""
	// means DefaultPublication.
	Publication string
	// Fleet is the scope's name in the fleet when it shares a tier:
	// with it, one instance of the fleet holds the feed, under a lease
	// whose key is derived from it. "" runs the feed without a lease.
	Fleet string
	// LeaseTTL is how long the fleet's lease lasts without renewal; not
	// positive means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Live returns how many connections of the scope are open
	// (Host.Live).
	Live func() int64
	// Logger gets the feed's log lines, their "error" attribute as
	// ErrAttr describes the error: without its text.
	Logger  *slog.Logger
	ErrAttr func(error) slog.Attr
	// Classify describes an error without its text (Config.Classify,
	// Source.Classify).
	Classify func(error) string
	// Group is the set of feeds the feed is added to once started
	// (Config.Group).
	Group *Group
}

// scopeHost is the Host of a Scope's feed: streams of its source, the
// rest through its Cache.
type scopeHost struct {
	Cache
	sc  Scope
	cfg *pgx.ConnConfig // DSN's, or Conn's
}

var _ Host = (*scopeHost)(nil)

// Host returns the Host of the scope's feed over c, or an error wrapping
// ErrUnavailable that says why the scope cannot have one: an unknown
// Mode, a Publication that ValidPublication refuses, a DSN that does not
// parse (its value is not shown), or no DSN and a Conn that is not pgx's.
func (sc Scope) Host(c Cache) (Host, error) {
	switch sc.Mode {
	case ModeReplication, ModeNotify:
	default:
		return nil, Unavailable(nil, "unknown Options.Feed %q (want %q or %q)", sc.Mode, ModeReplication, ModeNotify)
	}
	if sc.Publication == "" {
		sc.Publication = DefaultPublication
	}
	if sc.Mode == ModeReplication && !ValidPublication(sc.Publication) {
		return nil, Unavailable(nil, "Options.FeedPublication must be 1 to 63 letters, digits, '_' or '$'")
	}
	h := &scopeHost{Cache: c, sc: sc}
	switch pc, ok := sc.Conn.(*stdlib.Conn); {
	case sc.DSN != "":
		var err error
		if h.cfg, err = pgx.ParseConfig(sc.DSN); err != nil {
			// pgx's error may quote the DSN: not shown.
			return nil, Unavailable(nil, "Options.FeedDSN does not parse as a PostgreSQL DSN (the value is not shown)")
		}
	case ok:
		h.cfg = pc.Conn().Config()
	default:
		return nil, Unavailable(nil, "a change feed needs a pgx connection, and this scope's parent driver is not pgx v5: set Options.FeedDSN (sqlflight.feed_dsn) to a DSN for the feed")
	}
	return h, nil
}

// Config returns the Config of the scope's feed: its Mode, Classify and
// Group and, in a fleet, the lease's key (a digest of Fleet) and TTL.
func (sc Scope) Config() Config {
	cfg := Config{Mode: sc.Mode, Classify: sc.Classify, Group: sc.Group}
	if sc.Fleet != "" {
		sum := sha256.Sum256([]byte("sqlflight feed\x00" + sc.Fleet))
		cfg.Fleet = "feed-" + hex.EncodeToString(sum[:])
		cfg.LeaseTTL = sc.LeaseTTL
		if cfg.LeaseTTL <= 0 {
			cfg.LeaseTTL = DefaultLeaseTTL
		}
	}
	return cfg
}

// Start starts the scope's feed over c and waits until it is established,
// or, in a fleet, until it knows another instance holds it (Feed.Start);
// the feed is then added to Group and goes on in the background. It
// returns the error of Host, or of Feed.Start, when it cannot: the scope
// then has no feed.
func (sc Scope) Start(ctx context.Context, c Cache) (*Feed, error) {
	h, err := sc.Host(c)
	if err != nil {
		return nil, err
	}
	f := New(h, sc.Config())
	if err := f.Start(ctx); err != nil {
		return nil, err
	}
	f.cfg.Group.Add(f)
	return f, nil
}

// Stream runs one stream of the scope's source with the feed's connection
// configuration.
func (h *scopeHost) Stream(ctx context.Context, sink Sink) error {
	src := Source{Conn: h.cfg, Classify: h.sc.Classify}
	if h.sc.DSN != "" {
		src.SameServer = h.sameServer
	}
	if h.sc.Mode == ModeNotify {
		return Notify(ctx, src, sink)
	}
	src.Publication = h.sc.Publication
	return Replicate(ctx, src, sink)
}

// sameServer checks that pc, a connection of a feed with its own DSN,
// reaches the scope's database: the same database (its OID) of the same
// server (its system identifier, where both roles may read it). A feed
// watching another database would report nothing and look current.
func (h *scopeHost) sameServer(ctx context.Context, pc *pgconn.PgConn) error {
	want, known := h.Server()
	got, ok, err := h.Identify(ctx, pc)
	switch {
	case err != nil:
		return Unavailable(err, "cannot tell which database Options.FeedDSN reaches (%s)", Source{Classify: h.sc.Classify}.classify(err))
	case !ok || !known:
		return Unavailable(nil, "cannot tell whether Options.FeedDSN reaches the scope's database")
	case got.Database != want.Database || got.System != "" && want.System != "" && got.System != want.System:
		return Unavailable(nil, "Options.FeedDSN reaches another database than the scope's")
	}
	return nil
}

// Bump drops every cached entry: an Apply of any table.
func (h *scopeHost) Bump() { h.Apply(everything()) }

// Live returns how many connections of the scope are open.
func (h *scopeHost) Live() int64 { return h.sc.Live() }

// Log writes a log line of the feed to the scope's Logger, its "error"
// attribute as ErrAttr describes the error.
func (h *scopeHost) Log(level slog.Level, msg string, attrs ...any) {
	out := make([]any, 0, len(attrs))
	for i := 0; i < len(attrs); i++ {
		if k, ok := attrs[i].(string); ok && k == "error" && i+1 < len(attrs) {
			err, _ := attrs[i+1].(error)
			out = append(out, h.sc.ErrAttr(err))
			i++
			continue
		}
		out = append(out, attrs[i])
	}
	h.sc.Logger.Log(context.Background(), level, msg, out...)
}
