package store

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// Store is the in-process L1 (see the package comment): results on
// ristretto, cost in estimated bytes, and empty results in a second,
// smaller store of their own; the index is what lookups read. Its zero
// value is a store not made yet (Open); a Store must not be copied.
type Store[E Entry] struct {
	ready atomic.Bool
	// mu is held for reading by every use of pos and neg, and for writing
	// to make or close them: ristretto must not be used while it closes.
	mu       sync.RWMutex
	pos, neg *ristretto.Cache[string, E]
	closed   bool
	failed   bool
	prepare  func(E) // Config.Prepare

	// index maps a key to the entry stored under it (see the package
	// comment). A hit reads it alone, and tells ristretto of one access in
	// touchEvery so that its admission still sees which keys are hot.
	index *index[E]

	// Puts reach ristretto in batches: each Set that finds ristretto's
	// goroutine asleep wakes it (a futex call on the filling caller's path,
	// ≈ 4 µs), so puts wait in batch — indexed, so visible — until
	// batchMax of them are there or batchDelay has passed. batchMu is
	// taken under mu.
	batchMu    sync.Mutex
	batch      []E
	batchBytes int64
	batchTimer *time.Timer
	batchDelay time.Duration // batchDelay; tests hold a batch longer

	entries, bytes atomic.Int64 // what the stores hold: + on a Set they took, − on exit
}

// The bounds of a batch of puts (Store.batch).
const (
	batchMax      = 64
	batchMaxBytes = 1 << 20
	batchDelay    = time.Millisecond
)

// touchEvery: a hit tells ristretto of its access once in this many, at
// random (ristretto's frequency sketch counts relative heat; a Get on
// every hit costs more than the rest of the lookup).
const touchEvery = 8

// Ready reports whether the store is open: made by Open and not closed. It
// is one atomic load, for the path of every read.
func (st *Store[E]) Ready() bool { return st.ready.Load() }

// Open makes the store's ristretto caches under c on its first call and
// reports whether the store is open. It reports false, with a nil error,
// once the store is closed or an earlier Open failed; the Open that fails
// returns the error, and the store stays shut from then on. A later Open
// of an open store ignores c.
func (st *Store[E]) Open(c Config[E]) (bool, error) {
	if st.ready.Load() {
		return true, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || st.failed {
		return false, nil
	}
	if st.pos == nil {
		pos, err := newRistretto(c.MaxBytes, st.exit)
		var neg *ristretto.Cache[string, E]
		if err == nil {
			if neg, err = newRistretto(c.NegMaxBytes, st.exit); err != nil {
				pos.Close()
			}
		}
		if err != nil {
			st.failed = true
			return false, err
		}
		st.pos, st.neg, st.index = pos, neg, newIndex[E]()
		st.prepare = c.Prepare
		st.batchDelay = batchDelay
	}
	st.ready.Store(true)
	return true, nil
}

// exit counts an entry out of the store (evicted, rejected, replaced or
// deleted), and out of the index unless another entry took its key.
func (st *Store[E]) exit(e E) {
	var zero E
	if e != zero {
		st.entries.Add(-1)
		st.bytes.Add(-e.Cost())
		st.index.remove(e.Key(), e)
	}
}

// newRistretto returns a ristretto cache of maxBytes that calls exit on
// every entry it lets go.
func newRistretto[E Entry](maxBytes int64, exit func(E)) (*ristretto.Cache[string, E], error) {
	// About ten counters per entry of a typical 1 KiB.
	counters := max(maxBytes/1024*10, 1000)
	return ristretto.NewCache(&ristretto.Config[string, E]{
		NumCounters: counters,
		MaxCost:     maxBytes,
		BufferItems: 256,
		// Costs are bytes already, overhead included: ristretto's own
		// per-item estimate would silently shrink the cache.
		IgnoreInternalCost: true,
		OnExit:             exit,
	})
}

// Get returns the entry stored under key, or the zero E; one call in
// touchEvery, at random, tells ristretto of the access. The store must be
// open (Open reported true), though it may have closed since.
func (st *Store[E]) Get(key string) E {
	var zero E
	e := st.index.load(key)
	if rand.Uint32()%touchEvery == 0 {
		// Misses and hits alike (admission weighs a newcomer's misses
		// against a resident's hits); a miss in both stores, as the key
		// may fill either.
		if e == zero || !e.Empty() {
			st.touch(key, false)
		}
		if e == zero || e.Empty() {
			st.touch(key, true)
		}
	}
	return e
}

// Peek returns the entry stored under key, or the zero E, as Get, without
// telling ristretto of an access.
func (st *Store[E]) Peek(key string) E {
	return st.index.load(key)
}

// touch tells ristretto of an access to key (in the store of empty
// results, or of the others).
func (st *Store[E]) touch(key string, empty bool) {
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

// Put stores e, after Config.Prepare has seen it. e carries its own
// deadlines: the store evicts by cost only (ristretto's TTL buckets never
// shrink, so with churn they would grow with time rather than with
// MaxBytes), and a lookup drops an entry past its last use. From Put on,
// Get returns e (until ristretto lets it go).
//
// Put reports whether the store took e: false on a closed store, for an
// entry at or past its Last at now, and when e costs more than its store
// can ever hold (the prior entry under its key goes then). ristretto gets
// e with the next batch (Store.batch).
func (st *Store[E]) Put(e E, now time.Time) bool {
	var zero E
	st.mu.RLock()
	defer st.mu.RUnlock()
	if st.closed || !now.Before(e.Last()) {
		return false
	}
	if st.prepare != nil {
		st.prepare(e)
	}
	k, empty, cost := e.Key(), e.Empty(), e.Cost()
	into, other := st.pos, st.neg
	if empty {
		into, other = st.neg, st.pos
	}
	if cost > into.MaxCost() {
		if prior := st.index.remove(k, zero); prior != zero { // older than e: gone
			if prior.Empty() {
				st.neg.Del(k)
			} else {
				st.pos.Del(k)
			}
		}
		return false
	}
	// In the index before ristretto may refuse it (exit takes it out).
	prior := st.index.swap(e)
	if prior != zero && prior.Empty() != empty {
		other.Del(k) // empty results live apart: the older one goes
	}
	st.batchMu.Lock()
	defer st.batchMu.Unlock()
	if prior != zero && prior.Empty() == empty && prior.Slot().handed {
		if _, shown := into.Get(k); !shown {
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
	st.batchBytes += cost
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

// Flush hands the batch of puts to ristretto, so that Entries and Bytes
// count them (as soon as ristretto applies them); on a store that is not
// open it does nothing.
func (st *Store[E]) Flush() {
	if st.ready.Load() {
		st.flush()
	}
}

// flush hands the batch of puts to ristretto.
func (st *Store[E]) flush() {
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
func (st *Store[E]) flushLocked() {
	var zero E
	for i, e := range st.batch {
		st.batch[i] = zero
		k := e.Key()
		if st.index.load(k) != e {
			continue
		}
		into := st.pos
		if e.Empty() {
			into = st.neg
		}
		e.Slot().handed = true
		cost := e.Cost()
		if into.Set(k, e, cost) {
			st.entries.Add(1)
			st.bytes.Add(cost)
		} else {
			st.index.remove(k, e)
		}
	}
	st.batch, st.batchBytes = st.batch[:0], 0
}

// Drop removes e from the store, unless another entry took its key (then it
// does nothing).
func (st *Store[E]) Drop(e E) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	var zero E
	k := e.Key()
	if st.closed || st.index.remove(k, e) == zero {
		return
	}
	if e.Empty() {
		st.neg.Del(k)
	} else {
		st.pos.Del(k)
	}
}

// Wait blocks until every put so far is applied by ristretto (or refused
// by it); on a closed store it returns at once. The store must have been
// opened.
func (st *Store[E]) Wait() {
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

// Entries returns the number of entries ristretto holds (a put still in
// the batch is not counted; Flush).
func (st *Store[E]) Entries() int64 { return st.entries.Load() }

// Bytes returns the cost of the entries ristretto holds (as Entries).
func (st *Store[E]) Bytes() int64 { return st.bytes.Load() }

// Close releases the store's goroutines and memory: the batch waiting is
// dropped, and the store stays shut (Open reports false; Put refuses; Get
// and Peek find nothing). Close of a store never opened, or closed, only
// shuts it.
func (st *Store[E]) Close() {
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
}

// Closed reports whether Close was called.
func (st *Store[E]) Closed() bool {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.closed
}
