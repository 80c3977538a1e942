package flight_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/fakeclock"
	"github.com/sqlflight/sqlflight/internal/flight"
)

// data is what the tests keep with a flight.
type data struct{ note string }

type (
	group = flight.Group[int, data]
	fl    = flight.Flight[int, data]
)

// debtor is a caller's connection: the flight it owes and its heir.
type debtor struct {
	owed atomic.Pointer[fl]
	heir uint64
}

func (d *debtor) Owed() *atomic.Pointer[fl] { return &d.owed }
func (d *debtor) Heir() uint64              { return d.heir }

// newGroup returns a group on a fake clock whose write sequence is *seq.
func newGroup(seq *atomic.Uint64) (*group, *fakeclock.Clock, *atomic.Uint64) {
	clk := fakeclock.At(time.Unix(1_000_000, 0))
	late := new(atomic.Uint64)
	return &group{Now: clk.Now, Seq: seq.Load, Late: late}, clk, late
}

// since returns the test "nothing the read depends on was written after
// seq", given the sequence of the read's last write.
func since(last *atomic.Uint64) func(uint64) bool {
	return func(seq uint64) bool { return seq >= last.Load() }
}

func never() bool { return false }

// outcome waits for f and returns what it gives the caller.
func outcome(t *testing.T, f *fl, lead bool) (int, error) {
	t.Helper()
	select {
	case <-f.Done():
	default:
		t.Fatal("the flight is not done")
	}
	res, err := f.Outcome(lead)
	if err != nil {
		return 0, err
	}
	return *res, nil
}

func ptr(v int) *int { return &v }

// closer records that it was closed.
type closer struct{ closed atomic.Int32 }

func (c *closer) Close() error { c.closed.Add(1); return nil }

// TestJoinOrLead: the first caller leads, the next ones join the running
// flight, and every one of them gets its result; the flight remembers the
// sequence when it started.
func TestJoinOrLead(t *testing.T) {
	var seq atomic.Uint64
	seq.Store(7)
	g, _, late := newGroup(&seq)
	var last atomic.Uint64
	f, lead := g.JoinOrLead("k", since(&last), false, never, new(debtor))
	if f == nil || !lead {
		t.Fatalf("first caller: %v %v, want to lead", f, lead)
	}
	if f.Key() != "k" || f.Seq() != 7 || f.Fills() || f.ID() == 0 {
		t.Fatalf("flight: key %q seq %d fills %v id %d", f.Key(), f.Seq(), f.Fills(), f.ID())
	}
	f2, lead2 := g.JoinOrLead("k", since(&last), false, never, new(debtor))
	if f2 != f || lead2 {
		t.Fatalf("second caller: %p %v, want to join %p", f2, lead2, f)
	}
	if other, lead := g.JoinOrLead("other", since(&last), false, never, new(debtor)); other == f || !lead {
		t.Fatal("another key joined the flight")
	}
	f.Data.note = "leader's"
	g.Finish(f, ptr(42), nil, nil)
	for _, lead := range []bool{true, false} {
		if v, err := outcome(t, f, lead); v != 42 || err != nil {
			t.Fatalf("lead=%v: %d %v", lead, v, err)
		}
	}
	if res, err := f.Result(); *res != 42 || err != nil || f.Data.note != "leader's" {
		t.Fatalf("result %d %v, data %q", *res, err, f.Data.note)
	}
	if late.Load() != 0 {
		t.Fatalf("late followers %d, want 0", late.Load())
	}
}

// TestNoJoiningAcrossAWrite: a caller whose read changed since the flight
// started leads a new one, which replaces it under the key; the old one's
// callers still get its result.
func TestNoJoiningAcrossAWrite(t *testing.T) {
	var seq, last atomic.Uint64
	g, _, _ := newGroup(&seq)
	old, _ := g.JoinOrLead("k", since(&last), false, never, new(debtor))
	seq.Store(1)
	last.Store(1) // a write the next reads depend on
	f, lead := g.JoinOrLead("k", since(&last), false, never, new(debtor))
	if f == old || !lead || f.Seq() != 1 {
		t.Fatalf("after the write: joined the old flight (%v, lead %v, seq %d)", f == old, lead, f.Seq())
	}
	if again, lead := g.JoinOrLead("k", since(&last), false, never, new(debtor)); again != f || lead {
		t.Fatal("the new flight is not joinable")
	}
	g.Finish(old, ptr(1), nil, nil)
	if v, err := outcome(t, old, true); v != 1 || err != nil {
		t.Fatalf("old flight: %d %v", v, err)
	}
	if g.Len() != 1 {
		t.Fatalf("the old flight's end took the new one out: %d flights", g.Len())
	}
}

// TestFilledLooksAgain: a caching caller that finds no running flight and
// a cache that filled since it looked gets no flight; filled is not asked
// while a joinable flight runs, nor of a caller that fills nothing.
func TestFilledLooksAgain(t *testing.T) {
	var seq, last atomic.Uint64
	g, _, _ := newGroup(&seq)
	asked := 0
	filled := func() bool { asked++; return true }
	if f, lead := g.JoinOrLead("k", since(&last), true, filled, new(debtor)); f != nil || lead || asked != 1 {
		t.Fatalf("filled cache: %v %v (asked %d), want (nil, false)", f, lead, asked)
	}
	if f, lead := g.JoinOrLead("k", since(&last), false, filled, new(debtor)); f == nil || !lead || asked != 1 {
		t.Fatalf("a caller that fills nothing: %v %v (asked %d), want to lead", f, lead, asked)
	}
	f, lead := g.JoinOrLead("c", since(&last), true, never, new(debtor))
	if f == nil || !lead || !f.Fills() || f.ID() != 0 {
		t.Fatalf("caching leader: %v %v", f, lead)
	}
	if j, lead := g.JoinOrLead("c", since(&last), true, filled, new(debtor)); j != f || lead || asked != 1 {
		t.Fatalf("caching follower: %v %v (asked %d), want to join", j, lead, asked)
	}
	g.Finish(f, ptr(1), nil, nil)
	if g.Len() != 1 {
		t.Fatalf("a flight that fills the cache stayed: %d flights", g.Len())
	}
	if j, _ := g.JoinOrLead("c", since(&last), true, filled, new(debtor)); j != nil || asked != 2 {
		t.Fatalf("after the end: %v (asked %d), want to look again", j, asked)
	}
}

// TestLingerWhileOwed: an ended flight that had followers and fills no
// cache is joined, as a late follower, while some caller still owes it or
// by the heir of one that did, for as long as it ran; not once every
// caller released it, nor after.
func TestLingerWhileOwed(t *testing.T) {
	var seq, last atomic.Uint64
	g, clk, late := newGroup(&seq)
	a, b := new(debtor), new(debtor)
	f, _ := g.JoinOrLead("k", since(&last), false, never, a)
	g.JoinOrLead("k", since(&last), false, never, b)
	clk.Add(400 * time.Millisecond) // it runs 400 ms
	g.Finish(f, ptr(1), nil, nil)

	c := new(debtor)
	if j, lead := g.JoinOrLead("k", since(&last), false, never, c); j != f || lead || late.Load() != 1 {
		t.Fatalf("while owed: %v %v late %d, want to join", j == f, lead, late.Load())
	}
	if v, err := outcome(t, f, false); v != 1 || err != nil {
		t.Fatalf("late follower: %d %v", v, err)
	}
	for _, d := range []*debtor{a, b, c} {
		if r := g.Release(d); r != f {
			t.Fatalf("release: %v, want the flight", r)
		}
		if r := g.Release(d); r != nil {
			t.Fatal("released twice")
		}
	}
	heir := &debtor{heir: f.ID()}
	if j, _ := g.JoinOrLead("k", since(&last), false, never, heir); j != f || late.Load() != 2 {
		t.Fatal("the heir of a caller did not join")
	}
	g.Release(heir)
	if j, lead := g.JoinOrLead("k", since(&last), false, never, &debtor{heir: f.ID() + 1000}); j == f || !lead {
		t.Fatal("nobody owes the flight, yet a stranger joined it")
	}

	// Another herd: owed, but past its linger.
	d := new(debtor)
	f, _ = g.JoinOrLead("m", since(&last), false, never, d)
	g.JoinOrLead("m", since(&last), false, never, new(debtor))
	clk.Add(100 * time.Millisecond)
	g.Finish(f, ptr(2), nil, nil)
	clk.Add(99 * time.Millisecond)
	if j, _ := g.JoinOrLead("m", since(&last), false, never, new(debtor)); j != f {
		t.Fatal("not joined within its linger")
	}
	clk.Add(time.Millisecond)
	if j, lead := g.JoinOrLead("m", since(&last), false, never, new(debtor)); j == f || !lead {
		t.Fatal("joined once it lingered as long as it ran")
	}
	if d.owed.Load() != f {
		t.Fatal("the leader's connection no longer owes the flight")
	}
}

// TestLingerCapped: a flight lingers at most MaxLinger, however long it
// ran.
func TestLingerCapped(t *testing.T) {
	var seq, last atomic.Uint64
	g, clk, _ := newGroup(&seq)
	f, _ := g.JoinOrLead("k", since(&last), false, never, new(debtor))
	g.JoinOrLead("k", since(&last), false, never, new(debtor))
	clk.Add(time.Minute)
	g.Finish(f, ptr(1), nil, nil)
	clk.Add(flight.MaxLinger - time.Nanosecond)
	if j, _ := g.JoinOrLead("k", since(&last), false, never, new(debtor)); j != f {
		t.Fatal("not joined within MaxLinger")
	}
	clk.Add(time.Nanosecond)
	if j, _ := g.JoinOrLead("k", since(&last), false, never, new(debtor)); j == f {
		t.Fatal("joined past MaxLinger")
	}
}

// TestNoLinger: a flight lingers only with followers, a result, no error,
// no handoff, and no cache to fill; nor is it joined across a write.
func TestNoLinger(t *testing.T) {
	var seq, last atomic.Uint64
	cases := []struct {
		name      string
		follower  bool
		fills     bool
		res       *int
		err       error
		handoff   bool
		writeLate bool
	}{
		{name: "alone", res: ptr(1)},
		{name: "fills", follower: true, fills: true, res: ptr(1)},
		{name: "error", follower: true, err: errors.New("boom")},
		{name: "handoff", follower: true, handoff: true},
		{name: "write", follower: true, res: ptr(1), writeLate: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, clk, _ := newGroup(&seq)
			d := new(debtor)
			f, _ := g.JoinOrLead("k", since(&last), tc.fills, never, d)
			if tc.follower {
				g.JoinOrLead("k", since(&last), tc.fills, never, new(debtor))
			}
			clk.Add(500 * time.Millisecond)
			var h *closer
			if tc.handoff {
				h = new(closer)
				g.Finish(f, nil, nil, h)
			} else {
				g.Finish(f, tc.res, tc.err, nil)
			}
			if tc.writeLate {
				seq.Add(1)
				last.Store(seq.Load())
			}
			if j, lead := g.JoinOrLead("k", since(&last), tc.fills, never, new(debtor)); j == f || !lead {
				t.Fatalf("joined an ended flight (lead %v)", lead)
			}
		})
	}
}

// TestFollowersOutcomes: a follower of a flight that failed on the
// leader's connection, or whose leader left before its origin began, is
// told to retry; the leader gets the error itself. Other errors are
// everyone's.
func TestFollowersOutcomes(t *testing.T) {
	var seq, last atomic.Uint64
	boom := errors.New("boom")
	for _, tc := range []struct {
		err              error
		leader, follower error
	}{
		{driver.ErrBadConn, driver.ErrBadConn, flight.ErrRetry},
		{flight.ErrLeaderGone, flight.ErrLeaderGone, flight.ErrRetry},
		{boom, boom, boom},
	} {
		g, _, _ := newGroup(&seq)
		f, _ := g.JoinOrLead("k", since(&last), false, never, new(debtor))
		g.JoinOrLead("k", since(&last), false, never, new(debtor))
		g.Finish(f, nil, tc.err, nil)
		if _, err := outcome(t, f, true); !errors.Is(err, tc.leader) {
			t.Errorf("%v: leader got %v, want %v", tc.err, err, tc.leader)
		}
		if _, err := outcome(t, f, false); !errors.Is(err, tc.follower) {
			t.Errorf("%v: follower got %v, want %v", tc.err, err, tc.follower)
		}
	}
}

// TestHandoff: an unshared result goes to the leader once, its followers
// are told ErrNotShared, and one whose leader left is closed by Finish.
func TestHandoff(t *testing.T) {
	var seq, last atomic.Uint64
	g, _, _ := newGroup(&seq)
	f, _ := g.JoinOrLead("k", since(&last), false, never, new(debtor))
	g.JoinOrLead("k", since(&last), false, never, new(debtor))
	h := new(closer)
	g.Finish(f, nil, nil, h)
	if got := g.Handoff(f); got != h {
		t.Fatalf("leader's handoff: %v", got)
	}
	if got := g.Handoff(f); got != nil {
		t.Fatal("the handoff was handed out twice")
	}
	if _, err := outcome(t, f, false); err != flight.ErrNotShared {
		t.Fatalf("follower: %v, want ErrNotShared", err)
	}
	if _, err := outcome(t, f, true); err != flight.ErrNotShared {
		t.Fatalf("leader after its handoff: %v, want ErrNotShared", err)
	}
	if h.closed.Load() != 0 {
		t.Fatal("Finish closed a handoff its leader waits for")
	}

	// The leader left: Finish closes the orphan.
	f, _ = g.JoinOrLead("k2", since(&last), false, never, new(debtor))
	g.JoinOrLead("k2", since(&last), false, never, new(debtor))
	if !g.Leave(f, true) {
		t.Fatal("the leader could not leave a running flight")
	}
	h = new(closer)
	g.Finish(f, nil, nil, h)
	if h.closed.Load() != 1 || g.Handoff(f) != nil {
		t.Fatalf("orphaned handoff: closed %d times, still handed out %v", h.closed.Load(), g.Handoff(f) != nil)
	}
}

// TestLeave: a waiter that leaves does not end the flight for the others;
// the last one cancels the origin with ErrAbandoned and takes the flight
// out of the group, unless it fills a cache; a waiter cannot leave a
// flight that finished.
func TestLeave(t *testing.T) {
	var seq, last atomic.Uint64
	g, _, _ := newGroup(&seq)
	for _, fills := range []bool{false, true} {
		key := map[bool]string{false: "k", true: "c"}[fills]
		f, _ := g.JoinOrLead(key, since(&last), fills, never, new(debtor))
		g.JoinOrLead(key, since(&last), fills, never, new(debtor))
		ctx, cancel := context.WithCancelCause(context.Background())
		f.SetCancel(cancel)
		if !g.Leave(f, true) || ctx.Err() != nil {
			t.Fatalf("fills=%v: the leader's leaving cancelled the origin", fills)
		}
		if !g.Leave(f, false) {
			t.Fatalf("fills=%v: the follower could not leave", fills)
		}
		if fills {
			if ctx.Err() != nil || g.Len() != 1 {
				t.Fatalf("a flight that fills the cache was abandoned (%v, %d flights)", context.Cause(ctx), g.Len())
			}
			g.Finish(f, ptr(1), nil, nil)
			if g.Leave(f, false) {
				t.Fatal("left a finished flight")
			}
		} else if context.Cause(ctx) != flight.ErrAbandoned || g.Len() != 0 {
			t.Fatalf("the last waiter left: cause %v, %d flights", context.Cause(ctx), g.Len())
		}
	}
}

// TestStartRefresh: a refresh starts with no waiter unless a joinable
// flight runs or the cache filled meanwhile; it fills the cache, and an
// unshared result of it is closed (nobody leads it).
func TestStartRefresh(t *testing.T) {
	var seq, last atomic.Uint64
	g, _, _ := newGroup(&seq)
	running, _ := g.JoinOrLead("k", since(&last), true, never, new(debtor))
	if f, ok := g.StartRefresh("k", since(&last), never); ok || f != nil {
		t.Fatal("a refresh started beside a running flight")
	}
	if f, ok := g.StartRefresh("x", since(&last), func() bool { return true }); ok || f != nil {
		t.Fatal("a refresh started though the cache filled")
	}
	last.Store(1) // the running flight is older than a write now
	seq.Store(1)
	f, ok := g.StartRefresh("k", since(&last), never)
	if !ok || f == running || !f.Fills() || f.Seq() != 1 {
		t.Fatalf("refresh: %v %v", f, ok)
	}
	if j, lead := g.JoinOrLead("k", since(&last), true, never, new(debtor)); j != f || lead {
		t.Fatal("a reader did not join the refresh")
	}
	h := new(closer)
	g.Finish(f, nil, nil, h)
	if h.closed.Load() != 1 {
		t.Fatal("a refresh's unshared result was left open")
	}
}

// TestReleaseOwesOneFlight: a connection owes the last flight it took part
// in that may linger, never one that fills a cache; Release hands it back
// once.
func TestReleaseOwesOneFlight(t *testing.T) {
	var seq, last atomic.Uint64
	g, clk, _ := newGroup(&seq)
	d := new(debtor)
	first, _ := g.JoinOrLead("a", since(&last), false, never, d)
	second, _ := g.JoinOrLead("b", since(&last), false, never, d)
	g.JoinOrLead("c", since(&last), true, never, d)
	if f := g.Release(d); f != second || f.ID() == first.ID() {
		t.Fatalf("released %v, want the second flight", f)
	}
	if g.Release(d) != nil {
		t.Fatal("released twice")
	}
	// Nobody owes first now; a follower's connection owes it once it joins,
	// and the flight ends joinable.
	g.JoinOrLead("a", since(&last), false, never, new(debtor))
	// It ran 500 ms by the group's clock, so it lingers 500 ms: also the
	// real timer that takes it out of the group, which a busy machine must
	// not outrun before the next join.
	clk.Add(500 * time.Millisecond)
	g.Finish(first, ptr(1), nil, nil)
	if j, _ := g.JoinOrLead("a", since(&last), false, never, new(debtor)); j != first {
		t.Fatal("the follower's connection does not owe the flight")
	}
}

// TestHerd: callers that arrive while a flight runs, all at once, share
// one leader and its result.
func TestHerd(t *testing.T) {
	var seq, last atomic.Uint64
	g, _, _ := newGroup(&seq)
	const n = 64
	var joined sync.WaitGroup
	joined.Add(n)
	var leaders atomic.Int32
	got := make(chan int, n)
	for range n {
		go func() {
			d := new(debtor)
			f, lead := g.JoinOrLead("k", since(&last), false, never, d)
			joined.Done()
			if lead {
				leaders.Add(1)
				joined.Wait()
				g.Finish(f, ptr(9), nil, nil)
			}
			<-f.Done()
			res, _ := f.Outcome(lead)
			got <- *res
			g.Release(d)
		}()
	}
	for range n {
		if v := <-got; v != 9 {
			t.Fatalf("caller got %d", v)
		}
	}
	if leaders.Load() != 1 {
		t.Fatalf("%d leaders, want 1", leaders.Load())
	}
}
