// Package store is the in-process L1 of cached results: entries on
// ristretto, each charged what it says it costs, and empty results in a
// second, smaller ristretto of their own, so that a flood of misses for
// absent rows cannot push the results out.
//
// ristretto decides what stays (admission by its frequency sketch, eviction
// by cost) and applies a Set later, on a goroutine of its own; a lookup
// reads the store's index instead, a sharded map of the full keys. The
// store guarantees:
//
//   - An entry is visible to Get and Peek from its Put (one that returned
//     true) until ristretto lets it go (evicted, refused at admission,
//     replaced or deleted) or Drop removes it: a result is there for the
//     next caller as soon as its flight ends, and the index never holds
//     what ristretto does not (it grows with the stores' bounds, not with
//     the keys ever put).
//   - Puts reach ristretto in batches (each Set that finds ristretto's
//     goroutine asleep wakes it, a futex call on the putting caller's
//     path): a batch is handed over when it holds 64 entries or 1 MiB of
//     cost, or 1 ms after its first put; Flush and Wait hand it over at
//     once. A put waiting in the batch is indexed, so visible, but not yet
//     counted by Entries and Bytes.
//   - A key put again replaces its entry at once in the index, and in
//     ristretto once the batch is handed over; when the prior entry's Set is
//     not applied yet, Put waits for ristretto to apply it first, so that
//     the newer one replaces it instead of being refused as a newcomer
//     beside it. An entry empty where the prior one was not (or the
//     reverse) takes the prior one out of the other store.
//   - An entry that costs more than its store can ever hold is refused,
//     and the prior entry under its key goes (it is older). A store of
//     MaxBytes 1 holds nothing.
//   - Get tells ristretto of one access in 8, at random, misses included
//     (in both stores, as the key may fill either): its admission still sees
//     which keys are hot, for an eighth of the cost of a Get on every hit.
//
// It does not: judge freshness (an entry's Last only bounds its Put; the
// store evicts by cost alone, as ristretto's TTL buckets would grow with
// time under churn, and the owner drops an entry past its life), know what
// a key means, persist, or share anything between processes.
//
// A Store is made lazily: its zero value holds nothing and runs nothing,
// and Open makes the two ristretto caches on its first call, so a program
// that never caches runs no cache goroutines. After Close (or an Open that
// failed) the store stays shut: Open reports false, Put refuses, Get and
// Peek find nothing.
//
// Every method is safe for concurrent use. Get and Peek take one shard's
// read lock of the index (and, on the one Get in 8 that tells ristretto,
// the store's read lock); Put, Drop, Flush and Wait hold the store's read
// lock, Open and Close its write lock, so that ristretto is never used while
// it closes. ristretto's exit callback runs on its own goroutine.
package store

import "time"

// Entry is what the store holds: a pointer type (comparable, the zero value
// meaning none) whose key, cost, emptiness and life do not change once it
// is put.
type Entry interface {
	comparable
	// Key returns the full key the entry is stored under.
	Key() string
	// Cost returns what the entry is charged in the store, in bytes,
	// overhead included (ristretto's own estimate is not added).
	Cost() int64
	// Empty reports whether the entry is an empty result (kept in the
	// store of empty results).
	Empty() bool
	// Last returns the moment from which Put refuses the entry.
	Last() time.Time
	// Slot returns the store's bookkeeping of the entry, a field of the
	// entry that its owner leaves alone.
	Slot() *Slot
}

// Slot is the store's bookkeeping of one entry, kept in the entry itself so
// that the store needs no wrapper of its own; its zero value is that of an
// entry never put.
type Slot struct {
	// handed: the entry's put went to ristretto (Store.flushLocked;
	// guarded by Store.batchMu).
	handed bool
}

// Config is what Open makes the store with.
type Config[E Entry] struct {
	// MaxBytes bounds the cost of the results the store keeps;
	// NegMaxBytes, that of the empty results.
	MaxBytes, NegMaxBytes int64
	// Prepare, if set, is called on each entry Put goes on to store (the
	// store is open and the entry before its Last), before Put looks at its
	// cost and before any reader can see it: the owner's last change to
	// the entry.
	Prepare func(E)
}
