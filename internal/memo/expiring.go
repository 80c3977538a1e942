package memo

import (
	"hash/maphash"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// Expiring remembers string keys until a deadline, each with a value, in a
// bounded count of entries (see the package comment). It keeps a 64-bit
// digest of each key, never the key: a key may be a megabyte of SQL and
// arguments. Its zero value is not usable: call Init first.
type Expiring[V any] struct {
	n    atomic.Int64 // len(m), read without the lock
	mu   sync.Mutex
	max  int
	seed maphash.Seed
	m    map[uint64]remembered[V] // digest → expiry and value
}

// remembered is an entry of an Expiring: its deadline and its value.
type remembered[V any] struct {
	until int64 // Unix nanoseconds
	v     V
}

// Init makes e an empty memo of at most max entries, with a digest seed of
// its own; it must be called once, before any other method.
func (e *Expiring[V]) Init(max int) {
	e.max, e.seed, e.m = max, maphash.MakeSeed(), make(map[uint64]remembered[V])
}

// Put remembers k with v until now+ttl, unless k is remembered at now and
// keep (its value) says to keep it (nil keep keeps any live entry); it
// reports whether it stored v. When e is full it first forgets the entries
// expired at now, and everything if more than three quarters of max stay.
func (e *Expiring[V]) Put(k string, v V, now time.Time, ttl time.Duration, keep func(V) bool) bool {
	d, t := maphash.String(e.seed, k), now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.m[d]; ok && t < r.until && (keep == nil || keep(r.v)) {
		return false
	}
	if len(e.m) >= e.max {
		maps.DeleteFunc(e.m, func(_ uint64, r remembered[V]) bool { return t >= r.until })
		if len(e.m) >= e.max*3/4 {
			clear(e.m)
		}
	}
	e.m[d] = remembered[V]{until: now.Add(ttl).UnixNano(), v: v}
	e.n.Store(int64(len(e.m)))
	return true
}

// Get returns the value of k if k (or a key of the same digest) is
// remembered at now, the deadline itself excluded; an empty memo costs one
// atomic load (it sits on the path of every shared read).
func (e *Expiring[V]) Get(k string, now time.Time) (V, bool) {
	var zero V
	if e.n.Load() == 0 {
		return zero, false
	}
	d := maphash.String(e.seed, k)
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.m[d]
	if !ok || now.UnixNano() >= r.until {
		return zero, false
	}
	return r.v, true
}

// Holds reports whether k (or a key of the same digest) is remembered at
// now with a value that ok accepts.
func (e *Expiring[V]) Holds(k string, now time.Time, ok func(V) bool) bool {
	v, found := e.Get(k, now)
	return found && ok(v)
}

// Len returns how many digests e holds, expired ones included (they go
// only when a full memo is stored into).
func (e *Expiring[V]) Len() int { return int(e.n.Load()) }

// Set is an Expiring of keys alone.
type Set struct{ Expiring[struct{}] }

// Add remembers k until now+ttl and reports whether k was new (or expired).
func (s *Set) Add(k string, now time.Time, ttl time.Duration) bool {
	return s.Put(k, struct{}{}, now, ttl, nil)
}

// Has reports whether k is remembered at now.
func (s *Set) Has(k string, now time.Time) bool {
	_, ok := s.Get(k, now)
	return ok
}
