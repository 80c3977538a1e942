package feed_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/feed"
)

// stream is one call of fakeHost.Stream: the test establishes it through
// sink and ends it by sending its error to end (or it ends with ctx).
type stream struct {
	ctx  context.Context
	sink feed.Sink
	end  chan error
}

// fakeHost is a feed.Host whose streams the test drives, whose lease it
// grants or refuses, and which records what the Feed asked of it.
type fakeHost struct {
	streams chan *stream
	live    atomic.Int64
	bumps   atomic.Int64

	mu        sync.Mutex
	applied   [][]feed.Change
	logs      []string
	leaseFree bool  // Lease takes the lease
	leaseErr  error // Lease fails
	renewOK   bool  // Renew extends the lease
	renewErr  error // Renew fails
	leases    int   // leases taken
	attempts  int   // Lease calls
	renews    int   // Renew calls
	released  []feed.Lease
}

func newFakeHost() *fakeHost { return &fakeHost{streams: make(chan *stream, 1)} }

func (h *fakeHost) Stream(ctx context.Context, sink feed.Sink) error {
	s := &stream{ctx: ctx, sink: sink, end: make(chan error, 1)}
	h.streams <- s
	select {
	case err := <-s.end:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *fakeHost) Lease(ctx context.Context, key string, ttl time.Duration) (feed.Lease, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts++
	if h.leaseErr != nil {
		return feed.Lease{}, false, h.leaseErr
	}
	if !h.leaseFree {
		return feed.Lease{}, false, nil
	}
	h.leases++
	return feed.Lease{Token: fmt.Sprintf("%s-%d", key, h.leases), Version: uint64(h.leases)}, true, nil
}

func (h *fakeHost) Renew(ctx context.Context, key string, l feed.Lease, ttl time.Duration) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renews++
	return h.renewOK, h.renewErr
}

func (h *fakeHost) Release(ctx context.Context, key string, l feed.Lease) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = append(h.released, l)
	return nil
}

func (h *fakeHost) Bump() { h.bumps.Add(1) }

func (h *fakeHost) Apply(cs []feed.Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.applied = append(h.applied, cs)
}

func (h *fakeHost) Log(level slog.Level, msg string, attrs ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logs = append(h.logs, fmt.Sprintf("%v %s %v", level, msg, attrs))
}

func (h *fakeHost) Live() int64 { return h.live.Load() }

// logged returns the log lines so far, one a line.
func (h *fakeHost) logged() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.logs, "\n")
}

// set changes the host's state under its lock.
func (h *fakeHost) set(do func(h *fakeHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	do(h)
}

// next returns the next stream the feed opened.
func (h *fakeHost) next(t *testing.T) *stream {
	t.Helper()
	select {
	case s := <-h.streams:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no stream opened")
		return nil
	}
}

// none checks that the feed opened no stream it was not expected to.
func (h *fakeHost) none(t *testing.T) {
	t.Helper()
	select {
	case <-h.streams:
		t.Fatal("a stream was opened")
	default:
	}
}

// waitFor polls cond until it holds; a test that never gets there fails on
// its deadline instead of hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// classify is the tests' Config.Classify.
func classify(err error) string { return "class of " + err.Error() }

// start runs f.Start in the background and returns what it returns.
func start(f *feed.Feed) chan error {
	done := make(chan error, 1)
	go func() { done <- f.Start(context.Background()) }()
	return done
}

// TestFeedStartsThenReopensAndResyncs: Start returns once the first stream
// is established (Current, no resync); a stream that fails makes the feed
// Down, counts the error and its class and logs the reason, and the next
// stream, opened after a back-off, resyncs. Stop ends the stream for good.
func TestFeedStartsThenReopensAndResyncs(t *testing.T) {
	h := newFakeHost()
	var g feed.Group
	f := feed.New(h, feed.Config{Mode: "notify", Classify: classify, Group: &g})
	g.Add(f)
	if f.State() != feed.Starting {
		t.Fatalf("new feed %q", f.State())
	}
	started := start(f)
	s := h.next(t)
	s.sink.Ready()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if st := g.Snapshot(); f.State() != feed.Current || st.State != feed.Current || st.Resyncs != 0 || h.bumps.Load() != 0 {
		t.Fatalf("after the first stream: %q, %+v, %d bumps", f.State(), st, h.bumps.Load())
	}
	s.end <- feed.Unavailable(nil, "the triggers are gone")
	s = h.next(t)
	if st := g.Snapshot(); f.State() != feed.Down || st.Errors != 1 || st.LastError != "class of sqlflight: change feed unavailable: the triggers are gone" {
		t.Fatalf("after a failure: %q, %+v", f.State(), st)
	}
	if out := h.logged(); !strings.Contains(out, "WARN sqlflight: change feed down [mode notify from current error") ||
		!strings.Contains(out, "reason the triggers are gone") {
		t.Fatalf("log:\n%s", out)
	}
	s.sink.Ready()
	if st := g.Snapshot(); f.State() != feed.Current || st.Resyncs != 1 || h.bumps.Load() != 1 {
		t.Fatalf("after the second stream: %q, %+v, %d bumps", f.State(), st, h.bumps.Load())
	}
	s.end <- nil // a stream that ends without an error failed all the same
	s = h.next(t)
	if st := g.Snapshot(); st.Errors != 2 {
		t.Fatalf("a stream that ended: %+v", st)
	}
	g.Stop()
	if s.ctx.Err() == nil {
		t.Fatal("Stop left the stream running")
	}
	f.Ensure()
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.none(t)
}

// TestFeedFirstFailureFailsStart: a first stream that fails before it is
// established is Start's error, and the feed is stopped: no stream again.
func TestFeedFirstFailureFailsStart(t *testing.T) {
	h := newFakeHost()
	f := feed.New(h, feed.Config{Mode: "replication"})
	started := start(f)
	want := feed.Unavailable(nil, "wal_level is not logical")
	h.next(t).end <- want
	if err := <-started; err != want {
		t.Fatalf("Start: %v, want %v", err, want)
	}
	if f.State() != feed.Down {
		t.Fatalf("state %q", f.State())
	}
	f.Ensure()
	h.none(t)
	if st := (&feed.Group{}).Snapshot(); st.State != "" || st.Errors != 0 {
		t.Fatalf("an empty group: %+v", st)
	}
}

// TestFeedStartEndsWithItsContext: a first stream that is not established
// before Start's context ends is stopped, and Start's error wraps both
// ErrUnavailable and the context's.
func TestFeedStartEndsWithItsContext(t *testing.T) {
	h := newFakeHost()
	f := feed.New(h, feed.Config{Mode: "notify"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Start(ctx) }()
	s := h.next(t)
	cancel()
	err := <-done
	if !errors.Is(err, feed.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Start: %v", err)
	}
	if s.ctx.Err() == nil {
		t.Fatal("the stream runs on")
	}
	f.Ensure()
	h.none(t)
}

// TestFeedPauseIfIdle: PauseIfIdle leaves a feed whose scope has open
// connections alone and stops the stream of one that has none; Ensure
// opens it again (once), and that stream resyncs.
func TestFeedPauseIfIdle(t *testing.T) {
	h := newFakeHost()
	var g feed.Group
	f := feed.New(h, feed.Config{Mode: "notify", Group: &g})
	started := start(f)
	s := h.next(t)
	s.sink.Ready()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.live.Store(1)
	f.PauseIfIdle()
	f.Ensure()
	if s.ctx.Err() != nil {
		t.Fatal("paused with a connection open")
	}
	h.none(t)
	h.live.Store(0)
	f.PauseIfIdle()
	if s.ctx.Err() == nil {
		t.Fatal("not paused without a connection")
	}
	f.PauseIfIdle() // paused already
	f.Ensure()
	s = h.next(t)
	f.Ensure()
	s.sink.Ready()
	h.none(t)
	if st := g.Snapshot(); st.Resyncs != 1 || h.bumps.Load() != 1 {
		t.Fatalf("the stream after a pause: %+v, %d bumps", st, h.bumps.Load())
	}
	f.Stop()
}

// TestFeedSinkCountsAndLags: a transaction applied reaches the host and is
// counted with its changes and its delay; one committed over a second ago
// makes the feed Lagging (logged), CaughtUp makes it Current with no lag;
// Reapply reaches the host uncounted, Resync bumps and counts, and Warn
// logs with the error under "error".
func TestFeedSinkCountsAndLags(t *testing.T) {
	h := newFakeHost()
	var g feed.Group
	f := feed.New(h, feed.Config{Mode: "replication", Group: &g})
	g.Add(f)
	started := start(f)
	s := h.next(t)
	s.sink.Ready()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	k := s.sink
	one := []feed.Change{{Table: "public.items", Whole: true}, {Table: "public.other", Whole: true}}
	k.Apply(one, time.Time{})
	if st := g.Snapshot(); st.Transactions != 1 || st.Changes != 2 || st.Delay.Count != 0 || f.State() != feed.Current {
		t.Fatalf("after Apply: %+v, %q", st, f.State())
	}
	k.Apply(one[:1], time.Now().Add(-time.Hour))
	if st := g.Snapshot(); st.Transactions != 2 || st.Changes != 3 || st.Delay.Count != 1 || st.State != feed.Lagging || st.Lag < time.Hour {
		t.Fatalf("after a late transaction: %+v", st)
	}
	k.Apply(nil, time.Now().Add(time.Hour)) // a server clock ahead: no lag
	if f.State() != feed.Current || f.Lag() != 0 {
		t.Fatalf("after a transaction from the future: %q, %v", f.State(), f.Lag())
	}
	k.Apply(one[:1], time.Now().Add(-time.Hour))
	k.CaughtUp()
	if f.State() != feed.Current || f.Lag() != 0 {
		t.Fatalf("after CaughtUp: %q, %v", f.State(), f.Lag())
	}
	k.Reapply(one)
	k.Resync()
	k.Warn("sqlflight: a warning", errors.New("boom"))
	if st := g.Snapshot(); st.Transactions != 4 || st.Changes != 4 || st.Resyncs != 1 || h.bumps.Load() != 1 {
		t.Fatalf("after Reapply and Resync: %+v, %d bumps", st, h.bumps.Load())
	}
	h.set(func(h *fakeHost) {
		if len(h.applied) != 5 || len(h.applied[4]) != 2 || h.applied[4][0].Table != "public.items" {
			t.Errorf("applied %+v", h.applied)
		}
	})
	out := h.logged()
	for _, want := range []string{"WARN sqlflight: change feed lagging [mode replication from current error <nil> lag 1h",
		"INFO sqlflight: change feed current [mode replication from lagging]", "WARN sqlflight: a warning [error boom]"} {
		if !strings.Contains(out, want) {
			t.Errorf("log has no %q:\n%s", want, out)
		}
	}
	f.Stop()
}

// TestFeedFleetLease: in a fleet, a feed whose lease another instance
// holds (or whose tier fails) is Standby and opens no stream, and Start
// returns; once it takes the lease it streams, renews the lease, and
// resyncs even its first stream. When a renewal says the lease is lost,
// the stream ends, the lease is released and the feed is Standby again,
// its lag no longer counted.
func TestFeedFleetLease(t *testing.T) {
	h := newFakeHost()
	h.leaseErr = errors.New("tier down")
	var g feed.Group
	f := feed.New(h, feed.Config{Mode: "notify", Fleet: "feed-k", LeaseTTL: 30 * time.Millisecond, Group: &g})
	g.Add(f)
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.State() != feed.Standby {
		t.Fatalf("state %q with the tier down", f.State())
	}
	attempts := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.attempts
	}
	waitFor(t, "another try", func() bool { return attempts() >= 2 })
	h.none(t)
	h.set(func(h *fakeHost) { h.leaseErr = nil })
	n := attempts()
	waitFor(t, "another try", func() bool { return attempts() >= n+2 })
	h.none(t)
	if f.State() != feed.Standby {
		t.Fatalf("state %q with the lease held elsewhere", f.State())
	}
	h.set(func(h *fakeHost) { h.leaseFree, h.renewOK = true, true })
	s := h.next(t)
	if f.State() != feed.Starting {
		t.Fatalf("state %q with the lease taken", f.State())
	}
	s.sink.Ready()
	if st := g.Snapshot(); st.State != feed.Current || st.Resyncs != 1 || h.bumps.Load() != 1 {
		t.Fatalf("the fleet's first stream: %+v", st)
	}
	waitFor(t, "renewals", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.renews >= 2
	})
	s.sink.Apply(nil, time.Now().Add(-time.Hour))
	if g.Snapshot().Lag < time.Hour {
		t.Fatal("no lag")
	}
	h.set(func(h *fakeHost) { h.leaseFree, h.renewOK = false, false })
	waitFor(t, "the stream's end", func() bool { return s.ctx.Err() != nil })
	waitFor(t, "standby", func() bool { return f.State() == feed.Standby })
	if st := g.Snapshot(); st.State != feed.Standby || st.Lag != 0 || st.Errors != 0 {
		t.Fatalf("after the lease was lost: %+v", st)
	}
	h.set(func(h *fakeHost) {
		if len(h.released) != 1 || h.released[0] != (feed.Lease{Token: "feed-k-1", Version: 1}) {
			t.Errorf("released %+v", h.released)
		}
	})
	f.Stop()
	h.none(t)
}

// TestFeedFleetRenewalFailing: a lease whose renewals fail (the tier does
// not answer) is given up before it may have run out: the stream ends and
// the feed is Standby.
func TestFeedFleetRenewalFailing(t *testing.T) {
	h := newFakeHost()
	h.leaseFree, h.renewErr = true, errors.New("tier slow")
	f := feed.New(h, feed.Config{Mode: "notify", Fleet: "feed-k", LeaseTTL: 30 * time.Millisecond})
	started := start(f)
	s := h.next(t)
	s.sink.Ready()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	h.set(func(h *fakeHost) { h.leaseFree = false })
	waitFor(t, "the stream's end", func() bool { return s.ctx.Err() != nil })
	waitFor(t, "standby", func() bool { return f.State() == feed.Standby })
	f.Stop()
	h.set(func(h *fakeHost) {
		if h.renews < 1 || len(h.released) != 1 {
			t.Errorf("%d renewals, released %+v", h.renews, h.released)
		}
	})
}

// TestGroupWorstState: a Group reports the worst state of its feeds and
// stops them all.
func TestGroupWorstState(t *testing.T) {
	var g feed.Group
	h1, h2 := newFakeHost(), newFakeHost()
	f1 := feed.New(h1, feed.Config{Mode: "notify", Group: &g})
	f2 := feed.New(h2, feed.Config{Mode: "notify", Group: &g})
	g.Add(f1)
	g.Add(f2)
	g.Add(f2)
	if st := g.Snapshot(); st.State != feed.Starting {
		t.Fatalf("new feeds: %q", st.State)
	}
	started := start(f1)
	s1 := h1.next(t)
	s1.sink.Ready()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if st := g.Snapshot(); st.State != feed.Starting {
		t.Fatalf("one current, one starting: %q", st.State)
	}
	started = start(f2)
	s2 := h2.next(t)
	s2.sink.Ready()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if st := g.Snapshot(); st.State != feed.Current {
		t.Fatalf("both current: %q", st.State)
	}
	s2.end <- errors.New("broken")
	s2 = h2.next(t)
	if st := g.Snapshot(); st.State != feed.Down {
		t.Fatalf("one down: %q", st.State)
	}
	g.Stop()
	if s1.ctx.Err() == nil || s2.ctx.Err() == nil {
		t.Fatal("Stop left a stream running")
	}
}
