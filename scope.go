package sqlflight

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"
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

	learned atomic.Bool
	mu      sync.Mutex
	mask    uint16      // optional interfaces of the parent's connections
	proto   driver.Conn // a parent connection, for CheckNamedValue without a real one
	probing chan struct{}
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
