package guard

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
)

var (
	// ErrOpen is the error of a request refused because the circuit breaker
	// of its database is open (the root exports it as ErrCircuitOpen).
	ErrOpen = errors.New("sqlflight: circuit open: database unavailable")

	// ErrOriginTimeout is wrapped by the error of an origin query that ran
	// past its timeout budget (the root exports it). It counts as the
	// database's failure, unlike a caller's own cancellation.
	ErrOriginTimeout = errors.New("sqlflight: origin query timed out")

	// ErrNotRun tells the breaker that an admitted request never reached the
	// database: it says nothing about its health (a probe is given back).
	ErrNotRun = errors.New("sqlflight: not run")

	// ErrDeadSession is the error of a probe whose connection died with the
	// outage while its session held changes that a new connection would not
	// have: database/sql retries on another connection (it wraps
	// driver.ErrBadConn), and the breaker takes the probe back, as it says
	// nothing of the database now.
	ErrDeadSession = fmt.Errorf("sqlflight: the session's connection was lost in the outage: %w", driver.ErrBadConn)
)

// ConnectFailure is a real connection that could not be opened for a
// reason other than its caller's cancellation: a refused or unreachable
// server, or one that never answered before connect_timeout or the
// caller's deadline. It counts against the breaker like any other sign that
// the database cannot be reached; it reads as the error it wraps.
type ConnectFailure struct{ Err error }

// Error returns the text of the error it wraps.
func (e *ConnectFailure) Error() string { return e.Err.Error() }

// Unwrap returns the error it wraps.
func (e *ConnectFailure) Unwrap() error { return e.Err }

// Classify is the Config.Classify of a database's breaker: only errors that
// mean the database is unavailable count as failures (see IsUnavailable); a
// request that never reached the database (ErrNotRun, ErrDeadSession) and a
// caller's own cancellation say nothing; every other outcome, an error of the
// statement's own included, means the database answered.
func Classify(err error) Outcome {
	switch {
	case err == ErrNotRun || err == ErrDeadSession:
		return Neutral
	case IsUnavailable(err):
		return Unavailable
	case err != nil && OwnCancellation(err):
		return Neutral
	}
	return Healthy
}

// IsUnavailable reports whether err means the database cannot be reached or
// cannot take work: connection errors (ConnectFailure among them), the
// origin's own timeout (ErrOriginTimeout), and the SQLSTATE classes 08
// (connection exception), 53 (insufficient resources), 57P01–57P03
// (shutdown, cannot connect now) and 58 (system error). A caller's
// cancellation, an empty result, a constraint violation or a syntax error
// never count.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var cf *ConnectFailure
	if errors.Is(err, ErrOriginTimeout) || errors.As(err, &cf) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") || strings.HasPrefix(code, "58") ||
			code == "57P01" || code == "57P02" || code == "57P03"
	}
	if OwnCancellation(err) {
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// OwnCancellation reports whether err is a context's end (a caller's, or a
// flight abandoned by every caller), not a verdict on the database: an
// origin's own timeout (ErrOriginTimeout) is not one.
func OwnCancellation(err error) bool {
	return (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) &&
		!errors.Is(err, ErrOriginTimeout)
}

// Scope protects one database (one scope of the driver): a limiter bounds
// the origin queries running at once in the foreground, another the
// background ones (refreshes, pre-warming), and a breaker (classified by
// Classify) stops sending work to the database once it is found
// unavailable. Each database has its own Scope, so that one's outage or
// slowness never refuses another's statements nor takes their slots. A
// Scope is set up once by Init before use; its methods are safe for
// concurrent use.
type Scope struct {
	// Breaker is the database's circuit breaker. A statement that is not an
	// origin query asks it directly (Admit) and records its outcome on it.
	Breaker *Breaker
	// FG and BG are the foreground and background origin slots.
	FG, BG *Limiter

	rejected atomic.Uint64 // statements refused by Breaker
	c        ScopeConfig
}

// ScopeConfig configures a Scope. Zero counts and durations are taken as
// they are: the caller resolves its defaults.
type ScopeConfig struct {
	MaxInflight  int           // foreground slots
	MaxRefreshes int           // background slots
	QueueTimeout time.Duration // how long a foreground request waits for a slot
	Failures     int           // Config.Failures of the breaker
	Timeout      time.Duration // Config.Timeout of the breaker
	Probes       int           // Config.Probes of the breaker
	Clock        Clock
	// OnChange is told of every change of the breaker's state.
	OnChange func(from, to State)
	// Rejected and Shed, when set, count (across scopes) the requests refused
	// by an open breaker and those a full limiter turned away (ErrFull).
	Rejected, Shed *atomic.Uint64
	// OnShed, when set, is told of each request turned away with ErrFull.
	OnShed func(queueTimeout time.Duration)
}

// Init sets g up from c. Background slots have no queue timeout: refreshes
// never queue (Background), pre-warming waits as long as its context lets it
// (Warm).
func (g *Scope) Init(c ScopeConfig) {
	g.c = c
	g.FG = NewLimiter(c.MaxInflight, c.QueueTimeout)
	g.BG = NewLimiter(c.MaxRefreshes, 0)
	g.Breaker = NewBreaker(Config{Failures: c.Failures, Timeout: c.Timeout, Probes: c.Probes, Clock: c.Clock,
		Classify: Classify, OnChange: c.OnChange})
}

// Rejected returns the number of requests of this database refused by its
// open breaker.
func (g *Scope) Rejected() uint64 { return g.rejected.Load() }

// Admit lets a request that is not an origin query (a write, a bypassed
// read, a first connection) reach the database unless its breaker is open
// (ErrOpen, counted). The caller records the outcome on Breaker with probe.
func (g *Scope) Admit() (probe bool, err error) {
	probe, ok := g.Breaker.Allow()
	if !ok {
		g.refused()
		return false, ErrOpen
	}
	return probe, nil
}

func (g *Scope) refused() {
	if g.c.Rejected != nil {
		g.c.Rejected.Add(1)
	}
	g.rejected.Add(1)
}

// A Ticket is an admitted origin query: its Scope, its slot and whether it
// probes a half-open breaker. Exit gives it back.
type Ticket struct {
	g     *Scope
	slot  *Limiter
	probe bool
}

// Enter admits one foreground origin query: the breaker must allow it
// (else ErrOpen) and a foreground slot must free up before ctx ends or the
// queue timeout passes (else ctx's error or ErrFull).
func (g *Scope) Enter(ctx context.Context) (Ticket, error) {
	probe, err := g.Admit()
	if err != nil {
		return Ticket{}, err
	}
	t, err := g.Slot(ctx)
	if err != nil {
		g.Breaker.Record(probe, ErrNotRun) // the database was not asked
		return Ticket{}, err
	}
	t.probe = probe
	return t, nil
}

// Slot takes a foreground slot without asking the breaker, waiting until
// ctx ends or the queue timeout passes: for a request that consults the
// breaker itself. Its Ticket's Exit records nothing on the breaker that the
// request did not (it is not a probe).
func (g *Scope) Slot(ctx context.Context) (Ticket, error) {
	err := g.FG.Acquire(ctx)
	if err == nil {
		return Ticket{g: g, slot: g.FG}, nil
	}
	if g.c.Shed != nil {
		g.c.Shed.Add(1)
	}
	if err != ErrFull {
		return Ticket{}, err // ctx ended
	}
	if g.c.OnShed != nil {
		g.c.OnShed(g.FG.QueueTimeout())
	}
	return Ticket{}, ErrFull
}

// Background admits a background refresh only if a background slot is free
// at once and the breaker is closed: refreshes never queue.
func (g *Scope) Background() (Ticket, bool) {
	if g.Breaker.State() != Closed || !g.BG.TryAcquire() {
		return Ticket{}, false
	}
	return Ticket{g: g, slot: g.BG}, true
}

// Warm admits a pre-warming query: the breaker must be closed (else
// ErrOpen), and it waits for a background slot as long as ctx lets it.
func (g *Scope) Warm(ctx context.Context) (Ticket, error) {
	if g.Breaker.State() != Closed {
		return Ticket{}, ErrOpen
	}
	if err := g.BG.Acquire(ctx); err != nil {
		return Ticket{}, err
	}
	return Ticket{g: g, slot: g.BG}, nil
}

// Exit gives the ticket's slot back and tells the breaker how the query
// went (err, classified by Classify). A zero Ticket does nothing.
func (t Ticket) Exit(err error) {
	if t.g == nil {
		return
	}
	t.g.Breaker.Record(t.probe, err)
	if t.slot != nil {
		t.slot.Release()
	}
}

// Release gives the ticket's slot back without a word to the breaker: for a
// Slot ticket whose request recorded its own outcome.
func (t Ticket) Release() {
	if t.slot != nil {
		t.slot.Release()
	}
}

// Probe reports whether the ticket's query probes a half-open breaker: it
// should run on a connection known to be alive.
func (t Ticket) Probe() bool { return t.probe }
