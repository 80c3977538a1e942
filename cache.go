package sqlflight

import (
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/fresh"
	l1 "github.com/sqlflight/sqlflight/internal/store"
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
	// by: the windows of its filler's policy soft, hard and last follow
	// from, when stamped (judge: a reader under the same gets them as they
	// are).
	by      fresh.Windows
	stamped bool
	// slot is the store's bookkeeping of the entry (l1.Slot).
	slot  l1.Slot
	delta time.Duration
	seq   uint64 // epoch sequence when the flight that filled it started
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

// Cost is what e is charged in the store: its key, its rows and
// entryOverhead.
func (e *entry) Cost() int64 { return int64(len(e.key)) + e.res.Bytes + entryOverhead }

// Key returns the full key e is stored under.
func (e *entry) Key() string { return e.key }

// Empty reports whether e is an empty result (the store keeps those apart).
func (e *entry) Empty() bool { return e.empty }

// Last returns the end of e's life: the store refuses e from then on.
func (e *entry) Last() time.Time { return e.last }

// Slot returns the store's bookkeeping of e.
func (e *entry) Slot() *l1.Slot { return &e.slot }

// store is the in-process L1 (internal/store): results on ristretto, cost
// in estimated bytes (entry.Cost), and empty results in a second, smaller
// store of their own; an entry is visible from its put until ristretto
// lets it go or it is dropped. It is made on first use (cache), so a
// Shield that never caches runs no cache goroutines.
type store = l1.Store[*entry]

// cache returns the Shield's store, or nil if it is closed or cannot be made.
func (s *engine) cache() *store {
	st := &s.store
	if st.Ready() {
		return st
	}
	// An entry the store takes gets its jitter draw, unless it has one
	// (the entry's own, from then on).
	ok, err := st.Open(l1.Config[*entry]{MaxBytes: s.opts.MaxBytes, NegMaxBytes: s.opts.NegMaxBytes,
		Prepare: func(e *entry) {
			if e.jitter == 0 && !e.stamped {
				e.jitter = fresh.Draw()
			}
		}})
	if err != nil {
		s.log.Error("sqlflight: result cache disabled", "error", err)
	}
	if !ok {
		return nil
	}
	return st
}

// Close releases the result cache's goroutines and memory, ends the idle
// goroutines that run origin queries, and stops the live page's sampling
// (Handler). Queries through the Shield keep working, uncached, after
// Close. Close does not close any *sql.DB.
func (s *Shield) Close() error {
	s.workers.close()
	s.feedStats.Stop()
	s.load.Close()
	if ts := s.tier; ts != nil {
		ts.Close() // stops hearing other instances (idempotent)
	}
	if s.tierRelease != nil {
		s.tierRelease() // a tier opened from a DSN closes with its last Shield; others are the caller's
	}
	s.store.Close()
	return nil
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
func (s *engine) judge(e *entry, p Policy) fresh.Deadlines {
	w := s.windows(p)
	if e.stamped && e.by == w {
		// As fill computed them.
		return fresh.Deadlines{Soft: e.soft, Hard: e.hard, Last: e.last}
	}
	return fresh.At(e.filled, w, e.empty, e.jitter).Within(e.last)
}

// windows returns what of p, under Options.MaxStale, an entry's deadlines
// follow from (fresh.At).
func (s *engine) windows(p Policy) fresh.Windows {
	return fresh.Windows{Soft: p.Soft, Hard: p.Hard, Neg: p.Neg, Jitter: p.Jitter, MaxStale: s.opts.MaxStale}
}
