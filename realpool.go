package sqlflight

import (
	"context"
	"database/sql/driver"
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

// anyReal returns a real connection that belongs to no virtual one: an
// idle one, one lent by a virtual connection whose session cannot matter,
// or a new one (under Options.MaxConns, once one is freed). reused reports
// one that served before.
func (sc *scope) anyReal(ctx context.Context, s *engine) (rc driver.Conn, reused bool, err error) {
	rc, reused, err = sc.spare.Get(ctx)
	if err != nil {
		return nil, false, err
	}
	if !reused {
		sc.verdicts.NoteConn(rc)
	}
	return rc, reused, nil
}

// anyReal is sc.anyReal for c's own real connection: one c's opener
// opens, or for a DSN's or a connector's also an idle or a lendable one
// (a pool's never takes those, which are not its pool's).
func (c *conn) anyReal(ctx context.Context) (rc driver.Conn, reused bool, err error) {
	rc, reused, err = c.sc.spare.GetFrom(ctx, c.open.open, c.open.borrows)
	if err != nil {
		return nil, false, err
	}
	if !reused {
		c.sc.verdicts.NoteConn(rc)
	}
	return rc, reused, nil
}

// takeLendable takes the real connection of the scope's most recently
// lendable virtual connection, or returns nil.
func (sc *scope) takeLendable(s *engine) driver.Conn {
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
	c.s.flights.Release(c)
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
	if f := c.s.flights.Release(c); f != nil {
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
// held, is released (parking.finish); the zero parking if nothing.
func (c *conn) parkLocked() parking {
	if !c.swappable() {
		return parking{}
	}
	rc := c.real
	switch {
	case rc == nil:
		return parking{}
	case c.busy != nil:
		c.parkLater = true
		return parking{}
	case c.sc.spare.Max > 0:
		// Under the cap every idle real connection is the scope's, where
		// whoever waits for one finds it.
		c.real = nil
		return parking{c: c, spare: rc}
	}
	c.idleInPool = true
	return parking{c: c}
}

// parking is what parkLocked leaves to do outside c.mu: give a real
// connection (spare) to the scope's idle ones, or make c the scope's
// lender. Its zero value does nothing.
type parking struct {
	c     *conn
	spare driver.Conn
}

func (p parking) finish() {
	switch {
	case p.c == nil:
	case p.spare != nil:
		p.c.sc.spare.Put(p.spare, false)
	case p.c.sc.lender.Load() != p.c:
		p.c.sc.lender.Store(p.c) // not on every return: other cores read it
	}
}
