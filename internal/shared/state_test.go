package shared_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/fakeclock"
	"github.com/sqlflight/sqlflight/internal/shared"
)

// fakeClock is a clock that moves only when told to.
type fakeClock = fakeclock.Clock

// flushed is one call of Config.Flush.
type flushed struct {
	all    bool
	tables []string
}

// harness is a State on a fake clock that records its transitions and
// flushes; flushErr, when set, is what its flushes return.
type harness struct {
	*shared.State
	clock    *fakeClock
	mu       sync.Mutex
	downs    []time.Duration // retryIn of every Down
	ups      int
	flushes  []flushed
	flushErr atomic.Pointer[error]
	flushed  chan struct{} // a flush ran (buffered)
	wentDown chan struct{} // Down was told (buffered)
	onFlush  func()        // run inside every flush, when set
}

func newHarness(t *testing.T, timeout time.Duration) *harness {
	h := &harness{clock: fakeclock.At(time.Unix(1e9, 0)), flushed: make(chan struct{}, 64),
		wentDown: make(chan struct{}, 64)}
	h.State = shared.New(shared.Config{
		Timeout: timeout,
		Clock:   h.clock,
		Flush: func(ctx context.Context, all bool, tables []string) error {
			if h.onFlush != nil {
				h.onFlush()
			}
			h.mu.Lock()
			h.flushes = append(h.flushes, flushed{all, tables})
			h.mu.Unlock()
			h.flushed <- struct{}{}
			if p := h.flushErr.Load(); p != nil {
				return *p
			}
			return nil
		},
		TableKey: strings.ToLower,
		Down: func(err error, retryIn time.Duration) {
			// Outside the State's lock: Usable takes it while down.
			_ = h.Usable()
			h.mu.Lock()
			h.downs = append(h.downs, retryIn)
			h.mu.Unlock()
			h.wentDown <- struct{}{}
		},
		Up: func() {
			_ = h.Usable()
			h.mu.Lock()
			h.ups++
			h.mu.Unlock()
		},
	})
	t.Cleanup(h.Close)
	return h
}

var errBoom = errors.New("boom")

func fail(context.Context) error { return errBoom }
func ok(context.Context) error   { return nil }

// counted returns f and the number of times it was called.
func counted(f func(context.Context) error) (func(context.Context) error, *atomic.Int64) {
	var n atomic.Int64
	return func(ctx context.Context) error { n.Add(1); return f(ctx) }, &n
}

// takeDown makes Failures calls fail.
func (h *harness) takeDown(t *testing.T) {
	t.Helper()
	for range shared.Failures {
		if err := h.Call(context.Background(), fail); !errors.Is(err, errBoom) {
			t.Fatalf("Call = %v, want the tier's error", err)
		}
	}
	if h.Status() != "down" {
		t.Fatalf("after %d failures: %s", shared.Failures, h.Status())
	}
}

// TestFailuresInARowTakeTheTierDown: Failures failures in a row take the
// tier down, a success between them starts the count over, and while it
// is down calls are refused without reaching the tier.
func TestFailuresInARowTakeTheTierDown(t *testing.T) {
	h := newHarness(t, time.Minute)
	for range shared.Failures - 1 {
		_ = h.Call(context.Background(), fail)
	}
	if err := h.Call(context.Background(), ok); err != nil || h.Status() != "up" {
		t.Fatalf("Call = %v, %s", err, h.Status())
	}
	h.takeDown(t)
	f, n := counted(ok)
	if err := h.Call(context.Background(), f); !errors.Is(err, shared.ErrDown) || n.Load() != 0 {
		t.Fatalf("Call while down = %v, the tier called %d times", err, n.Load())
	}
	if h.Usable() {
		t.Fatal("usable before the back-off")
	}
	if got := h.Errors(); got != 2*shared.Failures-1 {
		t.Fatalf("Errors = %d", got)
	}
	if h.Transitions() != 1 || len(h.downs) != 1 || h.downs[0] != 200*time.Millisecond {
		t.Fatalf("Transitions = %d, Down told %v", h.Transitions(), h.downs)
	}
}

// TestBackoffGrowsToItsBound: every failed probe doubles the back-off from
// 200 ms up to BackoffMax; a probe that succeeds brings the tier back and
// the next outage starts over at 200 ms.
func TestBackoffGrowsToItsBound(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.takeDown(t)
	waits := []time.Duration{200, 400, 800, 1600, 2000, 2000}
	for i, wait := range waits {
		wait *= time.Millisecond
		h.clock.Add(wait - time.Nanosecond)
		if h.Usable() || !errors.Is(h.Call(context.Background(), ok), shared.ErrDown) {
			t.Fatalf("a probe let through before %v", wait)
		}
		h.clock.Add(time.Nanosecond)
		if !h.Usable() {
			t.Fatalf("no probe after %v", wait)
		}
		if i < len(waits)-1 {
			_ = h.Call(context.Background(), fail) // the probe fails
		}
	}
	if err := h.Call(context.Background(), ok); err != nil || h.Status() != "up" || h.ups != 1 || h.Transitions() != 2 {
		t.Fatalf("probe = %v: %s, %d ups, %d transitions", err, h.Status(), h.ups, h.Transitions())
	}
	h.takeDown(t)
	if got := h.downs[len(h.downs)-1]; got != 200*time.Millisecond {
		t.Fatalf("the next outage waits %v", got)
	}
}

// TestOneProbeAtATime: while the probe of a tier that is down runs, other
// calls are refused without reaching the tier.
func TestOneProbeAtATime(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.takeDown(t)
	h.clock.Add(shared.BackoffMax)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- h.Call(context.Background(), func(context.Context) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	f, n := counted(ok)
	if err := h.Call(context.Background(), f); !errors.Is(err, shared.ErrDown) || n.Load() != 0 || h.Usable() {
		t.Fatalf("a second call during the probe: %v, the tier called %d times", err, n.Load())
	}
	close(release)
	if err := <-done; err != nil || h.Status() != "up" {
		t.Fatalf("probe = %v, %s", err, h.Status())
	}
}

// TestRefusedConnectionTakesTheTierDownAtOnce: a refused connection is a
// certain failure: the first one takes the tier down.
func TestRefusedConnectionTakesTheTierDownAtOnce(t *testing.T) {
	h := newHarness(t, time.Minute)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	err := h.Call(context.Background(), func(context.Context) error { return fmt.Errorf("redis: %w", refused) })
	if !errors.Is(err, syscall.ECONNREFUSED) || h.Status() != "down" || h.Errors() != 1 || len(h.downs) != 1 {
		t.Fatalf("Call = %v: %s, %d errors, downs %v", err, h.Status(), h.Errors(), h.downs)
	}
}

// TestHungCallFailsAtItsTimeout: a call that ignores its context returns
// at the timeout as a failure, and its late answer is dropped: it does not
// count as a success that would start the count of failures over.
func TestHungCallFailsAtItsTimeout(t *testing.T) {
	h := newHarness(t, 10*time.Millisecond)
	var late sync.WaitGroup
	for i := range shared.Failures {
		release := make(chan struct{})
		late.Add(1)
		err := h.Call(context.Background(), func(context.Context) error {
			defer late.Done()
			<-release
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung call %d = %v", i, err)
		}
		close(release)
		late.Wait() // its nil answer arrives after the verdict
	}
	if h.Status() != "down" || h.Errors() != shared.Failures {
		t.Fatalf("after %d hung calls: %s, %d errors", shared.Failures, h.Status(), h.Errors())
	}
}

// TestNearDeadlineGetsErrSlow: a caller whose deadline is nearer than the
// timeout allows gets ErrSlow, while the call runs on and its verdict
// still reaches the breaker; the call's context is not the caller's.
func TestNearDeadlineGetsErrSlow(t *testing.T) {
	h := newHarness(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	var callerGone atomic.Bool
	ranOn := make(chan struct{})
	err := h.Call(ctx, func(cctx context.Context) error {
		defer close(ranOn)
		<-release
		callerGone.Store(cctx.Err() == nil && ctx.Err() != nil)
		return &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	})
	if !errors.Is(err, shared.ErrSlow) {
		t.Fatalf("Call = %v, want ErrSlow", err)
	}
	<-ctx.Done()
	close(release)
	<-ranOn
	if !callerGone.Load() {
		t.Fatal("the call's context ended with its caller's")
	}
	select { // the verdict follows the call's answer
	case <-h.wentDown:
	case <-time.After(10 * time.Second):
		t.Fatal("the call's refused connection never reached the breaker")
	}
	if h.Errors() != 1 {
		t.Fatalf("Errors = %d", h.Errors())
	}
}

// TestPanicIsAnErrorOfTheTier: a panic in the tier is returned (and
// counted) as an error, not raised in the caller.
func TestPanicIsAnErrorOfTheTier(t *testing.T) {
	h := newHarness(t, time.Minute)
	err := h.Call(context.Background(), func(context.Context) error { panic("kaput") })
	if err == nil || !strings.Contains(err.Error(), "panicked: kaput") || h.Errors() != 1 {
		t.Fatalf("Call = %v, %d errors", err, h.Errors())
	}
}

// TestPublishedWriteLeavesNothingBlocked: from Begin to a Publish that
// succeeds, reads of the write's tables (by their keys) are blocked, and
// only theirs.
func TestPublishedWriteLeavesNothingBlocked(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.Begin([]string{"items"})
	if !h.Blocked([]string{"public.x", "Items"}, true) || h.Blocked([]string{"users"}, true) || !h.Blocked(nil, false) {
		t.Fatal("Blocked does not follow the mark")
	}
	h.Publish([]string{"items"}, ok)
	if h.Blocked([]string{"items"}, true) || h.Blocked(nil, false) || h.Published() != 1 {
		t.Fatalf("after the publish: blocked, %d published", h.Published())
	}
}

// TestFailedPublishWaitsForTheFlush: a write whose publish failed keeps
// its tables blocked until a flush publishes them as a whole.
func TestFailedPublishWaitsForTheFlush(t *testing.T) {
	h := newHarness(t, time.Minute)
	for _, tables := range [][]string{{"items"}, {"orders", "items"}} {
		h.Begin(tables)
		h.Publish(tables, fail)
	}
	if !h.Blocked([]string{"items"}, true) || !h.Blocked([]string{"orders"}, true) || h.Published() != 0 {
		t.Fatal("a failed write is not blocked")
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(h.flushes) != 1 || h.flushes[0].all || !slices.Equal(h.flushes[0].tables, []string{"items", "orders"}) {
		t.Fatalf("flushes %+v", h.flushes)
	}
	if h.Blocked([]string{"items", "orders"}, true) || h.Published() != 1 {
		t.Fatal("still blocked after the flush")
	}
	if err := h.Flush(context.Background()); err != nil || len(h.flushes) != 1 {
		t.Fatalf("a flush of nothing: %v, %d flushes", err, len(h.flushes))
	}
}

// TestFailedFlushForgetsNothing: a flush that fails keeps every table.
func TestFailedFlushForgetsNothing(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.Begin([]string{"items"})
	h.Publish([]string{"items"}, fail)
	h.flushErr.Store(&errBoom)
	if err := h.Flush(context.Background()); !errors.Is(err, errBoom) || !h.Blocked([]string{"items"}, true) {
		t.Fatalf("Flush = %v; blocked %v", err, h.Blocked([]string{"items"}, true))
	}
}

// TestFlushKeepsWhatFailedMeanwhile: a write to a table that fails while a
// flush of it runs is still waiting after the flush.
func TestFlushKeepsWhatFailedMeanwhile(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.Begin([]string{"items", "users"})
	h.Publish([]string{"items", "users"}, fail)
	h.onFlush = func() {
		h.onFlush = nil
		h.Begin([]string{"items"})
		h.Publish([]string{"items"}, fail)
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !h.Blocked([]string{"items"}, true) || h.Blocked([]string{"users"}, true) {
		t.Fatal("the flush forgot a write that failed while it ran, or kept one it published")
	}
}

// TestUnknownOrTooManyTablesWaitAsAll: a failed write to tables not known,
// or to more tables than are remembered, waits as a write to every table.
func TestUnknownOrTooManyTablesWaitAsAll(t *testing.T) {
	many := make([]string, 1025)
	for i := range many {
		many[i] = fmt.Sprint("t", i)
	}
	for name, tables := range map[string][]string{"unknown": nil, "many": many} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, time.Minute)
			h.Begin(tables)
			h.Publish(tables, fail)
			if !h.Blocked([]string{"other"}, true) {
				t.Fatal("a table not written is not blocked")
			}
			if err := h.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(h.flushes) != 1 || !h.flushes[0].all || h.flushes[0].tables != nil || h.Blocked(nil, false) {
				t.Fatalf("flushes %+v", h.flushes)
			}
		})
	}
}

// TestSuccessFlushesWhatWaits: the first call that succeeds after a failed
// publish flushes in the background, once.
func TestSuccessFlushesWhatWaits(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.Begin([]string{"items"})
	h.Publish([]string{"items"}, fail)
	if err := h.Call(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	<-h.flushed
	h.Close() // waits for the background flush
	if len(h.flushes) != 1 || h.Blocked([]string{"items"}, true) || h.Published() != 1 {
		t.Fatalf("flushes %+v, %d published", h.flushes, h.Published())
	}
}

// TestWaitingWritesAreRetried: invalidations that wait are tried again
// even if no other call is made, until one flush succeeds.
func TestWaitingWritesAreRetried(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.flushErr.Store(&errBoom)
	h.Begin([]string{"items"})
	h.Publish([]string{"items"}, fail)
	<-h.flushed // the first retry fails
	h.flushErr.Store(nil)
	// A flush tells h.flushed before the State hears its result: the one
	// that succeeds may be the last, so the wait also looks again shortly.
	for h.Blocked([]string{"items"}, true) {
		select {
		case <-h.flushed:
		case <-time.After(time.Millisecond):
		}
	}
	if h.Published() != 1 {
		t.Fatalf("%d published", h.Published())
	}
}

// TestNoBackgroundFlushAfterClose: after Close, neither a success nor a
// failed publish starts a flush (Close, which waits for one, would see it).
func TestNoBackgroundFlushAfterClose(t *testing.T) {
	h := newHarness(t, time.Minute)
	h.Close()
	h.Begin([]string{"items"})
	h.Publish([]string{"items"}, fail)
	if err := h.Call(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if len(h.flushes) != 0 || !h.Blocked([]string{"items"}, true) {
		t.Fatalf("flushes after Close: %+v", h.flushes)
	}
}

// TestCallForDropsALateValue: a value the call returns after its caller
// stopped waiting (here, after the timeout) is never handed out; one
// returned in time is. Under -race, a late value read anyway is a race.
func TestCallForDropsALateValue(t *testing.T) {
	h := newHarness(t, 10*time.Millisecond)
	release, done := make(chan struct{}), make(chan struct{})
	v, err := shared.CallFor(h.State, context.Background(), func(context.Context) ([]byte, error) {
		defer close(done)
		<-release
		return []byte("late"), nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || v != nil {
		t.Fatalf("late call: %q, %v; want nothing and the timeout", v, err)
	}
	close(release)
	<-done
	v, err = shared.CallFor(h.State, context.Background(), func(context.Context) ([]byte, error) { return []byte("on time"), nil })
	if err != nil || string(v) != "on time" {
		t.Fatalf("call in time: %q, %v", v, err)
	}
	failed := errors.New("the tier's own error")
	if v, err := shared.CallFor(h.State, context.Background(), func(context.Context) ([]byte, error) { return []byte("x"), failed }); v != nil || !errors.Is(err, failed) {
		t.Fatalf("failed call: %q, %v", v, err)
	}
}
