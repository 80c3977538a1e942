package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/guard"
	"github.com/sqlflight/sqlflight/internal/identity"
)

// Scopes of pgx configurations. Every DSN that pgx resolves, and every
// pgxpool handed to PoolConnector (the pgx face, pgxflight, opens one), is
// named by what it resolves to (identity.Name: servers, database, user,
// session parameters): one Shield keeps one scope per name, so that a
// database/sql face and a pgx face of the Shield reaching the same database
// as the same user share their entries, as two DSNs spelled differently do.
// (Epochs are the engine's, not a scope's: a write through any scope ends
// the reads of its tables in every scope of the Shield.)

// namedScopes are an engine's scopes of pgx configurations, by name.
type namedScopes struct {
	mu sync.Mutex
	m  map[string]*scope
}

// namedScope returns the scope named name and takes a hold of it (give it
// back with dropNamed). A scope whose connections reached two servers and
// that nobody uses any more is not handed out again: a new one learns the
// server anew.
func (s *engine) namedScope(name string, cfg *pgx.ConnConfig) *scope {
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	if sc := n.m[name]; sc != nil && !(sc.mixed.Load() && sc.live.Load() == 0) {
		sc.holders.Add(1)
		return sc
	}
	if n.m == nil {
		n.m = make(map[string]*scope)
	}
	sc := s.newScope()
	sc.fleetBase = name
	if cfg != nil {
		sc.setLabel(fmt.Sprintf("%s@%s:%d", cfg.Database, cfg.Host, cfg.Port), true)
	}
	sc.holders.Add(1)
	n.m[name] = sc
	return sc
}

// dropNamed gives back a hold of sc taken by namedScope; the last one
// forgets it (its cached results are never served again; they age out).
func (s *engine) dropNamed(sc *scope) {
	if sc.holders.Add(-1) > 0 {
		return
	}
	n := &s.named
	n.mu.Lock()
	if n.m[sc.fleetBase] == sc {
		delete(n.m, sc.fleetBase)
	}
	n.mu.Unlock()
	s.scopes.Delete(sc.id)
}

// PoolConnector returns a connector whose connections are pool's, through
// s: sql.OpenDB(s.PoolConnector(pool)) is stdlib.OpenDBFromPool with
// sqlflight underneath, and the pgx face (package pgxflight) runs on it.
// Its scope is the pool's resolved connection configuration: it shares
// results with every DSN of s that resolves to the same servers, database,
// user and session parameters, and with every other pool of that
// configuration.
//
// sqlflight borrows a connection of the pool only for work that reaches
// the database and gives it back as soon as that work is done: a hit or a
// follower holds none, no connection of the pool waits idle in sqlflight,
// and one whose session changed (SET, temporary tables, advisory locks …)
// is ended (the pool opens another) rather than handed back for another
// caller. Closing the connector (sql.DB.Close) leaves the pool open.
func (s *Shield) PoolConnector(pool *pgxpool.Pool) driver.Connector {
	cfg := pool.Config().ConnConfig
	sc := s.namedScope(identity.Name(cfg), cfg)
	pc := stdlib.GetPoolConnector(pool)
	o := &opener{open: sc.borrower(s.engine, pc), borrows: true}
	wc := &connector{s: s.engine, drv: s.connectorDriver(pc), sc: sc, open: o.open}
	sc.catalogFor(pool)
	return &poolConnector{connector: wc, opener: o}
}

// catalogFor gives a scope of pool's connections its catalog connections,
// once: when every connection of the pool is out (transactions of the
// pgx face may hold them all, and each of their reads may need the
// server's verdict), a probe runs on a connection of the scope's own
// rather than wait for one of the pool's. It is made as the pool makes
// its own (BeforeConnect, connect, AfterConnect), outside the pool's
// MaxConns; at most MaxIdle of them wait idle, and for IdleTimeout.
func (sc *scope) catalogFor(p *pgxpool.Pool) {
	if !sc.catalogSet.CompareAndSwap(false, true) {
		return
	}
	cfg := p.Config()
	var opts []stdlib.OptionOpenDB
	if cfg.BeforeConnect != nil {
		opts = append(opts, stdlib.OptionBeforeConnect(cfg.BeforeConnect))
	}
	if cfg.AfterConnect != nil {
		opts = append(opts, stdlib.OptionAfterConnect(cfg.AfterConnect))
	}
	sc.catalog.SetOpen(stdlib.GetConnector(*cfg.ConnConfig, opts...).Connect)
	sc.catalogPool.Store(p)
}

// poolFull reports whether p has no idle connection and no room for
// another: an acquire would wait.
func poolFull(p *pgxpool.Pool) bool {
	st := p.Stat()
	return st.IdleConns() == 0 && st.TotalConns() >= st.MaxConns()
}

// poolConnector is PoolConnector's: Close gives its scope back.
type poolConnector struct {
	*connector
	opener *opener
	once   sync.Once
}

var _ io.Closer = (*poolConnector)(nil)

func (c *poolConnector) Connect(ctx context.Context) (driver.Conn, error) {
	return c.sc.connectWith(ctx, c.s, c.opener)
}

// Close gives the scope back; the scope's spare connections no longer
// borrow from the pool, which may close now.
func (c *poolConnector) Close() error {
	c.once.Do(func() {
		c.sc.spareOpen.CompareAndSwap(c.opener, nil)
		c.s.dropNamed(c.sc)
	})
	return nil
}

// identifiedKey marks, in a pooled connection's pgconn.CustomData, the
// scope it told who it reaches: a connection borrowed again (the same
// server session) is not asked again.
const identifiedKey = "sqlflight.identified"

// borrower wraps pc's Connect (a pool's acquire) as the scope's opener: a
// connection it returns is borrowed (internal/pool's Borrowed), and tells
// who it reaches the first time the scope borrows it. Waiting for one of
// the pool's connections is not the database's failure; failing to
// connect is (not a closed pool, nor the caller's context).
func (sc *scope) borrower(s *engine, pc driver.Connector) func(context.Context) (driver.Conn, error) {
	return func(ctx context.Context) (driver.Conn, error) {
		rc, err := pc.Connect(ctx)
		if err != nil {
			if ce := (*pgconn.ConnectError)(nil); errors.As(err, &ce) {
				err = &guard.ConnectFailure{Err: err}
			}
			return nil, err
		}
		data := rc.(*stdlib.Conn).Conn().PgConn().CustomData()
		if data[identifiedKey] != sc {
			if err := sc.identify(ctx, s, rc); err != nil {
				discardBorrowed(rc)
				_ = rc.Close()
				return nil, err
			}
			data[identifiedKey] = sc
		}
		sc.borrowed.Store(rc, struct{}{})
		return rc, nil
	}
}

// discardBorrowed ends a borrowed connection's server session, so that its
// pool destroys it when it is given back instead of handing it out again.
func discardBorrowed(rc driver.Conn) {
	if pc, ok := rc.(*stdlib.Conn); ok {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = pc.Conn().Close(ctx)
	}
}

// isBorrowed reports (once: it forgets rc) whether rc is one of a pool's
// connections, for internal/pool as it gives rc up.
func (sc *scope) isBorrowed(rc driver.Conn) bool {
	_, ok := sc.borrowed.LoadAndDelete(rc)
	return ok
}
