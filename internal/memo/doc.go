// Package memo holds the driver's bounded memos: maps that remember what is
// cheap to forget and costly to recompute, in memory that stays bounded
// whatever the callers do.
//
// A [Gen] is a two-generation map. New entries go to the current
// generation; when it holds its bound of entries or of bytes (as the caller
// sizes them) it becomes the previous generation, the older previous one is
// dropped, and a new current generation starts. A hit in the previous
// generation is promoted into the current one, so that what is used stays
// and what is not used for two generations goes. At most two generations
// are kept: about twice the bounds, plus what concurrent stores race past
// them. Right after a rotation a lookup may miss an entry that was stored
// just before it, when that entry went to the generation now dropped; it
// never returns a value that was not stored under its key. Lookups take no
// lock (sync.Map reads, generations swapped atomically); stores of one key
// that race return one value to all of them.
//
// A [Map] is the one-generation form, for a memo whose entries are cheap to
// learn again all at once: when a new entry finds it past its bound of
// entries or bytes, every entry is dropped and the new one starts the next
// generation. It holds at most the bounds plus one entry (plus what
// concurrent stores race past them); a lookup right after a drop misses
// everything stored before it. Lookups take no lock.
//
// None of them knows the schema: a memo whose entries stand under a schema
// generation keeps that stamp beside it and replaces the memo when the
// stamp moves.
//
// An [Expiring] remembers string keys for a while, each with a value and a
// deadline, in a bounded count of entries. It keeps a 64-bit digest of each
// key (under a seed of its own), never the key, so two keys may be taken for
// one another: a caller must use it only where remembering is an
// optimisation, never a guarantee. When full it forgets the expired entries
// first, and everything when that frees too little. Time is the caller's:
// every call takes the instant it runs at, so tests need no clock. It is
// safe for concurrent use; lookups of an empty Expiring cost one atomic
// load, other calls take a mutex.
//
// Neither memo has a background goroutine, a finalizer or an eviction
// order finer than its generations (or deadlines): they are not caches
// with a hit-rate guarantee, only bounds that keep repeated work cheap.
package memo
