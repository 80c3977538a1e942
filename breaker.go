package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
	ErrCircuitOpen = errors.New("sqlflight: circuit open: database unavailable")
)

// Defaults of the guard's Options.
const (
	DefaultMaxInflight     = 32
	DefaultQueueTimeout    = time.Second
	DefaultBreakerFailures = 5
	DefaultBreakerTimeout  = 5 * time.Second
	DefaultBreakerProbes   = 1
)

// scopeGuard protects one database (one scope) behind a Shield: limiters
// bound the origin queries running at once (foreground and background
// apart), and a circuit breaker stops sending work to a database found
// unavailable (package guard). Each scope has its own, configured by the
// Shield's Options: one database's outage, or its slowness, never refuses
// the others' statements nor takes their slots.
type scopeGuard struct {
	fg, bg   *guard.Limiter
	br       *guard.Breaker
	rejected atomic.Uint64 // statements refused by br
}

// guardDefaults fills in the guard's zero Options.
func guardDefaults(o *Options) {
	if o.MaxInflight <= 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.MaxRefreshes <= 0 {
		o.MaxRefreshes = max(1, o.MaxInflight/4)
	}
	if o.QueueTimeout <= 0 {
		o.QueueTimeout = DefaultQueueTimeout
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerTimeout <= 0 {
		o.BreakerTimeout = DefaultBreakerTimeout
	}
	if o.BreakerProbes <= 0 {
		o.BreakerProbes = DefaultBreakerProbes
	}
}

// init sets g up from o (defaults already filled in). Background slots
// have no queue timeout: refreshes never queue, pre-warming waits as long
// as its context lets it.
func (g *scopeGuard) init(o *Options, log func(from, to breakerState), clock Clock) {
	g.fg = guard.NewLimiter(o.MaxInflight, o.QueueTimeout)
	g.bg = guard.NewLimiter(o.MaxRefreshes, 0)
	g.br = guard.NewBreaker(guard.Config{Failures: o.BreakerFailures, Timeout: o.BreakerTimeout,
		Probes: o.BreakerProbes, Clock: clock, Classify: breakerVerdict, OnChange: log})
}

// enter admits one foreground origin query of sc: its breaker must allow it
// and one of its slots must free up before ctx ends or the queue timeout
// passes. The ticket goes back with exit.
func (s *Shield) enter(ctx context.Context, sc *scope) (ticket, error) {
	probe, ok := sc.guard.br.Allow()
	if !ok {
		s.refused(sc)
		return ticket{}, ErrCircuitOpen
	}
	t, err := s.slot(ctx, sc)
	if err != nil {
		sc.guard.br.Record(probe, errNotRun) // the database was not asked
		return ticket{}, err
	}
	t.probe = probe
	return t, nil
}

// refused counts a statement of sc refused by its open breaker.
func (s *Shield) refused(sc *scope) {
	s.stats.breakerRejected.Add(1)
	sc.guard.rejected.Add(1)
}

// slot takes a foreground slot of sc, waiting until ctx ends or the queue
// timeout passes.
func (s *Shield) slot(ctx context.Context, sc *scope) (ticket, error) {
	t := ticket{g: &sc.guard, slot: sc.guard.fg}
	err := t.slot.Acquire(ctx)
	if err == nil {
		return t, nil
	}
	s.stats.shed.Add(1)
	if err != ErrOverloaded {
		return ticket{}, err // ctx ended
	}
	s.warned.Warn(s.log, "shed", "", "sqlflight: shedding reads: every origin slot is taken",
		"max_inflight", s.opts.MaxInflight, "queue_timeout", t.slot.QueueTimeout(), "scope", sc.name())
	return ticket{}, ErrOverloaded
}

// errNotRun tells the breaker that an admitted request never reached the
// database: it says nothing about its health (a probe is given back).
var errNotRun = errors.New("sqlflight: not run")

// errDeadSession is the error of a probe whose connection died with the
// outage while its session held changes that a new connection would not
// have: database/sql retries on another connection (driver.ErrBadConn),
// and the breaker takes the probe back, as it says nothing of the
// database now.
var errDeadSession = fmt.Errorf("sqlflight: the session's connection was lost in the outage: %w", driver.ErrBadConn)

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
		_ = c.closeReal(rc)
		c.real = nil
		c.lost = c.lost || lost
	}
	c.mu.Unlock()
	if lost {
		return nil, errDeadSession
	}
	return reopen(ctx)
}

// enterBackground admits a background refresh of sc only if one of its
// refresh slots is free at once and its breaker is closed: refreshes never
// queue.
func (s *Shield) enterBackground(sc *scope) (ticket, bool) {
	g := &sc.guard
	if g.br.State() != breakerClosed || !g.bg.TryAcquire() {
		return ticket{}, false
	}
	return ticket{g: g, slot: g.bg}, true
}

// ticket is an admitted origin query: its scope's guard, its slot and
// whether it probes a half-open breaker.
type ticket struct {
	g     *scopeGuard
	slot  *guard.Limiter
	probe bool
}

// exit gives the ticket back and tells the breaker how it went.
func (s *Shield) exit(t ticket, err error) {
	t.g.br.Record(t.probe, err)
	if t.slot != nil {
		t.slot.Release()
	}
}

// admit lets a statement that is not an origin query (a write, a bypassed
// read, a transaction's begin) reach the database unless the breaker is
// open. Statements inside a transaction are always let through.
func (c *conn) admit(write bool) (probe bool, err error) {
	if c.inTx() || (write && c.s.opts.WritesWhenOpen) {
		return false, nil
	}
	probe, ok := c.sc.guard.br.Allow()
	if !ok {
		c.s.refused(c.sc)
		return false, ErrCircuitOpen
	}
	return probe, nil
}

// breakerState is the state of a scope's breaker, under the name the
// root's code has for it.
type breakerState = guard.State

// The states of a breaker.
const (
	breakerClosed   = guard.Closed
	breakerOpen     = guard.Open
	breakerHalfOpen = guard.HalfOpen
)

// breakerVerdict is the Classify of a scope's breaker: only errors that
// mean the database is unavailable count as failures (see unavailable); a
// request that never reached the database (errNotRun, errDeadSession) and
// a caller's own cancellation say nothing; every other outcome, an error
// of the statement's own included, means the database answered.
func breakerVerdict(err error) guard.Outcome {
	switch {
	case err == errNotRun || err == errDeadSession:
		return guard.Neutral
	case unavailable(err):
		return guard.Unavailable
	case err != nil && ownCancellation(err):
		return guard.Neutral
	}
	return guard.Healthy
}

// unavailable reports whether err means the database cannot be reached or
// cannot take work: connection errors, the origin's own timeout, and the
// SQLSTATE classes 08 (connection exception), 53 (insufficient resources),
// 57P01–57P03 (shutdown, cannot connect now) and 58 (system error). A
// caller's cancellation, an empty result, a constraint violation or a
// syntax error never count.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	var cf *connectFailure
	if errors.Is(err, ErrOriginTimeout) || errors.As(err, &cf) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") || strings.HasPrefix(code, "58") ||
			code == "57P01" || code == "57P02" || code == "57P03"
	}
	if ownCancellation(err) {
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// connectFailure is a real connection that could not be opened for a
// reason other than its caller's cancellation: a refused or unreachable
// server, or one that never answered before connect_timeout or the
// caller's deadline. It counts against the breaker like any other sign
// that the database cannot be reached; it reads as the error it wraps.
type connectFailure struct{ err error }

func (e *connectFailure) Error() string { return e.err.Error() }
func (e *connectFailure) Unwrap() error { return e.err }

// ownCancellation reports whether err is a context's end (the caller's, or
// a flight abandoned by every caller), not a verdict on the database.
func ownCancellation(err error) bool {
	return (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) &&
		!errors.Is(err, ErrOriginTimeout)
}
