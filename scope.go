package sqlflight

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
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
	// shared names the scope across the fleet, for the shared tier: its
	// DSN, or Options.SharedScope for a connector ("": no shared tier).
	shared string

	learned atomic.Bool
	mu      sync.Mutex
	mask    uint16      // optional interfaces of the parent's connections
	proto   driver.Conn // a parent connection, for CheckNamedValue without a real one
	probing chan struct{}

	postgres   bool            // the parent is pgx: function volatility can be looked up
	volatility map[string]byte // pg_proc.provolatile by function name, '?' when absent

	spare spareConns // real connections for background refreshes

	stmtMask    atomic.Uint32 // optional interfaces of the parent's statements …
	stmtLearned atomic.Bool   // … once a statement was prepared
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

func (s *Shield) newScope() *scope { return &scope{id: s.scopeSeq.Add(1)} }

// connect returns a virtual connection; open opens a real one.
func (sc *scope) connect(ctx context.Context, s *Shield, open func(context.Context) (driver.Conn, error)) (driver.Conn, error) {
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
		sc.spare.setOpen(open)
		sc.mu.Unlock()

		rc, err := open(ctx)

		sc.mu.Lock()
		sc.probing = nil
		close(ch)
		if err != nil {
			sc.mu.Unlock()
			return nil, err
		}
		sc.mask = connMask(rc)
		sc.proto = rc
		_, sc.postgres = rc.(*stdlib.Conn)
		sc.learned.Store(true)
		sc.mu.Unlock()
		s.stats.realOpened.Add(1)
		s.stats.realConns.Add(1)
		return newConn(s, sc, open, rc), nil
	}
	return newConn(s, sc, open, nil), nil
}

// connMask reports the parent's optional interfaces in the form the virtual
// connection mirrors: the legacy Execer and Queryer count as their context
// forms, which database/sql would adapt them to anyway.
func connMask(rc driver.Conn) uint16 {
	m := mirrorConnMask(rc)
	if _, ok := rc.(driver.Execer); ok { //nolint:staticcheck // legacy form, adapted
		m |= connExecer
	}
	if _, ok := rc.(driver.Queryer); ok { //nolint:staticcheck // legacy form, adapted
		m |= connQueryer
	}
	return m
}

// volatilityQuery asks PostgreSQL how volatile the named functions are: the
// most volatile of each name's overloads, in any schema ('i' < 's' < 'v').
const volatilityQuery = `SELECT proname::text, max(provolatile::text) FROM pg_catalog.pg_proc WHERE proname = ANY($1) GROUP BY proname`

// maxRememberedFunctions bounds what a scope remembers of function
// volatility; past it, the memory starts over.
const maxRememberedFunctions = 10_000

// vouch reports whether every function in names is known to be immutable
// or stable, so that a SELECT calling them is read-only and may share. On
// PostgreSQL (a pgx parent) it looks names it has not seen up in pg_proc
// once, on c's real connection, and remembers them; elsewhere, and when the
// lookup fails, it reports false.
func (sc *scope) vouch(ctx context.Context, c *conn, names []string) bool {
	if len(names) == 0 {
		return true
	}
	safe, missing := sc.known(names)
	if safe || !missing || !sc.postgres {
		return safe
	}
	rc, err := c.use(ctx)
	if err != nil {
		return false
	}
	q, ok := rc.(driver.QueryerContext)
	if !ok {
		return false
	}
	rows, err := q.QueryContext(ctx, volatilityQuery, []driver.NamedValue{{Ordinal: 1, Value: names}})
	if err != nil {
		return false
	}
	found := make(map[string]byte, len(names))
	dest := make([]driver.Value, 2)
	for rows.Next(dest) == nil {
		name, _ := dest[0].(string)
		v, _ := dest[1].(string)
		if name != "" && v != "" {
			found[name] = v[0]
		}
	}
	if rows.Close() != nil {
		return false
	}
	sc.mu.Lock()
	if sc.volatility == nil || len(sc.volatility) > maxRememberedFunctions {
		sc.volatility = make(map[string]byte)
	}
	for _, n := range names {
		v, ok := found[n]
		if !ok {
			v = '?' // not a function PostgreSQL knows by that name
		}
		sc.volatility[n] = v
	}
	sc.mu.Unlock()
	safe, _ = sc.known(names)
	return safe
}

// known reports whether every name is remembered as immutable or stable,
// and whether some name was never looked up.
func (sc *scope) known(names []string) (safe, missing bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	safe = true
	for _, n := range names {
		switch v, ok := sc.volatility[n]; {
		case !ok:
			missing, safe = true, false
		case v != 'i' && v != 's':
			safe = false
		}
	}
	return safe, missing
}

// vouched is vouch without a lookup: what the scope already knows.
func (sc *scope) vouched(names []string) bool {
	safe, _ := sc.known(names)
	return safe
}

// spareConns are the scope's real connections that belong to no virtual
// one: background refreshes run on them, so that a cache hit never opens or
// holds a connection of its caller. One idle connection is kept for a while.
type spareConns struct {
	mu    sync.Mutex
	open  func(context.Context) (driver.Conn, error)
	idle  driver.Conn
	timer *time.Timer
}

// spareIdle is how long an idle spare connection is kept.
const spareIdle = 30 * time.Second

func (p *spareConns) setOpen(open func(context.Context) (driver.Conn, error)) {
	p.mu.Lock()
	if p.open == nil {
		p.open = open
	}
	p.mu.Unlock()
}

func (p *spareConns) get(ctx context.Context, s *Shield) (driver.Conn, error) {
	p.mu.Lock()
	if rc := p.idle; rc != nil {
		p.idle = nil
		p.timer.Stop()
		p.mu.Unlock()
		return rc, nil
	}
	open := p.open
	p.mu.Unlock()
	rc, err := open(ctx)
	if err != nil {
		return nil, err
	}
	s.stats.realOpened.Add(1)
	s.stats.realConns.Add(1)
	return rc, nil
}

func (p *spareConns) put(rc driver.Conn, broken bool, s *Shield) {
	p.mu.Lock()
	if !broken && p.idle == nil {
		p.idle = rc
		p.timer = time.AfterFunc(spareIdle, func() { p.closeIdle(rc, s) })
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	s.stats.realConns.Add(-1)
	_ = rc.Close()
}

// closeIdle closes rc if it is still the idle connection.
func (p *spareConns) closeIdle(rc driver.Conn, s *Shield) {
	p.mu.Lock()
	if p.idle != rc {
		p.mu.Unlock()
		return
	}
	p.idle = nil
	p.mu.Unlock()
	s.stats.realConns.Add(-1)
	_ = rc.Close()
}
