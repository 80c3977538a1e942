// Package feed holds the sources of sqlflight's change feed: the streams
// that report every committed change to a PostgreSQL database, whoever made
// it, so that a cache can invalidate what the changes may have changed.
//
// There are two sources. Notify follows the queue of change records that
// the triggers of InstallTriggersSQL write, woken by their notifications on
// NotifyChannel; Replicate follows the logical replication stream of the
// pgoutput plugin (a temporary slot, an existing publication). Each runs
// one stream on connections of its own until the stream fails or its
// context ends, and reports to a Sink: Ready once established, Apply for
// each committed transaction's changes (Change), in commit order, Resync
// when changes may have been missed, CaughtUp when it has applied all the
// server sent, Warn for what deserves a log line. Listen is the NOTIFY
// source on a connection the caller opened. A replication stream applies
// each transaction a second time (Reapply) once new snapshots see it: its
// Commit message arrives before the transaction is visible.
//
// Guarantees: a source reports nothing that was not committed, and reports
// every committed change to the tables it follows while its stream runs, or
// calls Resync (a gap: a backlog too large to read, or reads too far
// apart). A Change names its table as the server does (schema.table) or,
// with an empty Table, says that any table may have changed; its row values
// are PostgreSQL's text forms, and a column a source does not know is left
// out. An error that says what the server or the role lacks wraps
// ErrUnavailable (Reason tells its words), and never holds a password or
// data of the database.
//
// Feed is the lifecycle of one feed, over a Host (the cache it feeds, which
// also runs the streams): Start waits for the first stream (30 s at most);
// a stream that fails is opened again after a back-off (100 ms doubling to
// 5 s, jittered); in a fleet (Config.Fleet) the feed streams only while it
// holds the lease the Host takes through the shared tier, renewed every
// third of its TTL, and is Standby while another instance holds it.
// PauseIfIdle, Ensure and Stop pause, resume and end it. Its state is
// Starting, Current, Lagging (over a second behind the server), Down or
// Standby; each change is logged. A Group is a set of feeds and their
// counters.
//
// Guarantees of a Feed: every stream after its first, and every stream in
// a fleet, resyncs (Host.Bump) once established, before it applies
// anything; no stream runs after Stop, or after PauseIfIdle until Ensure;
// a stream in a fleet runs only while the lease is held, and ends before
// the lease may have run out when it cannot be renewed.
//
// Scope is the feed of one scope of a cache, over a Cache (the fleet's
// lease, the invalidations, who the servers are): Scope.Start checks the
// scope's options (the mode, the publication, the feed's own DSN or a pgx
// connection to take the configuration of), derives the fleet's lease key
// from the scope's fleet name, and starts a Feed whose Host streams from
// the scope's source. A feed with a DSN of its own streams only from the
// scope's database (the same database OID of the same system). A resync is
// an Apply of a change of any table.
//
// What it does not do: a source keeps no state across streams (what
// happened between two streams is unknown; the Feed resyncs), takes no
// lease and counts nothing; nothing here decides what a change
// invalidates (the Host's, or the Cache's, Apply does). It never creates a
// publication, and installs no trigger by itself.
package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/sqlflight/sqlflight/internal/errtext"
)

// Change is one committed change to a table as a source reports it (a row
// inserted, updated or deleted, or the table truncated), made by any client
// of the database.
type Change struct {
	// Table is the changed table, schema-qualified as the server names it
	// (public.items); "" means any table may have changed.
	Table string
	// Whole is set when the change may touch any row of the table: a
	// TRUNCATE, or a change whose rows the source could not report.
	Whole bool
	// Old and New are the row's column values before and after the
	// change, in PostgreSQL's text form, for the columns the source knows
	// (for an UPDATE or DELETE, Old often holds the replica identity's
	// columns alone). Old is nil for an INSERT, New for a DELETE; a column
	// missing from a map is unknown, not NULL (a NULL is reported as a nil
	// value). The maps may be shared between changes: they are read, never
	// written.
	Old, New map[string]*string
}

// Sink is what a source reports to. Its methods may be called from more
// than one goroutine of a stream (a replication stream reapplies from its
// visibility check), but never after the source returned.
type Sink interface {
	// Ready is called once per stream, when it is established: listening
	// with the queue's place read, or streaming from a new slot.
	Ready()
	// Apply applies the changes of one committed transaction (or one
	// NOTIFY record), read for the first time; commit is its commit time
	// on the server's clock, zero when the source does not know it.
	Apply(cs []Change, commit time.Time)
	// Reapply applies again changes Apply had, now that new snapshots see
	// their transactions (the replication source's visibility check): the
	// same invalidation, not a new transaction.
	Reapply(cs []Change)
	// CaughtUp reports that the stream has applied everything the server
	// sent (a replication keepalive between transactions): no lag.
	CaughtUp()
	// Resync reports that anything may have changed: the source skipped
	// what it could not read.
	Resync()
	// Warn reports something worth a log line that does not end the
	// stream; err must be logged without its text.
	Warn(msg string, err error)
}

// Source says how a source connects and what it checks besides.
type Source struct {
	// Conn is the configuration of the feed's connections (the scope's, or
	// Options.FeedDSN's); it is copied, never modified.
	Conn *pgx.ConnConfig
	// Publication is the publication the replication source reads; it must
	// satisfy ValidPublication (it is written into SQL as given).
	Publication string
	// SameServer, if not nil, checks that a new connection of the feed
	// reaches the right database; its error ends the stream.
	SameServer func(ctx context.Context, pc *pgconn.PgConn) error
	// Classify describes an error without its text (SQLSTATE and class,
	// or a fixed description) for the reasons of errors; nil describes an
	// error by its Go type alone.
	Classify func(error) string
}

// ValidPublication reports whether name may name a publication: letters,
// digits, '_' and '$', at most 63 bytes (it is quoted as given, so case
// matters).
func ValidPublication(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for _, r := range name {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '$') {
			return false
		}
	}
	return true
}

// classify describes err as s.Classify does.
func (s Source) classify(err error) string {
	if s.Classify != nil {
		return s.Classify(err)
	}
	return fmt.Sprintf("error of type %T", err)
}

// sameServer runs s.SameServer, if set.
func (s Source) sameServer(ctx context.Context, pc *pgconn.PgConn) error {
	if s.SameServer == nil {
		return nil
	}
	return s.SameServer(ctx, pc)
}

// dial opens an ordinary connection of the feed's own with s.Conn.
func (s Source) dial(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.Conn.Copy()
	// The scope's config comes from a pooled connection, whose
	// OnNotification buffers into that connection; pgx installs the feed
	// connection's own only when it is nil.
	cfg.OnNotification = nil
	// The listener waits with deadlines: a cancel request would reach the
	// server and could cancel its next statement.
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// closeSoon closes a feed's connection, waiting at most a second.
func closeSoon(conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(cctx)
}

// ErrUnavailable is wrapped by the errors that say why a feed cannot be
// established or cannot go on (what the server, the role or the triggers
// lack); it is the root's ErrFeedUnavailable, the same value.
var ErrUnavailable = errors.New("sqlflight: change feed unavailable")

// unavailableError is an ErrUnavailable with its reason and cause.
type unavailableError struct {
	reason string
	cause  error
}

func (e *unavailableError) Error() string   { return ErrUnavailable.Error() + ": " + e.reason }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// Unavailable returns an error wrapping ErrUnavailable and cause (which may
// be nil) whose text is ErrUnavailable's followed by reason, formatted with
// args. The reason must be the feed's own words: no data, no secret.
func Unavailable(cause error, reason string, args ...any) error {
	return &unavailableError{reason: fmt.Sprintf(reason, args...), cause: cause}
}

// Reason returns the reason of the first error in err's tree that
// Unavailable made, and whether there is one.
func Reason(err error) (string, bool) {
	var ue *unavailableError
	if errors.As(err, &ue) {
		return ue.reason, true
	}
	return "", false
}

// wrapf is fmt.Errorf for sqlflight's errors, saying "sqlflight:" once
// (errtext.Wrapf).
var wrapf = errtext.Wrapf
