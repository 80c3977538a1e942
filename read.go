package sqlflight

// The read path of a shareable read, in the order it runs: share (key,
// cache lookup, bypasses) → lookup (judged by the reader's policy; early
// and stale refreshes) → fly (join or lead the key's flight; the shared
// tier's look) → launch → origin (on a lent or spare real connection,
// through the scope's guard) → fill (the store, then the tier) → finish →
// await (each caller's own cursor, or its own error).

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/batch"
	fl "github.com/sqlflight/sqlflight/internal/flight"
	"github.com/sqlflight/sqlflight/internal/fresh"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/parent"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// A flight is one origin execution of a key, shared by every caller that
// joins it while it runs (internal/flight). Its Data is what the Shield
// keeps with it (flightData).
type flight = fl.Flight[result, flightData]

// flightData is what the Shield keeps with a flight, written by its leader
// before the flight finishes and read by its callers after.
type flightData struct {
	lim limits // the bounds of a shareable result, set by launch
	// fromShared is the shared tier's entry the flight was answered with
	// (nil when it queried): a value filled earlier, which a follower
	// stricter than the leader may not take.
	fromShared *entry
	// rd is the leader's read, which the origin keeps (the leader's caller
	// goes on with its own, on its stack): made with the flight, not apart.
	rd read
	// lone is the origin's rows when they went to the leader alone
	// (engine.origin), for await to tie them to the leader's context.
	lone *passRows
	// turn is the batch group's turn the origin holds (batch.go), given
	// back once it is done; nil for a read that does not batch.
	turn *batch.Turn
}

// flightGroup is the Shield's group of flights, keyed by the full key of
// their reads (internal/flight).
type flightGroup struct {
	fl.Group[result, flightData]
}

var (
	// errAbandoned cancels an origin nobody waits for any more.
	errAbandoned = fl.ErrAbandoned
	// errRetry tells a follower to try again: the leader's connection broke.
	errRetry = fl.ErrRetry
	// errLeaderGone fails a flight whose leader left before its origin began.
	errLeaderGone = fl.ErrLeaderGone
	// errNotShared tells a follower that the result went to the leader only.
	errNotShared = fl.ErrNotShared
)

// Owed returns where c keeps the flight its last caller owes (conn.owes):
// c is a flight's Debtor.
func (c *conn) Owed() *atomic.Pointer[flight] { return &c.owes }

// Heir returns the flight c's caller may join as one of its herd for its
// first statement (conn.heir), or 0.
func (c *conn) Heir() uint64 { return c.heir.Load() }

// read is one shareable read on its way through the Shield.
type read struct {
	c      *conn
	query  string // the SQL text, for background refreshes
	r      *sqlscan.Result
	a      annotation.Annotation // the statement's annotation and …
	v      *verdict              // … the server's verdict, for a read that leaves its flight
	plan   plan
	args   []driver.NamedValue // detached from the caller
	run    runFunc
	key    string
	tables []string
	known  bool
	rows   *rowDeps // the rows of its table it depends on (nil: every row)
	// bound: the result belongs to sessions changed under the context's
	// scope; a spare connection cannot refresh it in the background.
	bound bool
	part  partition     // what its key is keyed under besides the text
	out   outcome       // how the caller was served (stmtstats.go)
	named *nameCounters // the policy name's counters, or nil
	stats *stmtStats    // the statement's statistics, or nil
	seen  *entry        // the entry lookup found (and did not serve), or nil

	// With a shared tier: the L2 key ("" when L2 is not used), the lease
	// the origin holds, the version its result is written with, and, for
	// a background refresh, the version of the entry it refreshes.
	l2          string
	wantL2      bool // a background refresh that may use L2
	lease       Lease
	version     uint64
	prevVersion uint64
}

// runOrigin runs the read's SQL text on rc. The origin does not use the
// caller's prepared statement, whose life is the caller's (and whose
// connection may not be rc): it sends the text (pgx prepares and caches it
// per connection anyway), unless the parent can only run prepared
// statements.
func (rd *read) runOrigin(ctx context.Context, rc driver.Conn) (driver.Rows, error) {
	switch rc.(type) {
	case driver.QueryerContext, driver.Queryer: //nolint:staticcheck // legacy parent
		return parent.Query(ctx, rc, rd.query, rd.args)
	}
	if rd.run == nil {
		return nil, driver.ErrSkip
	}
	return rd.run(ctx, rc, rd.args)
}

// share serves a read from the cache when it holds a usable entry, else
// through the key's flight: it joins a flight started after the last write
// to the tables it reads, or leads a new one whose origin query runs on c's
// real connection, detached from ctx. Each caller gets its own cursor over
// the shared result and may leave on its own context at any time.
func (s *engine) share(ctx context.Context, c *conn, query string, f *fate, args []driver.NamedValue, run runFunc) (driver.Rows, error) {
	r, p := f.r, f.plan
	kb, ok := key.Append(make([]byte, 0, key.Size(f.part, r.Normalized, args)), c.sc.id, f.part, r.Normalized, args)
	if !ok {
		f.bypass(s, bypassArgs)
		return c.pass(ctx, query, f, run, args)
	}
	// The key's bytes are never written again: the string may alias them.
	rd := read{c: c, query: query, r: r, a: f.a, v: f.v, plan: p, args: args, run: run,
		key: unsafe.String(unsafe.SliceData(kb), len(kb)), tables: f.tables, known: f.known, rows: f.rows,
		bound: f.part.Session, part: f.part, stats: f.stat.st}
	f.stat.key = rd.stats.SawKey(rd.key, args)
	if rd.named = s.stats.names.Of(p.pol.Name); rd.named != nil {
		rd.named.Queries.Add(1)
	}

	var st *store
	var old *entry // an expired entry, served if the origin fails (stale-if-error)
	if p.cache {
		if st = s.cache(); st != nil {
			rows, e := s.lookup(st, &rd)
			if rows != nil {
				f.stat.out = rd.out
				return rows, nil
			}
			old = e
			s.stats.misses.Add(1)
			if rd.named != nil {
				rd.named.Misses.Add(1)
			}
		}
	}
	// The origin may outlive this caller, who may then reuse its arguments.
	if rd.args, ok = key.Detach(args); !ok {
		f.bypass(s, bypassArgs)
		return c.pass(ctx, query, f, run, args)
	}
	if s.tooLarge.Holds(rd.key, time.Now(), s.limitsOf(p.pol).Within) {
		f.bypass(s, bypassTooLarge)
		return c.pass(ctx, query, f, run, args)
	}
	if p.pol.NoCoalesce {
		f.bypass(s, bypassPolicy)
		return c.pass(ctx, query, f, run, args)
	}
	rows, err := s.fly(ctx, &rd, st)
	f.stat.out = rd.out
	if err != nil && old != nil && ctx.Err() == nil && s.epochs.UnchangedFor(old.seq, rd.tables, rd.known, rd.rows) &&
		s.opts.Clock.Now().Before(old.last) {
		s.stats.staleIfError.Add(1)
		s.warned.Warn(s.log, "stale-if-error", r.ShapeKey, "sqlflight: serving a stale result: the query to refresh it failed",
			errText.Attr(err), "fingerprint", key.Fingerprint(r.ShapeKey), "name", p.pol.Name)
		return newReplay(old.res), nil
	}
	return rows, err
}

// lookup returns rows over a cached entry that rd's own policy finds
// usable (fresh, or stale while one background refresh runs), or nil and,
// if rd's policy still allows serving it when the origin fails, the entry's
// result with rd's stale-if-error limit. Freshness is the reader's: an
// entry filled under a longer TTL does not answer a stricter reader.
func (s *engine) lookup(st *store, rd *read) (driver.Rows, *entry) {
	e := st.Get(rd.key)
	if e == nil {
		return nil, nil
	}
	rd.seen = e
	if !s.epochs.UnchangedFor(e.seq, rd.tables, rd.known, rd.rows) {
		st.Drop(e) // computed before a write to its tables
		return nil, nil
	}
	now := s.opts.Clock.Now()
	if !now.Before(e.last) {
		st.Drop(e) // of no use any more, not even on error
		return nil, nil
	}
	d := s.judge(e, rd.plan.pol)
	switch d.At(now) {
	case fresh.Fresh:
		rd.out = outFresh
		if e.empty {
			rd.out = outNegative
			s.stats.negHits.Add(1)
			if rd.named != nil {
				rd.named.NegHits.Add(1)
			}
		} else {
			s.stats.freshHits.Add(1)
			if rd.named != nil {
				rd.named.FreshHits.Add(1)
			}
		}
		if beta := rd.plan.beta(); !rd.bound && fresh.InEarlyWindow(now, e.filled, d.Soft, e.delta, beta) &&
			fresh.EarlyRefresh(now, e.filled, d.Soft, e.delta, beta, rand.Float64()) {
			s.refresh(st, rd, e, now)
		}
		return newReplay(e.res), nil
	case fresh.Stale:
		if rd.bound {
			break // a miss: only a session of the scope can refresh it
		}
		rd.out = outStale
		s.stats.staleHits.Add(1)
		if rd.named != nil {
			rd.named.StaleHits.Add(1)
		}
		s.refresh(st, rd, e, now)
		return newReplay(e.res), nil
	}
	if !now.Before(d.Last) {
		return nil, nil // too old for this reader, even on error; others may still use it
	}
	// For stale-if-error, with this reader's limit.
	return nil, &entry{res: e.res, seq: e.seq, last: d.Last}
}

// fly runs the read through the key's flight.
func (s *engine) fly(ctx context.Context, caller *read, st *store) (driver.Rows, error) {
	c := caller.c
	relooks := 0
	for attempt := 0; ; attempt++ {
		f, lead := s.flights.joinOrLead(caller.key, &s.epochs, caller.tables, caller.known, caller.rows, st, c, caller.seen)
		if f == nil {
			// A flight ended since this caller looked: its entry is in
			// the store. Judged by this caller's own policy, as a hit.
			// (Not one of the attempts below; lookup sets seen, so that
			// the next pass leads unless yet another flight ended.)
			attempt--
			if relooks++; relooks > 3 {
				caller.seen = st.Peek(caller.key)
				continue
			}
			if rows, _ := s.lookup(st, caller); rows != nil {
				s.stats.misses.Add(^uint64(0)) // counted as a miss by share
				if caller.named != nil {
					caller.named.Misses.Add(^uint64(0))
				}
				return rows, nil
			}
			continue // lookup set caller.seen: the next pass leads unless yet another flight ended
		}
		if lead {
			caller.out = outMiss
			s.stats.flights.Add(1)
			f.Data.rd = *caller
			own := &f.Data.rd // the origin's: made with the flight
			if st != nil && s.tier != nil {
				if own.l2 = s.sharedKey(own); own.l2 != "" && s.sharedLead(ctx, f, own, st) {
					return s.await(ctx, f, true, 0) // answered from L2: f is finished
				}
			}
			if p, k, group := s.batchFor(own); p != nil {
				if rows, err, done := s.batched(ctx, f, own, st, k, group); done {
					return rows, err
				}
			}
			t, err := c.sc.guard.Enter(ctx)
			if err == nil {
				if err = c.lendToOrigin(ctx); err != nil {
					t.Exit(errNotRun)
				}
			}
			if err != nil {
				if t := f.Data.turn; t != nil {
					s.batches.Done(t)
				}
				s.tier.Release(own.l2, &own.lease) // another instance may query instead
				if ctx.Err() != nil {
					err = errLeaderGone // followers that joined meanwhile start over
				}
				s.finish(f, nil, err, nil)
				if err == errLeaderGone {
					err = ctx.Err()
				}
				return nil, err
			}
			// A leader whose context can never end could not leave
			// its flight anyway: with pgx (which never calls
			// runtime.Goexit) it runs the origin itself, and saves the
			// wake-up of another goroutine.
			s.launch(ctx, f, own, st, vconnLink{c}, t, ctx.Done() == nil && c.sc.pgx)
		} else {
			caller.out = outFollower
			s.stats.followers.Add(1)
			c.offer() // its caller only waits: a leader may take its real connection
		}
		rows, err := s.await(ctx, f, lead, caller.plan.pol.Wait)
		if !lead {
			c.withdraw()
		}
		switch {
		case err == nil && !lead && f.Data.fromShared != nil &&
			s.judge(f.Data.fromShared, caller.plan.pol).At(s.opts.Clock.Now()) == fresh.Expired:
			// Older than this follower's own policy allows: look again, or,
			// after a few tries, ask the database itself.
			_ = rows.Close()
			if attempt < 3 {
				continue
			}
			return s.passGuarded(ctx, caller)
		case err == nil:
			return rows, nil
		case errors.Is(err, errWaitExpired):
			s.stats.waitExpired.Add(1)
			s.stats.bypassed.Add(bypassPolicy)
			caller.out = stats.BypassOutcome(bypassPolicy)
			return s.passGuarded(ctx, caller)
		case errors.Is(err, errNotShared):
			s.stats.bypassed.Add(bypassTooLarge)
			caller.out = stats.BypassOutcome(bypassTooLarge)
			return s.passGuarded(ctx, caller)
		case errors.Is(err, errRetry) && attempt < 3:
			continue
		case errors.Is(err, errRetry):
			return nil, driver.ErrBadConn
		}
		return nil, err
	}
}

// passGuarded runs a read that left its flight on the caller's own
// connection, through the guard like an origin query.
func (s *engine) passGuarded(ctx context.Context, rd *read) (driver.Rows, error) {
	t, err := rd.c.sc.guard.Slot(ctx)
	if err != nil {
		return nil, err
	}
	defer t.Release()
	return rd.c.pass(ctx, rd.query, &fate{r: rd.r, a: rd.a, v: rd.v, args: rd.args}, rd.run, rd.args) // it consults the breaker itself
}

// joinOrLead joins the key's flight if it started after the last write to
// tables, or starts a new one.
//
// A flight that ended lingers (see finish) while its herd drains: a
// caller joins it as if it still ran while some caller of the flight (a
// late one included) has not yet given its virtual connection back to
// database/sql's pool nor run another statement on it, or when c is a
// connection a caller of the flight gave back and database/sql handed it
// to this caller from its queue (heir; internal/dbqueue): a caller that was
// waiting for a connection while the herd still held them. Under a capped
// pool (SetMaxOpenConns) callers queue for a connection while the flight
// runs, and database/sql hands each freed one to a queued caller: without
// this, a herd would break into one flight per batch of callers its
// connections let through, and its tail — the last queued callers, whose
// connections all came back before they ran — into one more. The linger
// ends with the flight's own duration (at most fl.MaxLinger); once the herd
// is over — every caller gave its connection back, and nobody waited for
// one — a read runs a flight of its own, however soon it comes.
//
// A flight that ended put its result into the store (st) before it left
// the group: a caching reader that looked in the store before, and finds
// neither a flight nor the entry it saw (seen), gets (nil, false) and looks
// again, so that no caller falls in between and starts a flight of its own.
func (g *flightGroup) joinOrLead(key string, e *epochs, tables []string, known bool, rows *rowDeps, st *store, c *conn, seen *entry) (*flight, bool) {
	fills := st != nil
	return g.JoinOrLead(key, func(seq uint64) bool { return e.UnchangedFor(seq, tables, known, rows) }, fills,
		func() bool {
			cur := st.Peek(key)
			return cur != nil && cur != seen && e.UnchangedFor(cur.seq, tables, known, rows)
		}, c)
}

// startRefresh starts a flight with no waiter for a background refresh of
// the entry stale (nil: the key held none), unless the key already has one
// running, or the store (st) holds another entry by now, from a flight that
// ended since stale was read.
func (g *flightGroup) startRefresh(key string, e *epochs, tables []string, known bool, rows *rowDeps, st *store, stale *entry) (*flight, bool) {
	return g.StartRefresh(key, func(seq uint64) bool { return e.UnchangedFor(seq, tables, known, rows) },
		func() bool {
			cur := st.Peek(key)
			return cur != nil && cur != stale && e.UnchangedFor(cur.seq, tables, known, rows)
		})
}

// refresh starts one background refresh of e, unless one runs or a failed
// one asked to wait.
func (s *engine) refresh(st *store, rd *read, e *entry, now time.Time) {
	if now.UnixNano() < e.retryAt.Load() {
		return
	}
	args, ok := key.Detach(rd.args) // the caller goes on with its own
	if !ok {
		return
	}
	t, ok := rd.c.sc.guard.Background()
	if !ok {
		return // the stale entry serves on; a later hit tries again
	}
	f, ok := s.flights.startRefresh(rd.key, &s.epochs, rd.tables, rd.known, rd.rows, st, e)
	if !ok {
		t.Exit(errNotRun)
		return
	}
	s.stats.refreshes.Add(1)
	rd.stats.Refreshed()
	// Not on the caller's connection: a cache hit never holds one.
	bg := *rd
	bg.args = args
	if s.tier != nil {
		// The origin goroutine computes the L2 key: no tier I/O here, on
		// the path of a cache hit.
		bg.wantL2, bg.prevVersion = true, e.version
	}
	shape, name := rd.r.ShapeKey, rd.plan.pol.Name // not rd: it stays on its caller's stack
	bg.plan.onFailure = func(err error) {
		if errors.Is(err, errLeasedElsewhere) {
			// Look for the other instance's value a little later.
			wait := 20*time.Millisecond + rand.N(40*time.Millisecond)
			e.retryAt.Store(s.opts.Clock.Now().Add(wait).UnixNano())
			return
		}
		s.stats.refreshFailures.Add(1)
		n := e.failures.Add(1)
		wait := fresh.Backoff(n, 100*time.Millisecond, 30*time.Second)
		e.retryAt.Store(s.opts.Clock.Now().Add(wait).UnixNano())
		s.warned.Warn(s.log, "refresh", shape, "sqlflight: background refresh failed; serving the stale result",
			errText.Attr(err), "retry_in", wait, "fingerprint", key.Fingerprint(shape), "name", name)
	}
	if s.tier == nil { // with a tier, the origin looks for another instance's refresh first
		if p, k, group := s.batchFor(&bg); p != nil {
			s.refreshBatched(f, &bg, st, t, k, group)
			return
		}
	}
	s.launch(context.Background(), f, &bg, st, &poolLink{sc: rd.c.sc, s: s}, t, false)
}

// launch starts the origin query of f on a context that keeps ctx's values
// but not its cancellation, bounded by the timeout: in a goroutine of its
// own, or (inline) on the caller's, which returns when it is done.
func (s *engine) launch(ctx context.Context, f *flight, rd *read, st *store, l link, t ticket, inline bool) {
	pol := rd.plan.pol
	timeout := pol.Timeout
	if timeout <= 0 {
		timeout = s.opts.OriginTimeout
	}
	octx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	timer := startTimeout(timeout, cancel)
	f.SetCancel(cancel)
	lim := s.limitsOf(pol)
	f.Data.lim = lim
	s.stats.inFlight.Add(1)
	j := originJob{s: s, ctx: octx, cancel: cancel, timer: timer, f: f, rd: rd, st: st, lim: lim, l: l, t: t}
	if inline {
		j.run()
		return
	}
	s.workers.run(j)
}

// An originTimeout ends an origin query that outlives its timeout with
// ErrOriginTimeout. Its timer comes from a pool and goes back to it when
// the origin stops it in time, so that a miss makes no timer of its own;
// a timer that fired is dropped. gen tells one use of a pooled timer from
// the next: a stop meant for an earlier use does nothing.
type originTimeout struct {
	ot  *originTimer
	gen uint64
}

type originTimer struct {
	t      *time.Timer
	mu     sync.Mutex
	gen    uint64
	cancel context.CancelCauseFunc // the origin's, until it is stopped or fires
}

var originTimers sync.Pool

// startTimeout calls cancel(ErrOriginTimeout) after d unless stopped first.
func startTimeout(d time.Duration, cancel context.CancelCauseFunc) originTimeout {
	ot, _ := originTimers.Get().(*originTimer)
	if ot == nil {
		ot = &originTimer{cancel: cancel}
		ot.t = time.AfterFunc(d, ot.fire)
		return originTimeout{ot: ot}
	}
	ot.mu.Lock()
	ot.gen++
	gen := ot.gen
	ot.cancel = cancel
	ot.mu.Unlock()
	ot.t.Reset(d)
	return originTimeout{ot: ot, gen: gen}
}

func (ot *originTimer) fire() {
	ot.mu.Lock()
	cancel := ot.cancel
	ot.cancel = nil
	ot.mu.Unlock()
	if cancel != nil {
		cancel(ErrOriginTimeout)
	}
}

// stop stops the timeout; only the first stop of a use counts.
func (t originTimeout) stop() {
	ot := t.ot
	ot.mu.Lock()
	if ot.gen != t.gen || ot.cancel == nil {
		ot.mu.Unlock()
		return // stopped already, or fired
	}
	ot.cancel = nil
	ot.mu.Unlock()
	if ot.t.Stop() {
		originTimers.Put(ot) // it did not fire: another origin may use it
	}
}

// originJob is one origin query for a worker to run (engine.origin).
type originJob struct {
	s      *engine
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  originTimeout
	f      *flight
	rd     *read
	st     *store
	lim    limits
	l      link
	t      ticket
}

func (j *originJob) run() { j.s.origin(j.ctx, j.cancel, j.timer, j.f, j.rd, j.st, j.lim, j.l, j.t) }

// workers run origin queries. A worker is a goroutine that, its origin
// done, waits a while (originIdle) for the next one: a goroutine per origin
// would grow a new stack to the parent driver's depth every time, and that
// costs a miss more than the hand-over. A worker ends once it waited
// originIdle, once the Shield is closed (Close; origins after it run on a
// goroutine each), or when its origin called runtime.Goexit (engine.origin
// fails the flight first). The zero value is not ready: init it.
type workers struct {
	jobs chan originJob
	stop chan struct{}
	once sync.Once
}

// originIdle is how long an idle worker waits for the next origin: short
// enough that a process whose reads stopped soon has none left.
const originIdle = 100 * time.Millisecond

func (w *workers) init() {
	w.jobs, w.stop = make(chan originJob), make(chan struct{})
}

// close ends the idle workers, and each busy one once its origin is done.
func (w *workers) close() { w.once.Do(func() { close(w.stop) }) }

// run hands j to an idle worker, or starts one.
func (w *workers) run(j originJob) {
	select {
	case w.jobs <- j:
	default:
		go w.work(j)
	}
}

func (w *workers) work(j originJob) {
	idle := time.NewTimer(originIdle)
	defer idle.Stop()
	for {
		j.run()
		j = originJob{} // hold nothing of it while idle
		idle.Reset(originIdle)
		select {
		case j = <-w.jobs:
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}

// limitsOf returns the bounds of a shareable result under pol: its
// maxrows= and maxbytes=, else the Shield's MaxResultRows and MaxResultBytes.
func (s *engine) limitsOf(pol Policy) limits {
	lim := limits{Rows: pol.MaxRows, Bytes: pol.MaxBytes}
	if lim.Rows <= 0 {
		lim.Rows = s.opts.MaxResultRows
	}
	if lim.Bytes <= 0 {
		lim.Bytes = s.opts.MaxResultBytes
	}
	return lim
}

// A link lends an origin query a real connection.
type link interface {
	conn(ctx context.Context) (driver.Conn, error)
	// release gives the connection back.
	release(broken bool)
	// leader is the connection whose caller may take a handoff, or nil.
	leader() *conn
}

// vconnLink is the leader's own virtual connection.
type vconnLink struct{ c *conn }

func (l vconnLink) conn(ctx context.Context) (driver.Conn, error) { return l.c.originConn(ctx) }
func (l vconnLink) leader() *conn                                 { return l.c }
func (l vconnLink) release(broken bool)                           { l.c.giveBack(broken) }

// poolLink is a connection of the scope's own, for background refreshes.
type poolLink struct {
	sc *scope
	s  *engine
	rc driver.Conn
}

func (l *poolLink) leader() *conn { return nil }

func (l *poolLink) conn(ctx context.Context) (driver.Conn, error) {
	rc, _, err := l.sc.anyReal(ctx, l.s)
	l.rc = rc
	return rc, err
}

func (l *poolLink) release(broken bool) {
	if l.rc != nil {
		l.sc.spare.Put(l.rc, broken)
	}
}

// origin runs in its own goroutine: query, materialize, fill, publish. A
// panic or runtime.Goexit anywhere in it fails the flight's waiters with
// ErrOriginPanicked and leaves no flight behind.
func (s *engine) origin(ctx context.Context, cancel context.CancelCauseFunc, timer originTimeout, f *flight, rd *read, st *store, lim limits, l link, t ticket) {
	var (
		res     *result
		handoff *replay
		// stream: the origin's rows, for a leader alone in its flight to
		// read on its own, unrecorded (flight.Group.Solo).
		stream driver.Rows
		err    error
		broken bool
		normal bool
		filled *entry // the entry the result filled (for L2 too)
		ran    bool
		fromL2 bool // answered by the shared tier: the database was not asked
		start  = time.Now()
	)
	defer func() {
		if !normal {
			err = s.panicked(recover(), "origin query", "the origin path")
			if stream != nil {
				_ = stream.Close()
			}
			broken, res, handoff, stream, filled, fromL2 = true, nil, nil, nil, nil, false
		}
		if handoff == nil && stream == nil {
			timer.stop()
			cancel(nil)
		}
		if ran {
			took := time.Since(start)
			s.stats.originDuration.Observe(took)
			rd.stats.OriginResult(took, res, err != nil)
			if rd.named != nil {
				rd.named.OriginExecs.Add(1)
				rd.named.OriginDuration.Observe(took)
			}
		}
		switch {
		case fromL2 && err != nil: // another instance refreshes it
			if rd.plan.onFailure != nil {
				rd.plan.onFailure(err)
			}
			// A caller that joined the refresh meanwhile starts over (and
			// looks in L2 itself).
			err = errLeaderGone
		case err != nil:
			s.stats.originErrors.Add(1)
			if rd.named != nil {
				rd.named.OriginErrors.Add(1)
			}
			if rd.plan.onFailure != nil {
				rd.plan.onFailure(err)
			}
		}
		if handoff != nil {
			// The leader's rows go on reading from its real connection.
			lc := l.leader()
			lc.openRows.Add(1)
			handoff.Release = func() {
				timer.stop()
				cancel(nil)
				lc.openRows.Add(-1)
			}
		}
		var lone io.Closer
		if stream != nil {
			// Likewise the rows of a leader alone in its flight.
			lc := l.leader()
			lc.openRows.Add(1)
			pr := &passRows{Rows: stream, c: lc, timeout: timer, cancel: cancel}
			f.Data.lone = pr
			lone = mirrorRows(pr, mirrorRowsMask(stream))
		}
		s.stats.inFlight.Add(-1)
		if fromL2 {
			t.Exit(errNotRun)
		} else {
			t.Exit(err) // the breaker knows before any waiter does
		}
		if t := f.Data.turn; t != nil {
			s.batches.Done(t) // the reads of other keys that gathered meanwhile run now
		}
		// Publish (an orphaned handoff is closed here) before the real
		// connection is given back: until then nobody else may use it.
		if lone != nil {
			s.flights.Finish(f, nil, nil, lone) // no follower may join it any more
		} else {
			s.finish(f, res, err, handoff)
		}
		l.release(broken)
		if rd.l2 != "" && !fromL2 {
			s.storeShared(rd, filled) // after the waiters have their result
		}
	}()

	if rd.wantL2 && st != nil {
		// A background refresh: another instance may have done it.
		if rd.l2 = s.sharedKey(rd); rd.l2 != "" {
			if res, err = s.sharedRefresh(ctx, f, rd, st); res != nil || err != nil {
				fromL2, normal = true, true
				return
			}
		}
	}
	rc, err := l.conn(ctx)
	if lc := l.leader(); err == nil && t.Probe() && lc != nil {
		rc, err = lc.forProbe(ctx, rc, false, l.conn)
	}
	if err == nil {
		s.stats.originExecs.Add(1)
		ran = true
		var rows driver.Rows
		rows, err = rd.runOrigin(ctx, rc)
		switch {
		case err != nil:
		case !f.Fills() && l.leader() != nil && s.flights.Solo(f):
			// Nobody joined the flight, and its result goes to no cache:
			// the leader reads the rows itself, as if it had passed
			// through; a caller that comes now runs a flight of its own.
			stream = rows
		default:
			res, handoff, err = materialize(rows, lim)
		}
	}
	if err != nil {
		if cause := context.Cause(ctx); cause == ErrOriginTimeout {
			err = wrapf("%w (%w): %w", ErrOriginTimeout, context.DeadlineExceeded, err)
		}
		broken = errors.Is(err, driver.ErrBadConn)
	}
	if handoff != nil && l.leader() == nil {
		// Nobody to hand an unshareable result to: read no further.
		err = errNotShared
		_ = handoff.Close()
		handoff = nil
	}
	if res != nil && st != nil && f.Fills() {
		filled = s.fill(st, f, rd, res, time.Since(start))
	}
	normal = true
}

// panicked is the error a path of origin queries (what, as the log names
// it; where, as the error does) fails its callers with once it panicked
// with r, or called runtime.Goexit (r nil): counted and logged, by the
// panic's type, never its text.
func (s *engine) panicked(r any, what, where string) error {
	s.stats.panics.Add(1)
	s.log.Error("sqlflight: "+what+" panicked", errText.Panic(r))
	if r == nil {
		return fmt.Errorf("%w: runtime.Goexit in %s", ErrOriginPanicked, where)
	}
	return wrapf("%w: %v", ErrOriginPanicked, r)
}

// fill stores res unless a write to its tables happened since its flight
// started (its waiters still get it), and returns the entry it made (nil
// after such a write; the shared tier takes it even if the store did not).
func (s *engine) fill(st *store, f *flight, rd *read, res *result, delta time.Duration) *entry {
	if !s.epochs.UnchangedFor(f.Seq(), rd.tables, rd.known, rd.rows) {
		return nil
	}
	now := s.opts.Clock.Now()
	e := &entry{key: rd.key, res: res, empty: res.Empty(), filled: now, delta: delta, seq: f.Seq(), tables: rd.tables,
		known: rd.known, version: rd.version}
	e.jitter, e.by, e.stamped = fresh.Draw(), s.windows(rd.plan.pol), true
	d := fresh.At(now, e.by, e.empty, e.jitter)
	e.soft, e.hard, e.last = d.Soft, d.Hard, d.Last
	if st.Put(e, now) {
		s.stats.fills.Add(1)
	}
	return e
}

// finish publishes the outcome of f to its waiters and removes it from the
// group (a flight that fills the cache put its result there first, where
// readers see it from then on: joinOrLead). An unshared result goes to the
// leader if it still waits, and the key is remembered as too large.
func (s *engine) finish(f *flight, res *result, err error, handoff *replay) {
	var h io.Closer
	if handoff != nil {
		s.stats.tooLarge.Add(1)
		s.tooLarge.Put(f.Key(), f.Data.lim, time.Now(), tooLargeMemory, nil)
		h = mirrorRows(handoff, handoff.Mask())
	}
	s.flights.Finish(f, res, err, h)
}

var errWaitExpired = errors.New("sqlflight: waited longer than wait=")

// await waits for f on the caller's context. It returns the caller's own
// rows over the result, or the flight's error; a follower whose wait ran out
// gets errWaitExpired, and one whose leader's connection broke errRetry.
// A caller that stops waiting leaves f unless it finished meanwhile (then
// it takes the result after all, so that a leader never leaves a handoff
// behind); the last to leave cancels the origin, unless its result goes to
// the cache (flight.Group.Leave).
func (s *engine) await(ctx context.Context, f *flight, lead bool, wait time.Duration) (driver.Rows, error) {
	s.stats.waiting.Add(1)
	defer s.stats.waiting.Add(-1)
	if !lead {
		begin := time.Now()
		defer func() { s.stats.followerWait.Observe(time.Since(begin)) }()
	}
	var expired <-chan time.Time
	if wait > 0 && !lead {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	if done := ctx.Done(); done == nil && expired == nil {
		<-f.Done() // nothing else to wait for: no select
	} else {
		select {
		case <-f.Done():
		case <-done:
			if s.flights.Leave(f, lead) {
				return nil, ctx.Err()
			}
		case <-expired:
			if s.flights.Leave(f, lead) {
				return nil, errWaitExpired
			}
		}
	}
	// The flight is over.
	if lead {
		if h := s.flights.Handoff(f); h != nil {
			if pr := f.Data.lone; pr != nil && ctx.Done() != nil {
				// Rows nobody else reads end with the caller's context, as a
				// pass-through's do: its cancellation interrupts a read (or
				// the drain of a Close) instead of waiting for the server.
				pr.caller = ctx
				pr.watch = context.AfterFunc(ctx, func() { pr.cancel(context.Cause(ctx)) })
			}
			return h.(driver.Rows), nil
		}
	}
	res, err := f.Outcome(lead)
	if err != nil {
		return nil, err
	}
	return newReplay(res), nil
}
