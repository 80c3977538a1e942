package sqlflight

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/sqlflight/sqlflight/internal/guard"
)

var (
	// ErrOverloaded is wrapped by the error of a read that waited longer than
	// Options.QueueTimeout (or its context) for one of its scope's
	// Options.MaxInflight origin slots, when no cached result could stand in.
	ErrOverloaded = guard.ErrFull

	// ErrCircuitOpen is wrapped by the error of a statement refused because
	// the circuit breaker of its scope (its database) is open: the database
	// was found unavailable and is left alone until the breaker's timeout
	// passes. Other databases behind the same Shield are not affected.
	ErrCircuitOpen = guard.ErrOpen
)

// Defaults of the guard's Options.
const (
	DefaultMaxInflight     = 32
	DefaultQueueTimeout    = time.Second
	DefaultBreakerFailures = 5
	DefaultBreakerTimeout  = 5 * time.Second
	DefaultBreakerProbes   = 1
)

// errNotRun and errDeadSession are the guard's words for a request that
// never reached the database and for a probe's session lost in an outage
// (internal/guard): neither is a verdict on the database.
var (
	errNotRun      = guard.ErrNotRun
	errDeadSession = guard.ErrDeadSession
)

// forProbe makes sure that a probe of a half-open breaker runs on a live
// connection. A real connection kept from before the outage may have died
// with it (a restart ends every session with 57P01), and a probe that failed
// on it would keep the breaker open for another BreakerTimeout although the
// database is back. So rc is pinged first; a dead one is closed and another
// opened in its place (reopen), unless the session holds changes
// (errDeadSession). onCaller: c's own goroutine calls, not an origin.
func (c *conn) forProbe(ctx context.Context, rc driver.Conn, onCaller bool, reopen func(context.Context) (driver.Conn, error)) (driver.Conn, error) {
	p, ok := rc.(driver.Pinger)
	if !ok {
		return rc, nil
	}
	err := p.Ping(ctx)
	if err == nil {
		return rc, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	c.s.stats.probeRedials.Add(1)
	lost := c.held.Load() || (onCaller && !c.swappable())
	c.mu.Lock()
	if c.real == rc {
		c.sc.spare.Close(rc)
		c.real = nil
		c.lost = c.lost || lost
	}
	c.mu.Unlock()
	if lost {
		return nil, errDeadSession
	}
	return reopen(ctx)
}

// admit lets a statement that is not an origin query (a write, a bypassed
// read, a transaction's begin) reach the database unless the breaker is
// open. Statements inside a transaction are always let through.
func (c *conn) admit(write bool) (probe bool, err error) {
	if c.inTx() || (write && c.s.opts.WritesWhenOpen) {
		return false, nil
	}
	return c.sc.guard.Admit()
}

// ticket is an admitted origin query of a scope (guard.Ticket).
type ticket = guard.Ticket

// breakerState is the state of a scope's breaker, under the name the
// root's code has for it.
type breakerState = guard.State

// The states of a breaker.
const (
	breakerClosed   = guard.Closed
	breakerOpen     = guard.Open
	breakerHalfOpen = guard.HalfOpen
)
