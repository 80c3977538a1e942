// Package batch gathers the reads of many keys of one statement into
// batches that run as one statement: a Group keeps, for each batch group
// (the reads that differ in their key alone), how many of its statements
// are in flight and the batches that wait for their turn; a Plan is what a
// text runs as for many keys at once, and how a row's key and an
// argument's compare (plan.go).
//
// # Turns and batches
//
// A read that finds its group with nothing in flight takes the group's
// turn ([Group.Join] returns a [Turn]) and runs alone, at once: no read
// ever waits on a timer. Every read of the group that comes while a
// statement of it is in flight joins the group's pending batch instead (a
// [Member]). When the statement in flight is done ([Group.Done]), the first
// pending batch that still has a member takes the turn and starts (the
// Group's Start runs it, on a goroutine of its own); a batch that reaches
// Max distinct keys starts at once, beside what is in flight, if it is the
// first pending, and so does one that waited MaxWait (a timer of the time
// package, made only for a batch: never on the path of a read that found
// nothing in flight). A batch that started takes no member any more: every one
// of its members' calls began before it started.
//
// # Members
//
// A member waits for its batch to answer it (the owner's business), or to
// send it to run alone ([Member.Alone], after [Group.SendAlone]); it may
// leave at any time. [Group.Leave] takes a member that leaves before its
// batch started out of it (Gone: the member ends its own business); one
// that leaves after is marked Left ([Group.Settle]) and the batch ends its
// business. Settle moves a waiting member to the state the batch gives it
// and returns the state it was in, so that exactly one of the member and
// the batch acts on a departure.
//
// # Concurrency
//
// A Group is safe for concurrent use; its zero value with Max and Start set
// is ready. One mutex guards every group, batch and member state; Start is
// called under it and must not call back into the Group (start a goroutine).
package batch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// State is where a member of a batch is.
type State uint8

// A member's states.
const (
	Waiting State = iota // in its batch, waiting
	Gone                 // it left before its batch started, and ends its own business
	Left                 // it left after its batch started: the batch ends its business
	Alone                // the batch could not answer it: it runs alone
	Done                 // the batch answered it
)

// A Group holds the batch groups of one owner.
type Group struct {
	// Max returns the most distinct keys of one batch.
	Max func() int
	// Start runs a batch that took its turn; it is called under the
	// group's lock and must not block (it starts a goroutine).
	Start func(*Batch)
	// MaxWait returns how long a pending batch waits for its turn at most:
	// past it, it starts beside the statements in flight, so that a slow
	// statement of the group (a key of many rows) holds the others up by
	// no more. Zero or less: as long as the statement in flight runs. Nil:
	// zero.
	MaxWait func() time.Duration

	mu sync.Mutex
	m  map[string]*gate
}

// A gate is one batch group: its statements in flight and the batches
// that wait for their turn.
type gate struct {
	turn    Turn // the turn of a read that runs alone
	key     string
	running int
	pending []*Batch
}

// A Turn is a group's turn to run one statement, held by a read that runs
// alone or by a batch; Done gives it back.
type Turn struct{ g *gate }

// A Batch is the reads of many keys that run as one statement.
type Batch struct {
	turn    Turn
	keys    map[string]int // the distinct keys, numbered in order of arrival
	order   []string
	members []*Member
	started bool

	ctx    context.Context
	cancel context.CancelCauseFunc
	live   atomic.Int32
	timer  *time.Timer // MaxWait's, while it is pending
}

// A Member is one read of a batch.
type Member struct {
	// V is what the owner keeps with the member.
	V     any
	key   string
	b     *Batch
	alone chan struct{}
	state State
}

// Join gives a read of the batch group group whose key (in its canonical
// form) is key either the group's turn — nothing of the group is in
// flight: it runs alone and gives the turn back with Done once its
// statement is done — or a place in the group's pending batch, made with
// ctx's values (not its cancellation) if it is the first.
func (g *Group) Join(ctx context.Context, group, key string, v any) (*Turn, *Member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = make(map[string]*gate)
	}
	gt := g.m[group]
	if gt == nil {
		gt = &gate{key: group}
		gt.turn.g = gt
		g.m[group] = gt
	}
	if gt.running == 0 && len(gt.pending) == 0 {
		gt.running++
		return &gt.turn, nil
	}
	max := g.Max()
	var b *Batch
	if n := len(gt.pending); n > 0 && len(gt.pending[n-1].order) < max {
		b = gt.pending[n-1]
	} else {
		b = &Batch{turn: Turn{g: gt}, keys: map[string]int{}, ctx: context.WithoutCancel(ctx)}
		gt.pending = append(gt.pending, b)
		if g.MaxWait != nil {
			if d := g.MaxWait(); d > 0 {
				b.timer = time.AfterFunc(d, func() { g.expire(b) })
			}
		}
	}
	if _, ok := b.keys[key]; !ok {
		b.keys[key] = len(b.order)
		b.order = append(b.order, key)
	}
	m := &Member{V: v, key: key, b: b, alone: make(chan struct{})}
	b.members = append(b.members, m)
	if len(b.order) >= max && gt.pending[0] == b {
		gt.pending = gt.pending[1:]
		gt.running++
		g.start(b)
	}
	return nil, m
}

// expire starts b, pending past MaxWait, beside what is in flight.
func (g *Group) expire(b *Batch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := b.turn.g
	i := slices.Index(gt.pending, b)
	if b.started || i < 0 {
		return
	}
	gt.pending = slices.Delete(gt.pending, i, i+1)
	for _, m := range b.members {
		if m.state == Waiting {
			gt.running++
			g.start(b)
			return
		}
	}
}

// start seals b and hands it to Start; g.mu is held.
func (g *Group) start(b *Batch) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.started = true
	live := int32(0)
	for _, m := range b.members {
		if m.state == Waiting {
			live++
		}
	}
	b.live.Store(live)
	b.ctx, b.cancel = context.WithCancelCause(b.ctx)
	g.Start(b)
}

// Done gives t back: the first pending batch of its group that still has a
// waiting member takes the turn and starts, or the group has one statement
// fewer in flight.
func (g *Group) Done(t *Turn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := t.g
	for len(gt.pending) > 0 {
		b := gt.pending[0]
		gt.pending = gt.pending[1:]
		for _, m := range b.members {
			if m.state == Waiting {
				g.start(b)
				return
			}
		}
	}
	gt.running--
	if gt.running == 0 && g.m[gt.key] == gt {
		delete(g.m, gt.key)
	}
}

// Leave takes m out of its batch if the batch has not started (m is Gone)
// and reports true; false if it started.
func (g *Group) Leave(m *Member) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.b.started || m.state != Waiting {
		return false
	}
	m.state = Gone
	return true
}

// Settle moves m to s if it still waits, and returns the state it was in.
func (g *Group) Settle(m *Member, s State) State {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := m.state
	if prev == Waiting {
		m.state = s
	}
	return prev
}

// SendAlone tells m, if it still waits, to run alone (Member.Alone), and
// returns the state it was in (Waiting: it was told).
func (g *Group) SendAlone(m *Member) State {
	prev := g.Settle(m, Alone)
	if prev == Waiting {
		close(m.alone)
	}
	return prev
}

// Len returns the number of batch groups with a statement in flight.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}

// Batch returns m's batch.
func (m *Member) Batch() *Batch { return m.b }

// Key returns m's key.
func (m *Member) Key() string { return m.key }

// Alone is closed when m's batch sends it to run alone.
func (m *Member) Alone() <-chan struct{} { return m.alone }

// Turn returns the turn b holds once started: Done gives it back when its
// statement is done.
func (b *Batch) Turn() *Turn { return &b.turn }

// Keys returns b's distinct keys, in the order Index numbers them; only
// once b started.
func (b *Batch) Keys() []string { return b.order }

// Index returns the number of key among b's keys, or -1.
func (b *Batch) Index(key string) int {
	if i, ok := b.keys[key]; ok {
		return i
	}
	return -1
}

// Members returns b's members, every one that ever joined it (Settle
// tells which still wait); only once b started.
func (b *Batch) Members() []*Member { return b.members }

// Context returns b's context once it started: the first member's values,
// ended when every member that waited at the start left (Abandon), with
// ErrAbandoned as its cause, or by Cancel.
func (b *Batch) Context() context.Context { return b.ctx }

// Cancel ends b's context with cause.
func (b *Batch) Cancel(cause error) { b.cancel(cause) }

// Abandon counts one of b's members leaving after its start, and ends b's
// context with cause once none of those that waited at the start is left.
func (b *Batch) Abandon(cause error) {
	if b.live.Add(-1) == 0 {
		b.cancel(cause)
	}
}
