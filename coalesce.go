package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// A flight is one origin execution of a key, shared by every caller that
// joins it while it runs. Fields below done are written once, before done is
// closed; waiters, leaderLeft and handoff are guarded by flightGroup.mu.
type flight struct {
	key    string
	seq    uint64 // epoch sequence when the flight started
	done   chan struct{}
	cancel context.CancelCauseFunc

	res       *result
	err       error
	notShared bool // the result could not be shared: followers run their own query

	waiters    int
	leaderLeft bool
	finished   bool
	handoff    driver.Rows // the unshared result, streamed to the leader only
}

type flightGroup struct {
	mu sync.Mutex
	m  map[string]*flight
}

var (
	// errAbandoned cancels an origin nobody waits for any more.
	errAbandoned = errors.New("sqlflight: origin abandoned by every caller")
	// errRetry tells a follower to try again: the leader's connection broke.
	errRetry = errors.New("sqlflight: flight failed on the leader's connection")
	// errLeaderGone fails a flight whose leader left before its origin began.
	errLeaderGone = errors.New("sqlflight: leader left before the origin started")
	// errNotShared tells a follower that the result went to the leader only.
	errNotShared = errors.New("sqlflight: result not shared")
)

// share runs a read through the key's flight: it joins a flight started
// after the last write to the tables it reads, or leads a new one whose
// origin query runs on c's real connection, detached from ctx. Each caller
// gets its own cursor over the shared result and may leave on its own
// context at any time.
func (s *Shield) share(ctx context.Context, c *conn, r *sqlscan.Result, pol Policy, args []driver.NamedValue, run runFunc) (driver.Rows, error) {
	key, ok := appendKey(nil, c.sc.id, r.Normalized, args)
	if !ok {
		s.stats.bypass(bypassArgs)
		return c.pass(ctx, r, run, args)
	}
	// The origin may outlive this caller, who may then reuse its arguments.
	detached, ok := detachArgs(args)
	if !ok {
		s.stats.bypass(bypassArgs)
		return c.pass(ctx, r, run, args)
	}
	k := string(key)
	if s.tooLarge.n.Load() > 0 && s.tooLarge.has(k, time.Now()) {
		s.stats.bypass(bypassTooLarge)
		return c.pass(ctx, r, run, args)
	}
	tables, known := r.Tables, r.TablesKnown
	if pol.Tables != nil {
		tables, known = pol.Tables, true
	}
	for attempt := 0; ; attempt++ {
		f, lead := s.flights.joinOrLead(k, &s.epochs, tables, known)
		if lead {
			s.stats.flights.Add(1)
			if err := s.launch(ctx, c, f, pol, run, detached); err != nil {
				// Followers that joined meanwhile start over.
				s.finish(f, nil, errLeaderGone, nil, nil, nil, nil)
				return nil, err
			}
		} else {
			s.stats.followers.Add(1)
		}
		rows, err := s.await(ctx, f, lead, pol.Wait)
		switch {
		case err == nil:
			return rows, nil
		case errors.Is(err, errWaitExpired):
			s.stats.waitExpired.Add(1)
			s.stats.bypass(bypassPolicy)
			return c.pass(ctx, r, run, args)
		case errors.Is(err, errNotShared):
			s.stats.bypass(bypassTooLarge)
			return c.pass(ctx, r, run, args)
		case errors.Is(err, errRetry) && attempt < 3:
			continue
		case errors.Is(err, errRetry):
			return nil, driver.ErrBadConn
		}
		return nil, err
	}
}

func (g *flightGroup) joinOrLead(key string, e *epochs, tables []string, known bool) (*flight, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.m[key]; f != nil && e.unchangedSince(f.seq, tables, known) {
		f.waiters++
		return f, false
	}
	// A flight older than a write to its tables stays out of the map (its
	// own waiters still get its result); a new one replaces it.
	f := &flight{key: key, seq: e.now(), done: make(chan struct{}), waiters: 1}
	g.m[key] = f
	return f, true
}

// launch starts the origin query of f on c's real connection, on a context
// that keeps ctx's values but not its cancellation, bounded by the timeout.
func (s *Shield) launch(ctx context.Context, c *conn, f *flight, pol Policy, run runFunc, args []driver.NamedValue) error {
	if err := c.lendToOrigin(ctx); err != nil {
		return err
	}
	timeout := pol.Timeout
	if timeout <= 0 {
		timeout = s.opts.OriginTimeout
	}
	octx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	timer := time.AfterFunc(timeout, func() { cancel(ErrOriginTimeout) })
	f.cancel = cancel
	lim := limits{rows: pol.MaxRows, bytes: pol.MaxBytes}
	if lim.rows <= 0 {
		lim.rows = s.opts.MaxRows
	}
	if lim.bytes <= 0 {
		lim.bytes = s.opts.MaxBytes
	}
	s.stats.inFlight.Add(1)
	go s.origin(octx, cancel, timer, c, f, lim, run, args)
	return nil
}

// origin runs in its own goroutine: query, materialize, publish. A panic or
// runtime.Goexit anywhere in it fails the flight's waiters with
// ErrOriginPanicked and leaves no flight behind.
func (s *Shield) origin(ctx context.Context, cancel context.CancelCauseFunc, timer *time.Timer, c *conn, f *flight, lim limits, run runFunc, args []driver.NamedValue) {
	var (
		res     *result
		handoff *replay
		err     error
		broken  bool
		normal  bool
	)
	defer func() {
		if !normal {
			r := recover()
			if r == nil {
				err = fmt.Errorf("%w: runtime.Goexit in the origin path", ErrOriginPanicked)
			} else {
				err = fmt.Errorf("%w: %v", ErrOriginPanicked, r)
			}
			s.stats.panics.Add(1)
			s.log.Error("sqlflight: origin query panicked", "panic", r)
			broken, res, handoff = true, nil, nil
		}
		if handoff == nil {
			timer.Stop()
			cancel(nil)
		}
		if err != nil {
			s.stats.originErrors.Add(1)
		}
		if handoff != nil {
			// The leader's rows keep reading from the real connection.
			c.openRows.Add(1)
		}
		c.giveBack(broken)
		s.stats.inFlight.Add(-1)
		s.finish(f, res, err, handoff, timer, cancel, c)
	}()

	rc, err := c.originConn(ctx)
	if err == nil {
		s.stats.originExecs.Add(1)
		var rows driver.Rows
		rows, err = run(ctx, rc, args)
		if err == nil {
			res, handoff, err = materialize(rows, lim)
		}
	}
	if err != nil {
		if cause := context.Cause(ctx); cause == ErrOriginTimeout {
			err = fmt.Errorf("%w (%w): %w", ErrOriginTimeout, context.DeadlineExceeded, err)
		}
		broken = errors.Is(err, driver.ErrBadConn)
	}
	normal = true
}

// finish publishes the outcome of f to its waiters and removes it from the
// group. An unshared result goes to the leader if it still waits.
func (s *Shield) finish(f *flight, res *result, err error, handoff *replay, timer *time.Timer, cancel context.CancelCauseFunc, c *conn) {
	g := &s.flights
	g.mu.Lock()
	if g.m[f.key] == f {
		delete(g.m, f.key)
	}
	f.res, f.err, f.finished = res, err, true
	var orphan driver.Rows
	if handoff != nil {
		f.notShared = true
		s.stats.tooLarge.Add(1)
		s.tooLarge.add(f.key, time.Now(), tooLargeMemory)
		timer.Stop()
		handoff.release = func() {
			cancel(nil)
			c.openRows.Add(-1)
		}
		h := mirrorRows(handoff, handoff.res.mask)
		if f.leaderLeft {
			orphan = h
		} else {
			f.handoff = h
		}
	}
	close(f.done)
	g.mu.Unlock()
	if orphan != nil {
		_ = orphan.Close()
	}
}

var errWaitExpired = errors.New("sqlflight: waited longer than wait=")

// await waits for f on the caller's context. It returns the caller's own
// rows over the result, or the flight's error; a follower whose wait ran out
// gets errWaitExpired, and one whose leader's connection broke errRetry.
func (s *Shield) await(ctx context.Context, f *flight, lead bool, wait time.Duration) (driver.Rows, error) {
	s.stats.waiting.Add(1)
	defer s.stats.waiting.Add(-1)
	var expired <-chan time.Time
	if wait > 0 && !lead {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		if s.leave(f, lead) {
			return nil, ctx.Err()
		}
	case <-expired:
		if s.leave(f, lead) {
			return nil, errWaitExpired
		}
	}
	// The flight is over.
	if lead {
		g := &s.flights
		g.mu.Lock()
		h := f.handoff
		f.handoff = nil
		g.mu.Unlock()
		if h != nil {
			return h, nil
		}
	}
	switch {
	case f.err == nil && f.res != nil:
		return newReplay(f.res), nil
	case f.notShared:
		return nil, errNotShared
	case !lead && (errors.Is(f.err, driver.ErrBadConn) || f.err == errLeaderGone):
		return nil, errRetry
	}
	return nil, f.err
}

// leave takes a waiter off f and reports true; if f already finished it
// reports false and the caller takes the result after all (so that a leader
// never leaves a handoff behind). The last waiter to leave cancels the
// origin: nobody needs its result.
func (s *Shield) leave(f *flight, lead bool) bool {
	g := &s.flights
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.finished {
		return false
	}
	f.waiters--
	if lead {
		f.leaderLeft = true
	}
	if f.waiters == 0 {
		if g.m[f.key] == f {
			delete(g.m, f.key)
		}
		if f.cancel != nil {
			f.cancel(errAbandoned)
		}
	}
	return true
}

// epochs orders writes and flights: every write through the Shield takes the
// next sequence number and stamps the tables it wrote (or "all" when its
// tables are unknown); a flight remembers the sequence when it started. A
// flight may be joined only if none of its tables was written since.
type epochs struct {
	seq atomic.Uint64
	all atomic.Uint64 // sequence of the last write with unknown tables

	mu     sync.RWMutex
	tables map[string]uint64
}

func (e *epochs) now() uint64 { return e.seq.Load() }

func (e *epochs) bump(tables []string, known bool) {
	n := e.seq.Add(1)
	if !known {
		e.all.Store(n)
		return
	}
	e.mu.Lock()
	if e.tables == nil {
		e.tables = make(map[string]uint64)
	}
	for _, t := range tables {
		e.tables[strings.ToLower(t)] = n
	}
	e.mu.Unlock()
}

// unchangedSince reports whether no write to tables (any write, when the
// tables are unknown) happened after sequence seq.
func (e *epochs) unchangedSince(seq uint64, tables []string, known bool) bool {
	if !known {
		return e.seq.Load() == seq
	}
	if e.all.Load() > seq {
		return false
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, t := range tables {
		if e.tables[strings.ToLower(t)] > seq {
			return false
		}
	}
	return true
}

// bump records a write through the Shield.
func (s *Shield) bump(tables []string, known bool) {
	if known && len(tables) == 0 {
		return
	}
	s.stats.invalidations.Add(1)
	s.epochs.bump(tables, known)
}
