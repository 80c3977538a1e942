package shared

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Clock tells the time of the back-off (the Shield's Options.Clock).
type Clock interface{ Now() time.Time }

// Config is what a State needs of its Shield. Every field is required.
type Config struct {
	// Timeout bounds every call to the tier (Options.RedisTimeout).
	Timeout time.Duration
	// Clock tells the time of the back-off of a tier that is down.
	Clock Clock
	// Flush publishes the writes that waited for the tier, as writes to
	// tables as a whole (to every table, when all); it runs within a call.
	Flush func(ctx context.Context, all bool, tables []string) error
	// TableKey returns the name under which writes to table were marked
	// (the name Begin and Publish are given), for Blocked.
	TableKey func(table string) string
	// Down is told, once per transition and outside the State's lock, that
	// err took the tier down until a probe after retryIn.
	Down func(err error, retryIn time.Duration)
	// Up is told, once per transition and outside the State's lock, that a
	// probe brought the tier back.
	Up func()
}

// State is a Shield's side of its shared tier: a breaker of its own, and
// the invalidations waiting to be published. Its zero value is not usable:
// make one with New.
type State struct {
	cfg Config

	down atomic.Bool
	mu   sync.Mutex // guards what follows
	// failures in a row; when down, the back-off and whether a probe runs
	failures  int
	openUntil time.Time
	downs     int
	probing   bool
	// Writes not yet known to the tier: being published (inflight) or
	// whose publish failed (pending, by the generation of the latest such
	// write, so that a flush forgets only what it published). "*" stands
	// for every table.
	inflight map[string]int
	pending  map[string]uint64
	gen      uint64
	flushing atomic.Bool    // a background flush runs
	retry    *time.Timer    // the next retry of a flush, while some wait
	closed   atomic.Bool    // the Shield was closed: no more background work
	bg       sync.WaitGroup // background flushes

	errors, published, transitions atomic.Uint64
}

const (
	// Failures is how many failures in a row take the tier down.
	Failures       = 3
	tierBackoffMin = 200 * time.Millisecond
	// BackoffMax is the longest a tier that is down waits for its probe.
	BackoffMax = 2 * time.Second
	maxPending = 1024 // tables remembered for publishing; beyond, "all"
	// flushRetryInterval is how often invalidations that could not be
	// published are tried again.
	flushRetryInterval = 500 * time.Millisecond
)

// New returns the State of a tier that is up, with nothing waiting.
func New(cfg Config) *State {
	return &State{cfg: cfg, inflight: map[string]int{}, pending: map[string]uint64{}}
}

// ErrDown is what calls return while the tier's breaker is open.
var ErrDown = errors.New("sqlflight: shared tier unavailable")

// ErrSlow is what a call returns to a caller who could not wait for it.
var ErrSlow = errors.New("sqlflight: the shared tier is slower than the caller's deadline allows")

// CallFor is Call for a call that returns a value: f's value when the
// call answered in time and without error, else the zero T and Call's
// error. A call that answered late may still be writing its value, so a
// caller never sees it: take values out of a tier call only through here.
func CallFor[T any](ts *State, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var v T
	if err := ts.Call(ctx, func(ctx context.Context) error {
		var err error
		v, err = f(ctx)
		return err
	}); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// Call runs f on the tier unless the tier is down (then it returns
// ErrDown, and f is not called), and returns within Config.Timeout even if
// f does not honour its context (f then goes on in its goroutine and its
// late answer is dropped; the error wraps context.DeadlineExceeded). The
// verdict on the tier is the whole call's, whether or not its caller still
// waits: a caller whose deadline is near waits at most half of what is left
// of it (then gets ErrSlow, so that it has time to query the database),
// while the call runs on to its own timeout and tells the breaker how it
// went. f's context is not canceled with ctx. A panic in the tier is an
// error of the tier.
func (ts *State) Call(ctx context.Context, f func(context.Context) error) error {
	probe, ok := ts.allow()
	if !ok {
		return ErrDown
	}
	timeout := ts.cfg.Timeout
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	var once sync.Once
	verdict := func(err error) { once.Do(func() { ts.record(probe, err) }) }
	timedOut := fmt.Errorf("%w: the shared tier did not answer within %v", context.DeadlineExceeded, timeout)
	stop := context.AfterFunc(cctx, func() { verdict(timedOut) })
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("sqlflight: shared tier panicked: %v", r)
			}
			if stop() { // answered before the timeout
				verdict(err)
			}
			done <- err
			cancel()
		}()
		err = f(cctx)
	}()
	var capped <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		if half := time.Until(dl) / 2; half < timeout {
			t := time.NewTimer(max(half, 0))
			defer t.Stop()
			capped = t.C
		}
	}
	select {
	case err := <-done:
		return err
	case <-cctx.Done():
		select {
		case err := <-done:
			return err
		default:
		}
		verdict(timedOut)
		return timedOut
	case <-capped:
		return ErrSlow
	}
}

// allow reports whether a call may go to the tier, and whether it is the
// probe of a tier that is down.
func (ts *State) allow() (probe, ok bool) {
	if !ts.down.Load() {
		return false, true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.down.Load() {
		return false, true
	}
	if ts.probing || ts.cfg.Clock.Now().Before(ts.openUntil) {
		return false, false
	}
	ts.probing = true
	return true, true
}

// record tells the breaker how a call went.
func (ts *State) record(probe bool, err error) {
	if err != nil {
		ts.errors.Add(1)
	}
	ts.mu.Lock()
	if err == nil {
		ts.failures = 0
		pend := len(ts.pending) > 0
		back := probe && ts.down.Load()
		if probe {
			ts.probing = false
		}
		if back {
			ts.down.Store(false)
			ts.downs = 0
			ts.transitions.Add(1)
		}
		ts.mu.Unlock()
		if back {
			ts.cfg.Up()
		}
		if pend {
			ts.kick() // publish what waited (this process's reads of it leave the tier alone meanwhile)
		}
		return
	}
	ts.failures++
	if probe || (!ts.down.Load() && (ts.failures >= Failures || refused(err))) {
		was := ts.down.Load()
		ts.probing = false
		ts.downs++
		wait := min(tierBackoffMin<<min(ts.downs-1, 8), BackoffMax)
		ts.openUntil = ts.cfg.Clock.Now().Add(wait)
		ts.down.Store(true)
		if !was {
			ts.transitions.Add(1)
			ts.mu.Unlock()
			ts.cfg.Down(err, wait)
			return
		}
	}
	ts.mu.Unlock()
}

// refused reports whether err is a refused connection: nothing listens
// where the tier is, and waiting for more failures would only make more
// callers pay for them.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// kick publishes the invalidations that wait, in the background, once at a
// time.
func (ts *State) kick() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed.Load() || !ts.flushing.CompareAndSwap(false, true) {
		return
	}
	ts.bg.Add(1) // under mu, which Close takes to set closed
	go func() {
		defer ts.bg.Done()
		defer ts.flushing.Store(false)
		_ = ts.Call(context.Background(), ts.Flush)
	}()
}

// retryLater makes sure that invalidations waiting for the tier are tried
// again even if this process makes no other call to it: every
// flushRetryInterval until none waits.
func (ts *State) retryLater() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.retry != nil || ts.closed.Load() {
		return
	}
	ts.retry = time.AfterFunc(flushRetryInterval, func() {
		ts.mu.Lock()
		ts.retry = nil
		pend := len(ts.pending) > 0
		ts.mu.Unlock()
		if !pend || ts.closed.Load() {
			return
		}
		if ts.Usable() {
			ts.kick()
		}
		ts.retryLater()
	})
}

// Close stops the retries and waits for a background flush that runs;
// calls in flight end on their own timeouts. Nothing starts in the
// background after it; Call still works.
func (ts *State) Close() {
	ts.mu.Lock()
	ts.closed.Store(true)
	if ts.retry != nil {
		ts.retry.Stop()
		ts.retry = nil
	}
	ts.mu.Unlock()
	ts.bg.Wait()
}

// Begin marks a write's tables (nil: every table) as not yet known to the
// tier, before the write's local epochs move: from then until Publish,
// reads of them leave the tier alone (it may hold results older than the
// write that it cannot yet tell apart). Every Begin needs its Publish with
// the same tables.
func (ts *State) Begin(tables []string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tables == nil {
		ts.inflight["*"]++
		return
	}
	for _, t := range tables {
		ts.inflight[t]++
	}
}

// Publish tells the fleet about a write whose tables Begin marked (nil:
// every table) by calling send within a Call, or, if that fails, remembers
// its tables for when the tier is back (a write published late is
// published by Config.Flush as a write to its tables as a whole, and
// retried every 500 ms until it is), then ends the mark.
func (ts *State) Publish(tables []string, send func(context.Context) error) {
	err := ts.Call(context.Background(), send)
	if err != nil {
		defer ts.retryLater() // runs after the deferred Unlock below
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err == nil {
		ts.published.Add(1)
	} else {
		ts.gen++
		if tables == nil || len(ts.pending)+len(tables) > maxPending {
			clear(ts.pending)
			ts.pending["*"] = ts.gen
		} else {
			for _, t := range tables {
				ts.pending[t] = ts.gen
			}
		}
	}
	if tables == nil {
		tables = []string{"*"}
	}
	for _, t := range tables {
		if ts.inflight[t]--; ts.inflight[t] <= 0 {
			delete(ts.inflight, t)
		}
	}
}

// Flush publishes the invalidations that waited for the tier with
// Config.Flush (the tables sorted; all, if any was a write to every
// table), on ctx as it is: it is meant to run within a Call. It forgets
// only the tables whose write did not fail again meanwhile; with nothing
// waiting, it does nothing and returns nil.
func (ts *State) Flush(ctx context.Context) error {
	ts.mu.Lock()
	sent := maps.Clone(ts.pending)
	ts.mu.Unlock()
	if len(sent) == 0 {
		return nil
	}
	var tables []string // nil: every table
	_, all := sent["*"]
	if !all {
		tables = slices.Sorted(maps.Keys(sent))
	}
	if err := ts.cfg.Flush(ctx, all, tables); err != nil {
		return err
	}
	ts.published.Add(1)
	ts.mu.Lock()
	for t, g := range sent {
		if ts.pending[t] == g { // not failed again since
			delete(ts.pending, t)
		}
	}
	ts.mu.Unlock()
	return nil
}

// Blocked reports whether a write to one of tables (to any table, when not
// known) is not yet known to the tier: marked by Begin and not yet
// published, or waiting for a flush. Tables are mapped by Config.TableKey.
func (ts *State) Blocked(tables []string, known bool) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.pending) == 0 && len(ts.inflight) == 0 {
		return false
	}
	if !known || ts.pending["*"] > 0 || ts.inflight["*"] > 0 {
		return true
	}
	for _, t := range tables {
		k := ts.cfg.TableKey(t)
		if ts.pending[k] > 0 || ts.inflight[k] > 0 {
			return true
		}
	}
	return false
}

// Usable reports whether the tier may be called: it is up, or down but
// due for a probe (and none runs).
func (ts *State) Usable() bool {
	if !ts.down.Load() {
		return true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return !ts.probing && !ts.cfg.Clock.Now().Before(ts.openUntil)
}

// Status returns "down" while the tier's breaker is open (probing
// included), else "up".
func (ts *State) Status() string {
	if ts.down.Load() {
		return "down"
	}
	return "up"
}

// Errors returns how many calls failed (timeouts and panics included;
// ErrDown and ErrSlow are not calls' failures).
func (ts *State) Errors() uint64 { return ts.errors.Load() }

// Transitions returns how many times the tier went down or came back.
func (ts *State) Transitions() uint64 { return ts.transitions.Load() }

// Published returns how many invalidations reached the tier: writes
// Publish sent, and flushes of those that waited (one for all of them).
func (ts *State) Published() uint64 { return ts.published.Load() }
