package sqlflight

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"time"
)

// The scope's real connections. A virtual connection opens a real one only
// for work that reaches the database, and keeps it while its session may
// matter to its caller. Whenever the session cannot matter — the virtual
// connection is back in database/sql's pool, or its caller waits in a
// flight (or for the server's verdict) and will not touch it before the
// wait ends — and the session is clean (swappable: no session state,
// transaction, statement or rows bound to it), its real connection is
// lendable: a leader whose virtual connection has none takes it instead of
// opening another, and so does anyone waiting under Options.MaxConns. The
// owner, when it next needs one, takes another in turn; a clean session
// cannot tell one real connection from another.

// spareConns are the scope's real connections that belong to no virtual
// one: background refreshes and probes run on them, and a virtual
// connection that needs a real one takes an idle one before it opens
// another. Up to maxSpareIdle idle connections are kept, each for
// spareIdle. It also counts every real connection of the scope against
// Options.MaxConns.
type spareConns struct {
	live *atomic.Int64 // the scope's open virtual connections
	// lendable takes a lendable real connection from a virtual one, or
	// returns nil (scope.takeLendable).
	lendable func() driver.Conn

	mu      sync.Mutex
	open    func(context.Context) (driver.Conn, error)
	idle    []idleReal // oldest first
	timer   *time.Timer
	max     int           // Options.MaxConns: the cap on open connections (0: none)
	n       int           // open real connections of the scope, the feed's aside
	waiters int           // callers waiting under the cap
	freed   chan struct{} // closed when a connection is freed while someone waits
}

type idleReal struct {
	rc    driver.Conn
	since time.Time
}

const (
	// spareIdle is how long an idle spare connection is kept.
	spareIdle = 30 * time.Second
	// maxSpareIdle is how many idle spare connections are kept.
	maxSpareIdle = 2
)

func (p *spareConns) setOpen(open func(context.Context) (driver.Conn, error)) {
	p.mu.Lock()
	if p.open == nil {
		p.open = open
	}
	p.mu.Unlock()
}

// counted counts a real connection opened outside the pool (a scope's
// first).
func (p *spareConns) counted() {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
}

// get returns an idle connection or a new one; under the cap it waits (on
// ctx) for one to be freed, lent or given back. reused reports a connection
// that served before.
func (p *spareConns) get(ctx context.Context, s *Shield) (rc driver.Conn, reused bool, err error) {
	for {
		p.mu.Lock()
		if rc := p.popIdle(); rc != nil {
			p.mu.Unlock()
			return rc, true, nil
		}
		if p.max <= 0 || p.n < p.max {
			p.n++
			open := p.open
			p.mu.Unlock()
			rc, err := open(ctx)
			if err != nil {
				p.mu.Lock()
				p.n--
				p.signalLocked()
				p.mu.Unlock()
				return nil, false, err
			}
			s.stats.realOpened.Add(1)
			s.stats.realConns.Add(1)
			return rc, false, nil
		}
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.waiters++
		p.mu.Unlock()
		if p.lendable != nil {
			if rc := p.lendable(); rc != nil {
				p.mu.Lock()
				p.waiters--
				p.mu.Unlock()
				return rc, true, nil
			}
		}
		s.stats.realWaits.Add(1)
		select {
		case <-freed:
		case <-ctx.Done():
		}
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
	}
}

// popIdle takes the most recently idle connection; p.mu is held.
func (p *spareConns) popIdle() driver.Conn {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	rc := p.idle[n-1].rc
	p.idle[n-1] = idleReal{}
	p.idle = p.idle[:n-1]
	return rc
}

// signalLocked wakes the callers waiting under the cap; p.mu is held.
func (p *spareConns) signalLocked() {
	if p.freed != nil && p.waiters > 0 {
		close(p.freed)
		p.freed = nil
	}
}

// takeIdle hands an idle connection over for good (to a virtual
// connection that would otherwise open one), or returns nil.
func (p *spareConns) takeIdle() driver.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.popIdle()
}

// put takes rc back: it stays idle while the scope has virtual connections
// and room (or someone waits for it), else it is closed. A broken
// connection, or one its driver no longer finds valid, is closed.
func (p *spareConns) put(rc driver.Conn, broken bool, s *Shield) {
	if v, ok := rc.(driver.Validator); ok && !broken && !v.IsValid() {
		broken = true
	}
	p.mu.Lock()
	if !broken && (p.live == nil || p.live.Load() > 0) && (len(p.idle) < maxSpareIdle || p.max > 0) {
		p.idle = append(p.idle, idleReal{rc: rc, since: time.Now()})
		p.signalLocked()
		if p.timer == nil {
			p.timer = time.AfterFunc(spareIdle, func() { p.sweep(s) })
		}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.closeReal(rc, s)
}

// closeReal closes one of the scope's real connections.
func (p *spareConns) closeReal(rc driver.Conn, s *Shield) {
	p.mu.Lock()
	p.n--
	p.signalLocked()
	p.mu.Unlock()
	s.stats.realConns.Add(-1)
	_ = rc.Close()
}

// closeAll closes the idle connections: the scope's last virtual
// connection closed.
func (p *spareConns) closeAll(s *Shield) {
	for {
		rc := p.takeIdle()
		if rc == nil {
			return
		}
		p.closeReal(rc, s)
	}
}

// sweep closes the connections idle for spareIdle and sets the timer for
// the next.
func (p *spareConns) sweep(s *Shield) {
	now := time.Now()
	var old []driver.Conn
	p.mu.Lock()
	i := 0
	for i < len(p.idle) && now.Sub(p.idle[i].since) >= spareIdle {
		old = append(old, p.idle[i].rc)
		i++
	}
	p.idle = append(p.idle[:0], p.idle[i:]...)
	if len(p.idle) > 0 {
		p.timer = time.AfterFunc(spareIdle-now.Sub(p.idle[0].since), func() { p.sweep(s) })
	} else {
		p.timer = nil
	}
	p.mu.Unlock()
	for _, rc := range old {
		p.closeReal(rc, s)
	}
}

// anyReal returns a real connection that belongs to no virtual one: an
// idle one, one lent by a virtual connection whose session cannot matter,
// or a new one (under Options.MaxConns, once one is freed). reused reports
// one that served before.
func (sc *scope) anyReal(ctx context.Context, s *Shield) (rc driver.Conn, reused bool, err error) {
	if rc := sc.spare.takeIdle(); rc != nil {
		return rc, true, nil
	}
	if rc := sc.takeLendable(s); rc != nil {
		return rc, true, nil
	}
	rc, reused, err = sc.spare.get(ctx, s)
	if err != nil {
		return nil, false, err
	}
	if !reused {
		sc.noteConn(rc)
	}
	return rc, reused, nil
}

// takeLendable takes the real connection of the scope's most recently
// lendable virtual connection, or returns nil.
func (sc *scope) takeLendable(s *Shield) driver.Conn {
	o := sc.lender.Swap(nil)
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	rc := o.real
	if !o.lendable() || rc == nil || o.busy != nil || o.closed {
		return nil
	}
	o.real = nil
	s.stats.realsLent.Add(1)
	return rc
}

// lendable reports whether the real connection may be taken; c.mu is
// held.
func (c *conn) lendable() bool { return c.idleInPool || c.waitingOnly }

// offer makes c's clean real connection lendable while its caller waits
// (in a flight, or for the server's verdict); withdraw ends that.
func (c *conn) offer() {
	if !c.swappable() || c.touched {
		return
	}
	c.mu.Lock()
	ok := c.real != nil && c.busy == nil
	c.waitingOnly = ok
	c.mu.Unlock()
	if ok {
		c.sc.lender.Store(c)
	}
}

func (c *conn) withdraw() {
	c.mu.Lock()
	c.waitingOnly = false
	c.mu.Unlock()
}

// awake is called when database/sql takes c out of its pool (and again
// at every statement): c is its caller's again, and so is its real
// connection.
func (c *conn) awake() {
	if c.pooled.Load() {
		c.mu.Lock()
		c.idleInPool = false
		c.parkLater = false
		c.touched = false // a new checkout: nothing of the session is anyone's
		c.mu.Unlock()
		c.pooled.Store(false)
	}
}

// statement is called as c starts a statement (a query, an exec, a
// transaction, a ping): its last caller's part in a flight is over
// (flightGroup.joinOrLead), and a flight its caller may join as one of the
// herd is for this statement only (handed, heir).
func (c *conn) statement() {
	c.awake()
	c.s.flights.release(c)
	if c.handed.Load() != 0 || c.heir.Load() != 0 {
		c.heir.Store(c.handed.Swap(0)) // the first statement since it was handed over
	}
}

// goesBack is called when database/sql puts c back in its pool (IsValid):
// its caller's part in a flight is over. It reports whether c was not in
// the pool already; IsValid then parks it (parkLocked).
func (c *conn) goesBack() bool {
	if c.pooled.Load() {
		return false
	}
	var gave uint64
	if f := c.s.flights.release(c); f != nil {
		gave = f.ID()
	}
	if gave != 0 || c.gave.Load() != 0 || c.handed.Load() != 0 {
		c.gave.Store(gave)
		c.handed.Store(0)
	}
	c.pooled.Store(true)
	return true
}

// parkLocked parks c's real connection, c having gone back to
// database/sql's pool: a clean one goes to the scope's idle ones under the
// cap (only there does anyone wait for one), else stays lendable. If an
// origin query still uses it, giveBack does that when the query is done (a
// real connection left on a pooled virtual one would strand a caller
// waiting under the cap). It returns what is left to do once c.mu, which is
// held, is released; nil if nothing.
func (c *conn) parkLocked() func() {
	if !c.swappable() {
		return nil
	}
	rc := c.real
	switch {
	case rc == nil:
		return nil
	case c.busy != nil:
		c.parkLater = true
		return nil
	case c.sc.spare.max > 0:
		// Under the cap every idle real connection is the scope's, where
		// whoever waits for one finds it.
		c.real = nil
		return func() { c.sc.spare.put(rc, false, c.s) }
	}
	c.idleInPool = true
	return func() {
		if c.sc.lender.Load() != c {
			c.sc.lender.Store(c) // not on every return: other cores read it
		}
	}
}
