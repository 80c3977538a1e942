package sqlflight

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/sqlflight/sqlflight/internal/fresh"
)

// Clock tells the time. Options.Clock injects one; tests move a fake one.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// entry is a cached result. Everything but the refresh back-off is written
// once, before the entry is stored.
//
// soft, hard and last are the deadlines under the policy of the read that
// filled it; last also bounds the entry's life in the store. Each later
// reader judges the entry by its own policy (judge): from filled, with the
// entry's own jitter draw, within last.
type entry struct {
	key    string // the full key, compared on every hit (the store keeps hashes)
	res    *result
	empty  bool
	filled time.Time
	soft   time.Time // fresh until here (the filler's policy)
	hard   time.Time // served stale (and refreshed) until here (the filler's policy)
	last   time.Time // served when the origin fails (stale-if-error) until here; gone after
	jitter float64   // the entry's jitter draw in [-1, 1], scaled by each reader's fraction
	// by: what of its filler's policy soft, hard and last follow from
	// (judge: a reader under the same gets them as they are).
	by deadlinePolicy
	// handed: its put went to ristretto (store.batch; guarded by
	// store.batchMu).
	handed bool
	delta  time.Duration
	seq    uint64 // epoch sequence when the flight that filled it started
	// version is the fleet version of a result written to or read from the
	// shared tier (0: this process's alone).
	version uint64
	tables  []string
	known   bool

	retryAt  atomic.Int64 // UnixNano before which no refresh starts (after failures)
	failures atomic.Int32
}

// entryOverhead is what an entry costs beyond its key and rows: the entry,
// the result headers, ristretto's store slot and policy bookkeeping
// (measured: about 530 bytes for a one-row result), and its slot in the
// store's index (measured: about 75 bytes).
const entryOverhead = 656

func (e *entry) cost() int64 { return int64(len(e.key)) + e.res.Bytes + entryOverhead }

// store is the in-process L1: results on ristretto, cost in estimated bytes,
// and empty results in a second, smaller store of their own. ristretto
// decides what stays (admission, eviction by cost) and applies a Set later,
// on a goroutine of its own; the index is what lookups read: an entry is in
// it from its put until ristretto lets it go (OnExit: evicted, refused,
// replaced or deleted) or del removes it, so that a result is visible to
// the next caller as soon as its flight ends. The stores are made on first
// use, so a Shield that never caches runs no cache goroutines.
type store struct {
	ready atomic.Bool
	// mu is held for reading by every use of pos and neg, and for writing
	// to make or close them: ristretto must not be used while it closes.
	mu       sync.RWMutex
	pos, neg *ristretto.Cache[string, *entry]
	closed   bool
	failed   bool

	// index maps a key to the entry stored under it (see store). A hit
	// reads it alone, and tells ristretto of one access in touchEvery so
	// that its admission still sees which keys are hot.
	index *index

	// Puts reach ristretto in batches: each Set that finds ristretto's
	// goroutine asleep wakes it (a futex call on the filling caller's path,
	// ≈ 4 µs), so puts wait in batch — indexed, so visible — until
	// batchMax of them are there or batchDelay has passed. batchMu is
	// taken under mu.
	batchMu    sync.Mutex
	batch      []*entry
	batchBytes int64
	batchTimer *time.Timer
	batchDelay time.Duration // batchDelay; tests hold a batch longer

	entries, bytes atomic.Int64 // what the stores hold: + on a Set they took, − on exit
}

// The bounds of a batch of puts (store.batch).
const (
	batchMax      = 64
	batchMaxBytes = 1 << 20
	batchDelay    = time.Millisecond
)

// touchEvery: a hit tells ristretto of its access once in this many, at
// random (ristretto's frequency sketch counts relative heat; a Get on
// every hit costs more than the rest of the lookup).
const touchEvery = 8

// cache returns the Shield's store, or nil if it is closed or cannot be made.
func (s *Shield) cache() *store {
	st := &s.store
	if st.ready.Load() {
		return st
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || st.failed {
		return nil
	}
	if st.pos == nil {
		pos, err := newRistretto(s.opts.MaxBytes, st.exit)
		var neg *ristretto.Cache[string, *entry]
		if err == nil {
			if neg, err = newRistretto(s.opts.NegMaxBytes, st.exit); err != nil {
				pos.Close()
			}
		}
		if err != nil {
			st.failed = true
			s.log.Error("sqlflight: result cache disabled", "error", err)
			return nil
		}
		st.pos, st.neg, st.index = pos, neg, newIndex()
		st.batchDelay = batchDelay
	}
	st.ready.Store(true)
	return st
}

// exit counts an entry out of the store (evicted, rejected, replaced or
// deleted), and out of the index unless another entry took its key.
func (st *store) exit(e *entry) {
	if e != nil {
		st.entries.Add(-1)
		st.bytes.Add(-e.cost())
		st.index.remove(e.key, e)
	}
}

func newRistretto(maxBytes int64, exit func(*entry)) (*ristretto.Cache[string, *entry], error) {
	// About ten counters per entry of a typical 1 KiB.
	counters := max(maxBytes/1024*10, 1000)
	return ristretto.NewCache(&ristretto.Config[string, *entry]{
		NumCounters: counters,
		MaxCost:     maxBytes,
		BufferItems: 256,
		// Costs are bytes already, overhead included: ristretto's own
		// per-item estimate would silently shrink the cache.
		IgnoreInternalCost: true,
		OnExit:             exit,
	})
}

// get returns the entry stored under key.
func (st *store) get(key string) *entry {
	e := st.index.load(key)
	if rand.Uint32()%touchEvery == 0 {
		// Misses and hits alike (admission weighs a newcomer's misses
		// against a resident's hits); a miss in both stores, as the key
		// may fill either.
		if e == nil || !e.empty {
			st.touch(key, false)
		}
		if e == nil || e.empty {
			st.touch(key, true)
		}
	}
	return e
}

// peek returns the entry stored under key, as get, without telling
// ristretto of an access.
func (st *store) peek(key string) *entry {
	return st.index.load(key)
}

// touch tells ristretto of an access to key (in the store of empty
// results, or of the others).
func (st *store) touch(key string, empty bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if st.closed {
		return
	}
	into := st.pos
	if empty {
		into = st.neg
	}
	into.Get(key)
}

// put stores e, giving it its jitter draw unless it has one. It carries its own deadlines: the store evicts by cost
// only (ristretto's TTL buckets never shrink, so with churn they would grow
// with time rather than with MaxBytes), and a lookup drops an entry past
// its last use. From put on, get returns e (until ristretto lets it go).
//
// put reports whether the store took e: false when it costs more than the
// store can ever hold (a store of MaxBytes 1 holds nothing). ristretto gets
// it with the next batch (store.batch).
func (st *store) put(e *entry, now time.Time) bool {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if st.closed || !now.Before(e.last) {
		return false
	}
	if e.jitter == 0 && !e.by.set {
		e.jitter = fresh.Draw() // the entry's own, from now on
	}
	into, other := st.pos, st.neg
	if e.empty {
		into, other = st.neg, st.pos
	}
	if e.cost() > into.MaxCost() {
		if prior := st.index.remove(e.key, nil); prior != nil { // older than e: gone
			if prior.empty {
				st.neg.Del(e.key)
			} else {
				st.pos.Del(e.key)
			}
		}
		return false
	}
	// In the index before ristretto may refuse it (exit takes it out).
	prior := st.index.swap(e)
	if prior != nil && prior.empty != e.empty {
		other.Del(e.key) // empty results live apart: the older one goes
	}
	st.batchMu.Lock()
	defer st.batchMu.Unlock()
	if prior != nil && prior.empty == e.empty && prior.handed {
		if _, shown := into.Get(e.key); !shown {
			// prior's Set is not applied yet: e would come after it as
			// another new key, and ristretto would keep prior and refuse
			// e. Once prior's Set is applied, e replaces it. (A Del first
			// would not do: a Set that finds prior stored replaces it at
			// once, and the Del, applied later, would take e.) A prior
			// still in the batch is left out of it (flushLocked).
			into.Wait()
		}
	}
	st.batch = append(st.batch, e)
	st.batchBytes += e.cost()
	switch {
	case len(st.batch) >= batchMax || st.batchBytes >= batchMaxBytes:
		st.flushLocked()
	case len(st.batch) == 1:
		if st.batchTimer == nil {
			st.batchTimer = time.AfterFunc(st.batchDelay, st.flush)
		} else {
			st.batchTimer.Reset(st.batchDelay)
		}
	}
	return true
}

// flush hands the batch of puts to ristretto.
func (st *store) flush() {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if st.closed {
		return
	}
	st.batchMu.Lock()
	defer st.batchMu.Unlock()
	st.flushLocked()
}

// flushLocked hands the batch to ristretto; mu (read) and batchMu are
// held. An entry no longer in the index (replaced or dropped meanwhile)
// is left out; one ristretto drops at once leaves the index.
func (st *store) flushLocked() {
	for i, e := range st.batch {
		st.batch[i] = nil
		if st.index.load(e.key) != e {
			continue
		}
		into := st.pos
		if e.empty {
			into = st.neg
		}
		e.handed = true
		if into.Set(e.key, e, e.cost()) {
			st.entries.Add(1)
			st.bytes.Add(e.cost())
		} else {
			st.index.remove(e.key, e)
		}
	}
	st.batch, st.batchBytes = st.batch[:0], 0
}

// drop removes e from the store, unless another entry took its key.
func (st *store) drop(e *entry) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if st.closed || st.index.remove(e.key, e) == nil {
		return
	}
	if e.empty {
		st.neg.Del(e.key)
	} else {
		st.pos.Del(e.key)
	}
}

// wait blocks until every put so far is applied (or dropped).
func (st *store) wait() {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if st.closed {
		return
	}
	st.batchMu.Lock()
	st.flushLocked()
	st.batchMu.Unlock()
	st.pos.Wait()
	st.neg.Wait()
}

// Close releases the result cache's goroutines and memory, and stops the
// live page's sampling (Handler). Queries through the Shield keep working,
// uncached, after Close. Close does not close any *sql.DB.
func (s *Shield) Close() error {
	s.closeFeeds()
	s.load.close()
	if ts := s.tier; ts != nil {
		if ts.stop != nil {
			ts.stop() // stops hearing other instances (idempotent)
		}
		ts.close()
	}
	if s.tierRelease != nil {
		s.tierRelease() // a tier opened from a DSN closes with its last Shield; others are the caller's
	}
	st := &s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ready.Store(false)
	st.closed = true
	st.batchMu.Lock()
	if st.batchTimer != nil {
		st.batchTimer.Stop()
	}
	st.batch, st.batchBytes = nil, 0
	st.batchMu.Unlock()
	if st.pos != nil {
		st.pos.Close()
		st.neg.Close()
	}
	if st.index != nil {
		st.index.clear()
	}
	return nil
}

func (s *Shield) isClosed() bool {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	return s.store.closed
}

// Invalidate drops the cached results that depend on tables (matched
// without regard to case) and makes in-flight queries reading them
// unjoinable, as a write through the Shield to those tables does; with a
// shared tier, every instance of the fleet does so too.
func (s *Shield) Invalidate(tables ...string) {
	if len(tables) > 0 {
		s.bump(tables, true)
	}
}

// InvalidateAll drops every cached result of the Shield and makes every
// in-flight query unjoinable; with a shared tier, on every instance.
func (s *Shield) InvalidateAll() {
	s.schemaGen.Add(1) // the schema may have changed too: ask the server again
	s.bump(nil, false)
}

// judge returns e's deadlines for a reader under p: p's own windows from
// the moment e was filled, spread by e's jitter draw with p's fraction (so
// a reader sees the same deadlines on every hit), and never past e's life
// in the store. A reader whose policy allows less staleness than the
// filler's gets earlier deadlines; one that allows more is served while the
// entry lives (HTTP caches judge a stored response by the request's own
// max-age alike).
func (s *Shield) judge(e *entry, p Policy) fresh.Deadlines {
	if e.by.set && e.by == deadlinesOf(p) {
		// deadlinesAt(e.filled, p, e.empty, e.jitter), as fill computed them.
		return fresh.Deadlines{Soft: e.soft, Hard: e.hard, Last: e.last}
	}
	soft, hard, last := s.deadlinesAt(e.filled, p, e.empty, e.jitter)
	return fresh.Deadlines{Soft: soft, Hard: hard, Last: last}.Within(e.last)
}

// deadlines returns the soft and hard deadlines and the stale-if-error
// limit of an entry filled now under p, spread by a fresh jitter draw.
func (s *Shield) deadlines(now time.Time, p Policy, empty bool) (soft, hard, last time.Time) {
	return s.deadlinesAt(now, p, empty, fresh.Draw())
}

// deadlinePolicy is what of a policy deadlinesAt reads.
type deadlinePolicy struct {
	soft, hard, neg time.Duration
	jitter          float64
	set             bool
}

func deadlinesOf(p Policy) deadlinePolicy {
	return deadlinePolicy{soft: p.Soft, hard: p.Hard, neg: p.Neg, jitter: p.Jitter, set: true}
}

// deadlinesAt returns the deadlines of an entry filled at filled under p
// (and Options.MaxStale) whose jitter draw is u (fresh.At).
func (s *Shield) deadlinesAt(filled time.Time, p Policy, empty bool, u float64) (soft, hard, last time.Time) {
	d := fresh.At(filled, fresh.Windows{Soft: p.Soft, Hard: p.Hard, Neg: p.Neg, Jitter: p.Jitter, MaxStale: s.opts.MaxStale}, empty, u)
	return d.Soft, d.Hard, d.Last
}
