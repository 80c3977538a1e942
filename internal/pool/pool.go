// Package pool keeps the spare real connections of one scope (one database
// reached as one role): the real connections that belong to no virtual
// connection. Background refreshes and probes run on them, and a virtual
// connection that needs a real one takes a spare one before it opens
// another.
//
// # The cap, and what counts against it
//
// A Pool counts every real connection of its scope, not only its spare
// ones: each one Get opened, and each one opened elsewhere and reported
// with Counted (the scope's first). A connection stays counted until it is
// closed through the Pool (Close, or Put that does not keep it, or
// CloseIdle, or the sweep); one handed to a virtual connection, or lent by
// one, stays counted while it is out. Get takes an idle connection, else
// asks the Lendable func for one a virtual connection may give up, else
// opens one, but under Pool.Max (0: no cap) only while fewer than Max are
// counted; at the cap it asks Lendable again and otherwise waits (on its
// context) until a connection is put back, closed or fails to open, then
// tries again from the idle ones. A failed open is not counted.
//
// # Idle connections
//
// A connection Put back, not broken and still valid (driver.Validator),
// stays idle while the scope has users (Pool.Users reports more than 0, or
// Users is nil) and either fewer than MaxIdle (or Pool.KeepIdle, if more)
// are idle or the pool is
// capped (under a cap every idle connection is kept: someone may wait for
// it); otherwise it is closed. An idle connection is closed once it has
// been idle for IdleTimeout: a sweep runs IdleTimeout after a connection
// goes idle while none is set, closes those idle that long and sets itself
// for the next, until none is idle. Get takes the most recently idle connection first. CloseIdle
// closes every idle connection at once (the scope's last user went). A
// borrowed connection (Pool.Borrowed: one of a pgxpool's) is never idle
// here: Put gives it back to its own pool at once, and Close, which gives
// a connection up for good, has it ended there first (Pool.Discard).
//
// # Time and concurrency
//
// The pool reads the time and sets its sweep's timer through Pool.Clock:
// real time and the runtime's timers when it is nil, a fake clock in
// tests. Every method is safe for concurrent use once the Pool's fields
// are set; set them before first use and do not change them after. The
// zero Pool (no cap, no users func, no lendable func) is ready to use once
// SetOpen gave it a way to open connections.
//
// The pool does not reset a connection it hands out (its caller does, as
// database/sql would), never closes a connection that is out, and does not
// decide which connections are lendable: the Lendable func does, and
// counts what it lends.
package pool

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// IdleTimeout is how long an idle spare connection is kept.
	IdleTimeout = 30 * time.Second
	// MaxIdle is how many idle spare connections an uncapped pool keeps.
	MaxIdle = 2
)

// Clock tells a Pool the time and runs its sweep: nil in a Pool means the
// real time and the runtime's timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once, in its own goroutine, after d has passed;
	// never before AfterFunc returned (the pool holds its lock meanwhile).
	AfterFunc(d time.Duration, f func())
}

// Counters are where a Pool counts its connections; they may be shared by
// many pools (a Shield's Stats). A nil field is not counted.
type Counters struct {
	// Opened counts the real connections Get opened.
	Opened *atomic.Uint64
	// Open counts the real connections open now: +1 for each Get opened,
	// -1 for each the pool closed (those reported with Counted are the
	// caller's to count).
	Open *atomic.Int64
	// Waits counts the times Get waited under the cap.
	Waits *atomic.Uint64
}

// Pool is the spare real connections of one scope. Set its fields before
// first use.
type Pool struct {
	// Max caps the scope's open real connections (0: no cap).
	Max int
	// KeepIdle is how many idle connections an uncapped pool keeps, if more
	// than MaxIdle: as many as may be out at once for work that never
	// queues (background refreshes), so that a burst of them does not
	// open and close a connection each time.
	KeepIdle int
	// Users reports how many users the scope has (its open virtual
	// connections): with none, a connection put back is closed. Nil: the
	// scope always has users.
	Users func() int64
	// Lendable takes a real connection a virtual connection may give up
	// (its session cannot matter now), or returns nil. Nil: none ever is.
	Lendable func() driver.Conn
	// Borrowed reports whether rc was borrowed from a pool of its own (a
	// pgxpool's connection, whose Close gives it back there): Put never
	// keeps such a connection idle but closes it at once, and Close
	// (a connection given up for good: broken, or its session changed)
	// calls Discard first. Nil: none is.
	Borrowed func(rc driver.Conn) bool
	// Discard ends a borrowed connection for good before Close gives it
	// back, so that its own pool destroys it instead of handing it out
	// again.
	Discard func(rc driver.Conn)
	// Counters are where the pool counts.
	Counters Counters
	// Clock tells the time and runs the sweep; nil: real time.
	Clock Clock

	mu      sync.Mutex
	open    func(context.Context) (driver.Conn, error)
	idle    []idleConn // oldest first
	armed   bool       // a sweep is set
	n       int        // open real connections of the scope
	waiters int        // callers waiting under the cap
	freed   chan struct{}
}

type idleConn struct {
	rc    driver.Conn
	since time.Time
}

// SetOpen gives the pool the func that opens the scope's real connections;
// only the first call counts (the scope's connections all open alike).
func (p *Pool) SetOpen(open func(context.Context) (driver.Conn, error)) {
	p.mu.Lock()
	if p.open == nil {
		p.open = open
	}
	p.mu.Unlock()
}

// Counted counts against the cap a real connection opened outside the
// pool (the scope's first); close it through the pool.
func (p *Pool) Counted() {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
}

// Get returns a real connection that belongs to no virtual one: an idle
// one, else a lendable one, else a new one; under the cap it waits (on
// ctx) for one to be freed, lent or put back, and returns ctx's error if
// ctx ends first. reused reports a connection that served before (an idle
// or a lent one), which the caller should reset; an open's error is
// returned as it is. SetOpen must have been called.
func (p *Pool) Get(ctx context.Context) (rc driver.Conn, reused bool, err error) {
	return p.GetFrom(ctx, nil, false)
}

// GetFrom is Get for a caller whose new connections open has to open (nil:
// the pool's own way). A caller whose open borrows from a pool of its own
// (borrows) takes neither an idle nor a lendable connection, which are the
// scope's other ones, but borrows one of its own under the cap.
func (p *Pool) GetFrom(ctx context.Context, open func(context.Context) (driver.Conn, error), borrows bool) (rc driver.Conn, reused bool, err error) {
	if !borrows {
		if rc := p.TakeIdle(); rc != nil {
			return rc, true, nil
		}
		if p.Lendable != nil {
			if rc := p.Lendable(); rc != nil {
				return rc, true, nil
			}
		}
	}
	return p.get(ctx, open, !borrows)
}

// get opens a connection with open (nil: p.open) under the cap, or waits
// for one (idle: or for one put back).
func (p *Pool) get(ctx context.Context, open func(context.Context) (driver.Conn, error), idle bool) (rc driver.Conn, reused bool, err error) {
	for {
		p.mu.Lock()
		if idle {
			if rc := p.popIdle(); rc != nil {
				p.mu.Unlock()
				return rc, true, nil
			}
		}
		if p.Max <= 0 || p.n < p.Max {
			p.n++
			if open == nil {
				open = p.open
			}
			p.mu.Unlock()
			rc, err := open(ctx)
			if err != nil {
				p.mu.Lock()
				p.n--
				p.signalLocked()
				p.mu.Unlock()
				return nil, false, err
			}
			add(p.Counters.Opened, 1)
			addInt(p.Counters.Open, 1)
			return rc, false, nil
		}
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.waiters++
		p.mu.Unlock()
		if p.Lendable != nil && idle {
			if rc := p.Lendable(); rc != nil {
				p.mu.Lock()
				p.waiters--
				p.mu.Unlock()
				return rc, true, nil
			}
		}
		add(p.Counters.Waits, 1)
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
func (p *Pool) popIdle() driver.Conn {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	rc := p.idle[n-1].rc
	p.idle[n-1] = idleConn{}
	p.idle = p.idle[:n-1]
	return rc
}

// signalLocked wakes the callers waiting under the cap; p.mu is held.
func (p *Pool) signalLocked() {
	if p.freed != nil && p.waiters > 0 {
		close(p.freed)
		p.freed = nil
	}
}

// TakeIdle hands the most recently idle connection over (it stays
// counted), or returns nil when none is idle.
func (p *Pool) TakeIdle() driver.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.popIdle()
}

// Put takes rc back: it stays idle while the scope has users and room (or
// the pool is capped), else it is closed. A broken connection, or one its
// driver no longer finds valid, is closed. Put wakes a caller waiting
// under the cap either way.
func (p *Pool) Put(rc driver.Conn, broken bool) {
	if v, ok := rc.(driver.Validator); ok && !broken && !v.IsValid() {
		broken = true
	}
	if !broken && p.Borrowed != nil && p.Borrowed(rc) {
		p.giveBack(rc) // to its own pool, clean: it is not ours to keep idle
		return
	}
	p.mu.Lock()
	if !broken && (p.Users == nil || p.Users() > 0) && (len(p.idle) < max(MaxIdle, p.KeepIdle) || p.Max > 0) {
		p.idle = append(p.idle, idleConn{rc: rc, since: p.now()})
		p.signalLocked()
		if !p.armed {
			p.armed = true
			p.afterFunc(IdleTimeout, p.sweep)
		}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.Close(rc)
}

// Close closes rc, one of the scope's real connections (idle, or out and
// given back for good), and stops counting it. The driver's error from
// Close is dropped.
func (p *Pool) Close(rc driver.Conn) {
	if p.Discard != nil && p.Borrowed != nil && p.Borrowed(rc) {
		p.Discard(rc)
	}
	p.giveBack(rc)
}

// giveBack closes rc (a borrowed one goes back to its own pool) and stops
// counting it.
func (p *Pool) giveBack(rc driver.Conn) {
	p.mu.Lock()
	p.n--
	p.signalLocked()
	p.mu.Unlock()
	addInt(p.Counters.Open, -1)
	_ = rc.Close()
}

// CloseIdle closes every idle connection (the scope's last user went);
// connections that are out are not touched.
func (p *Pool) CloseIdle() {
	for {
		rc := p.TakeIdle()
		if rc == nil {
			return
		}
		p.Close(rc)
	}
}

// Idle reports how many connections are idle.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Open reports how many of the scope's real connections are counted.
func (p *Pool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// sweep closes the connections idle for IdleTimeout and sets the timer for
// the next.
func (p *Pool) sweep() {
	now := p.now()
	var old []driver.Conn
	p.mu.Lock()
	i := 0
	for i < len(p.idle) && now.Sub(p.idle[i].since) >= IdleTimeout {
		old = append(old, p.idle[i].rc)
		i++
	}
	p.idle = append(p.idle[:0], p.idle[i:]...)
	if len(p.idle) > 0 {
		p.afterFunc(IdleTimeout-now.Sub(p.idle[0].since), p.sweep)
	} else {
		p.armed = false
	}
	p.mu.Unlock()
	for _, rc := range old {
		p.Close(rc)
	}
}

func (p *Pool) now() time.Time {
	if p.Clock != nil {
		return p.Clock.Now()
	}
	return time.Now()
}

func (p *Pool) afterFunc(d time.Duration, f func()) {
	if p.Clock != nil {
		p.Clock.AfterFunc(d, f)
		return
	}
	time.AfterFunc(d, f)
}

func add(c *atomic.Uint64, d uint64) {
	if c != nil {
		c.Add(d)
	}
}

func addInt(c *atomic.Int64, d int64) {
	if c != nil {
		c.Add(d)
	}
}
