package sqlflight

import (
	"context"
	"database/sql/driver"

	"github.com/sqlflight/sqlflight/internal/pool"
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
// one (internal/pool): background refreshes and probes run on them, and a
// virtual connection that needs a real one takes an idle one before it
// opens another. The pool also counts every real connection of the scope
// against Options.MaxConns. The methods keep the spelling of the root's
// call sites; the Shield they are given is the one init made the pool
// count for (a scope belongs to one Shield).
type spareConns struct {
	pool pool.Pool
	max  int // Options.MaxConns: the cap on open connections (0: none)
}

// init sets the pool up for sc, a scope of s: capped at Options.MaxConns,
// kept while sc has virtual connections, lent to by them, counted in s's
// Stats. It runs once, before sc is used.
func (p *spareConns) init(s *Shield, sc *scope) {
	p.max = s.opts.MaxConns
	p.pool.Max = p.max
	p.pool.Users = sc.live.Load
	p.pool.Lendable = func() driver.Conn { return sc.takeLendable(s) }
	p.pool.Counters = pool.Counters{Opened: &s.stats.realOpened, Open: &s.stats.realConns, Waits: &s.stats.realWaits}
}

func (p *spareConns) setOpen(open func(context.Context) (driver.Conn, error)) { p.pool.SetOpen(open) }

// counted counts a real connection opened outside the pool (a scope's
// first).
func (p *spareConns) counted() { p.pool.Counted() }

// put takes rc back: it stays idle while the scope has virtual connections
// and room (or someone waits for it), else it is closed. A broken
// connection, or one its driver no longer finds valid, is closed.
func (p *spareConns) put(rc driver.Conn, broken bool, _ *Shield) { p.pool.Put(rc, broken) }

// closeReal closes one of the scope's real connections.
func (p *spareConns) closeReal(rc driver.Conn, _ *Shield) { p.pool.Close(rc) }

// closeAll closes the idle connections: the scope's last virtual
// connection closed.
func (p *spareConns) closeAll(_ *Shield) { p.pool.CloseIdle() }

// anyReal returns a real connection that belongs to no virtual one: an
// idle one, one lent by a virtual connection whose session cannot matter,
// or a new one (under Options.MaxConns, once one is freed). reused reports
// one that served before.
func (sc *scope) anyReal(ctx context.Context, s *Shield) (rc driver.Conn, reused bool, err error) {
	rc, reused, err = sc.spare.pool.Get(ctx)
	if err != nil {
		return nil, false, err
	}
	if !reused {
		sc.verdicts.NoteConn(rc)
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
