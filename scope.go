package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/guard"
	"github.com/sqlflight/sqlflight/internal/identity"
	"github.com/sqlflight/sqlflight/internal/pool"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// A scope is the set of connections that may share results: one DSN of a
// wrapped driver, or one wrapped connector. Its id is part of every key.
//
// A scope also remembers the shape of its parent's connections (which
// optional interfaces they implement). Virtual connections must show the
// same shape before any real connection exists, so the first Connect of a
// scope opens a real connection to learn it (and keeps it); every later
// Connect returns a virtual connection at once.
type scope struct {
	id uint64
	// label names the scope in Stats, logs and metrics without a secret:
	// "database@host:port" for a pgx DSN or connector (a connector's once
	// it connected), a SharedConnector's name, or "scope N"; labelFinal:
	// it is the last.
	label      atomic.Pointer[string]
	labelFinal atomic.Bool
	// guard is the scope's own semaphore and circuit breaker (breaker.go).
	guard guard.Scope
	// batchRefused holds the verdicts (statement shapes, each under one
	// schema generation) whose batched form the server or the driver
	// refused: their reads run one key at a time (batch.go).
	batchRefused sync.Map

	// Who the scope's connections are (identity.go). fleetBase names the
	// scope across the fleet before any server spoke: its resolved DSN, or
	// a SharedConnector's name ("": never on the shared tier). shared is
	// fleetBase with the server's identity, written once by the first real
	// connection that tells it, before named is set; mixed is set when a
	// later one reached another server.
	fleetBase string
	shared    string
	named     atomic.Bool
	mixed     atomic.Bool
	idMu      sync.Mutex
	server    *identity.Server // the first real connection's

	learned atomic.Bool
	mu      sync.Mutex
	mask    uint16      // optional interfaces of the parent's connections
	proto   driver.Conn // a parent connection, for CheckNamedValue without a real one
	probing chan struct{}

	// postgres: the server is PostgreSQL (PostgresVersion said so), whatever
	// the Go driver; its verdicts can be asked for. pgx: the parent is pgx
	// v5's stdlib, which never calls runtime.Goexit.
	postgres, pgx bool
	pgVersion     atomic.Int32 // the server's server_version_num; -1 not PostgreSQL; 0 not yet asked

	// The server's word (verify.go): verdicts per statement shape, write
	// closures per table, and how the server reads '…' literals.
	verdicts *pgverdict.Book[*readFilter]

	// spare holds the scope's real connections that belong to no virtual
	// one (internal/pool): background refreshes and probes run on them, and
	// a virtual connection that needs a real one takes an idle one before it
	// opens another. It also counts every real connection of the scope
	// against Options.MaxConns (its Max).
	spare pool.Pool
	// lender is the virtual connection whose real connection most
	// recently became lendable.
	lender atomic.Pointer[conn]
	// live counts the scope's open virtual connections: when the last one
	// closes (DB.Close), so does the idle spare.
	live atomic.Int64

	stmtMask    atomic.Uint32 // optional interfaces of the parent's statements …
	stmtLearned atomic.Bool   // … once a statement was prepared

	feed atomic.Pointer[scopeFeed] // the change feed (feed.go), once started

	// holders counts the uses of a named scope (poolscope.go); borrowed
	// holds the real connections borrowed from a pgxpool, until the spare
	// gives them up.
	holders  atomic.Int64
	borrowed sync.Map
	// A scope of a pool's connections (poolscope.go): its catalog
	// connections of its own, for probes while the pool has none to give.
	spareOpen   atomic.Pointer[opener] // how the spare opens its connections
	catalogSet  atomic.Bool
	catalogPool atomic.Pointer[pgxpool.Pool]
	catalog     pool.Pool
}

// stmtShape returns the shape of the parent's statements, once known.
func (sc *scope) stmtShape() (uint16, bool) {
	if !sc.stmtLearned.Load() {
		return 0, false
	}
	return uint16(sc.stmtMask.Load()), true
}

// learnStmtShape remembers the shape of ps and returns it.
func (sc *scope) learnStmtShape(ps driver.Stmt) uint16 {
	m := mirrorStmtMask(ps)
	if !sc.stmtLearned.Load() {
		sc.stmtMask.Store(uint32(m))
		sc.stmtLearned.Store(true)
	}
	return m
}

func (s *engine) newScope() *scope {
	sc := &scope{id: s.scopeSeq.Add(1)}
	sc.verdicts = pgverdict.NewBook[*readFilter](verdictHost{s, sc})
	sc.setLabel(fmt.Sprintf("scope %d", sc.id), false)
	o := &s.opts
	sc.spare.Max, sc.spare.Users = o.MaxConns, sc.live.Load
	sc.spare.KeepIdle = o.MaxRefreshes // each refresh takes a spare connection
	sc.spare.Lendable = func() driver.Conn { return sc.takeLendable(s) }
	sc.spare.Borrowed, sc.spare.Discard = sc.isBorrowed, discardBorrowed
	sc.spare.Counters = pool.Counters{Opened: &s.stats.realOpened, Open: &s.stats.realConns, Waits: &s.stats.realWaits}
	sc.guard.Init(guard.ScopeConfig{MaxInflight: o.MaxInflight, MaxRefreshes: o.MaxRefreshes, QueueTimeout: o.QueueTimeout,
		Failures: o.BreakerFailures, Timeout: o.BreakerTimeout, Probes: o.BreakerProbes, Clock: o.Clock,
		OnChange: func(from, to breakerState) {
			s.log.Warn("sqlflight: circuit breaker changed state", "scope", sc.name(), "from", from.String(), "to", to.String())
		},
		Rejected: &s.stats.breakerRejected, Shed: &s.stats.shed,
		OnShed: func(queueTimeout time.Duration) {
			s.warned.Warn(s.log, "shed", "", "sqlflight: shedding reads: every origin slot is taken",
				"max_inflight", o.MaxInflight, "queue_timeout", queueTimeout, "scope", sc.name())
		}})
	s.scopes.Store(sc.id, sc)
	if ts := s.tier; ts != nil && ts.TrustMessages {
		s.log.Warn("sqlflight: the shared tier is trusted without a secret (InsecureTrustSharedTier): whoever can write to it can make this scope serve any rows", "scope", sc.name())
	}
	return sc
}

// detect returns the server_version_num of the scope's server, or -1 when
// it is not PostgreSQL: asked of its first real connection rc, once.
func (sc *scope) detect(ctx context.Context, rc driver.Conn) int32 {
	if v := sc.pgVersion.Load(); v != 0 {
		return v
	}
	v := int32(pgverdict.PostgresVersion(ctx, rc))
	if v == 0 {
		v = -1
	}
	if !sc.pgVersion.CompareAndSwap(0, v) {
		return sc.pgVersion.Load()
	}
	return v
}

// name returns the scope's label.
func (sc *scope) name() string { return *sc.label.Load() }

// setLabel names the scope, unless it was named for good (final) before.
func (sc *scope) setLabel(label string, final bool) {
	if !sc.labelFinal.Load() {
		sc.label.Store(&label)
		sc.labelFinal.Store(final)
	}
}

// pgxLabel returns the label of a scope whose connections are rc's:
// "database@host:port" for pgx, "" for another driver.
func pgxLabel(rc driver.Conn) string {
	pc, ok := rc.(*stdlib.Conn)
	if !ok {
		return ""
	}
	cfg := pc.Conn().Config()
	return fmt.Sprintf("%s@%s:%d", cfg.Database, cfg.Host, cfg.Port)
}

// connect returns a virtual connection; open opens a real one.
func (sc *scope) connect(ctx context.Context, s *engine, open func(context.Context) (driver.Conn, error)) (driver.Conn, error) {
	return sc.connectWith(ctx, s, &opener{open: open})
}

// An opener opens a virtual connection's real ones: a DSN's or a
// connector's, or one that borrows them from a pgxpool (poolscope.go).
type opener struct {
	open    func(context.Context) (driver.Conn, error)
	borrows bool
}

// spareOpener records o as the way to open the scope's spare connections
// (background refreshes, probes), unless the scope has one: a DSN's or a
// connector's replaces a pool's, whose pool may close before the scope's
// other users are done.
func (sc *scope) spareOpener(o *opener) {
	cur := sc.spareOpen.Load()
	if cur == nil || (cur.borrows && !o.borrows) {
		sc.spareOpen.CompareAndSwap(cur, o)
	}
}

// errNoOpener fails a spare connection of a scope whose only opener was a
// pool that closed.
var errNoOpener = errors.New("sqlflight: the scope has no way to open a connection any more (its pool was closed)")

// openSpare opens a spare connection with the scope's spare opener.
func (sc *scope) openSpare(ctx context.Context) (driver.Conn, error) {
	o := sc.spareOpen.Load()
	if o == nil {
		return nil, errNoOpener
	}
	return o.open(ctx)
}

// connectWith is connect for o's virtual connections.
func (sc *scope) connectWith(ctx context.Context, s *engine, o *opener) (driver.Conn, error) {
	if s.tierErr != nil {
		return nil, s.tierErr // a shared tier without a secret (ErrNoSharedSecret)
	}
	open := o.open
	sc.spareOpener(o)
	for !sc.learned.Load() {
		sc.mu.Lock()
		if sc.learned.Load() {
			sc.mu.Unlock()
			break
		}
		if ch := sc.probing; ch != nil {
			sc.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		sc.probing = ch
		sc.spare.SetOpen(sc.openSpare)
		sc.mu.Unlock()

		// The first real connection goes through the scope's breaker like
		// every later one: a database down from the start opens it, and
		// an open breaker answers at once.
		var rc driver.Conn
		probe, err := sc.guard.Admit()
		if err == nil {
			rc, err = open(ctx)
			sc.guard.Breaker.Record(probe, err)
		}
		if err == nil {
			// The feed is established before anything is cached (feed.go).
			if err = s.startFeed(ctx, sc, rc); err != nil {
				_ = rc.Close()
			}
		}

		sc.mu.Lock()
		sc.probing = nil
		close(ch)
		if err != nil {
			sc.mu.Unlock()
			return nil, err
		}
		sc.mask = connMask(rc)
		sc.proto = rc
		_, sc.pgx = rc.(*stdlib.Conn)
		sc.postgres = sc.detect(ctx, rc) > 0
		if l := pgxLabel(rc); l != "" {
			sc.setLabel(l, true) // a connector's scope: who it reached
		}
		sc.verdicts.NoteConn(rc)
		sc.learned.Store(true)
		sc.mu.Unlock()
		sc.spare.Counted()
		s.stats.realOpened.Add(1)
		s.stats.realConns.Add(1)
		return newConn(s, sc, o, rc), nil
	}
	c := newConn(s, sc, o, nil) // counted live before the feed is resumed
	if f := sc.feed.Load(); f != nil {
		f.Ensure() // paused when the scope's last connection closed
	}
	return c, nil
}

// connMask reports the parent's optional interfaces in the form the virtual
// connection mirrors: the legacy Execer and Queryer count as their context
// forms, which database/sql would adapt them to anyway. Every virtual
// connection is a driver.Validator, whatever its parent: database/sql asks
// it as it puts the connection back in its pool, which is when its real
// connection becomes lendable (realpool.go); it answers for its parent.
func connMask(rc driver.Conn) uint16 {
	m := mirrorConnMask(rc) | connValidator
	if _, ok := rc.(driver.Execer); ok { //nolint:staticcheck // legacy form, adapted
		m |= connExecer
	}
	if _, ok := rc.(driver.Queryer); ok { //nolint:staticcheck // legacy form, adapted
		m |= connQueryer
	}
	return m
}
