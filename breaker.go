package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/semaphore"
)

var (
	// ErrOverloaded is wrapped by the error of a read that waited longer than
	// Options.QueueTimeout (or its context) for one of its scope's
	// Options.MaxInflight origin slots, when no cached result could stand in.
	ErrOverloaded = errors.New("sqlflight: overloaded: no origin slot free")

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

// guard protects one database (one scope) behind a Shield: a semaphore
// bounds the origin queries running at once (foreground and background
// apart), and a circuit breaker stops sending work to a database found
// unavailable. Each scope has its own, configured by the Shield's Options:
// one database's outage, or its slowness, never refuses the others'
// statements nor takes their slots.
type guard struct {
	fg, bg       *semaphore.Weighted
	queueTimeout time.Duration
	br           breaker
	rejected     atomic.Uint64 // statements refused by br
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

// init sets g up from o (defaults already filled in).
func (g *guard) init(o *Options, log func(from, to breakerState), clock Clock) {
	g.fg = semaphore.NewWeighted(int64(o.MaxInflight))
	g.bg = semaphore.NewWeighted(int64(o.MaxRefreshes))
	g.queueTimeout = o.QueueTimeout
	g.br = breaker{clock: clock, failures: int32(o.BreakerFailures), timeout: o.BreakerTimeout,
		probes: int32(o.BreakerProbes), onChange: log}
}

// enter admits one foreground origin query of sc: its breaker must allow it
// and one of its slots must free up before ctx ends or the queue timeout
// passes. The ticket goes back with exit.
func (s *Shield) enter(ctx context.Context, sc *scope) (ticket, error) {
	probe, ok := sc.guard.br.allow()
	if !ok {
		s.refused(sc)
		return ticket{}, ErrCircuitOpen
	}
	t, err := s.slot(ctx, sc)
	if err != nil {
		sc.guard.br.record(probe, errNotRun) // the database was not asked
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
	if t.slot.TryAcquire(1) {
		return t, nil
	}
	qctx, cancel := context.WithTimeout(ctx, sc.guard.queueTimeout)
	err := t.slot.Acquire(qctx, 1)
	cancel()
	if err == nil {
		return t, nil
	}
	s.stats.shed.Add(1)
	if ctx.Err() != nil {
		return ticket{}, ctx.Err()
	}
	s.warnEvery("shed", "", "sqlflight: shedding reads: every origin slot is taken",
		"max_inflight", s.opts.MaxInflight, "queue_timeout", sc.guard.queueTimeout, "scope", sc.name())
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
	if g.br.state() != breakerClosed || !g.bg.TryAcquire(1) {
		return ticket{}, false
	}
	return ticket{g: g, slot: g.bg}, true
}

// ticket is an admitted origin query: its scope's guard, its slot and
// whether it probes a half-open breaker.
type ticket struct {
	g     *guard
	slot  *semaphore.Weighted
	probe bool
}

// exit gives the ticket back and tells the breaker how it went.
func (s *Shield) exit(t ticket, err error) {
	t.g.br.record(t.probe, err)
	if t.slot != nil {
		t.slot.Release(1)
	}
}

// admit lets a statement that is not an origin query (a write, a bypassed
// read, a transaction's begin) reach the database unless the breaker is
// open. Statements inside a transaction are always let through.
func (c *conn) admit(write bool) (probe bool, err error) {
	if c.inTx() || (write && c.s.opts.WritesWhenOpen) {
		return false, nil
	}
	probe, ok := c.sc.guard.br.allow()
	if !ok {
		c.s.refused(c.sc)
		return false, ErrCircuitOpen
	}
	return probe, nil
}

type breakerState int32

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func (s breakerState) String() string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// breaker is a circuit breaker: closed until failures consecutive
// unavailability errors, then open (refusing at once) for timeout, then
// half-open, letting probes through: one success closes it, one failure
// opens it again. Only errors that mean the database is unavailable count
// (see unavailable); others reset the count like successes, and a caller's
// own cancellation counts as nothing.
//
// It is not gobreaker: gobreaker reads time.Now itself, and this breaker
// must run on the Shield's Clock so that tests move time instead of sleeping.
type breaker struct {
	clock    Clock
	failures int32
	timeout  time.Duration
	probes   int32
	onChange func(from, to breakerState)

	st          atomic.Int32 // breakerState, read without the lock
	consecutive atomic.Int32
	mu          sync.Mutex
	openedAt    time.Time
	probedAt    time.Time
	inProbe     int32
	transitions atomic.Uint64
}

func (b *breaker) state() breakerState { return breakerState(b.st.Load()) }

// allow reports whether a request may go, and whether it is a probe.
func (b *breaker) allow() (probe, ok bool) {
	if b.state() == breakerClosed {
		return false, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state() {
	case breakerClosed:
		return false, true
	case breakerOpen:
		if b.clock.Now().Sub(b.openedAt) < b.timeout {
			return false, false
		}
		b.set(breakerHalfOpen)
	}
	now := b.clock.Now()
	if b.inProbe >= b.probes {
		if now.Sub(b.probedAt) < b.timeout {
			return false, false
		}
		// A probe that has not reported for a whole timeout is lost (its
		// caller panicked, say): let another go rather than stay stuck.
		b.inProbe = 0
	}
	b.inProbe++
	b.probedAt = now
	return true, true
}

// record tells the breaker how an allowed request went (errNotRun: it did
// not go at all).
func (b *breaker) record(probe bool, err error) {
	if err == errNotRun || err == errDeadSession {
		if probe {
			b.mu.Lock()
			b.inProbe--
			b.mu.Unlock()
		}
		return
	}
	down := unavailable(err)
	if !probe && !down {
		if err == nil || !ownCancellation(err) {
			if b.consecutive.Load() != 0 {
				b.consecutive.Store(0)
			}
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.inProbe--
		switch {
		case down:
			b.open()
		case err == nil || !ownCancellation(err):
			b.consecutive.Store(0)
			if b.state() == breakerHalfOpen {
				b.set(breakerClosed)
			}
		}
		return
	}
	if b.consecutive.Add(1) >= b.failures && b.state() == breakerClosed {
		b.open()
	}
}

func (b *breaker) open() {
	b.openedAt = b.clock.Now()
	b.consecutive.Store(0)
	if b.state() != breakerOpen {
		b.set(breakerOpen)
	}
}

func (b *breaker) set(to breakerState) {
	from := b.state()
	b.st.Store(int32(to))
	b.transitions.Add(1)
	if b.onChange != nil {
		b.onChange(from, to)
	}
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
