package store

import (
	"hash/maphash"
	"sync"
)

// index maps a key to the entry the store holds under it (see Store): Go
// maps in shards, each under its own lock, so that lookups of different
// keys seldom meet. A map costs about 30–60 bytes an entry (a sync.Map
// about 230: its trie of nodes).
type index[E Entry] struct {
	seed   maphash.Seed
	shards [indexShards]indexShard[E]
}

// indexShards is the number of shards of an index.
const indexShards = 64

// indexShard is one shard of an index, padded to a cache line of its own.
type indexShard[E Entry] struct {
	mu sync.RWMutex
	m  map[string]E
	_  [64 - 32]byte // one cache line each
}

// newIndex returns an empty index with a seed of its own.
func newIndex[E Entry]() *index[E] { return &index[E]{seed: maphash.MakeSeed()} }

// shard returns the shard that holds key.
func (x *index[E]) shard(key string) *indexShard[E] {
	return &x.shards[maphash.String(x.seed, key)%indexShards]
}

// load returns the entry indexed under key, or the zero E.
func (x *index[E]) load(key string) E {
	sh := x.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	return e
}

// swap stores e under its key and returns the entry it replaced, or the
// zero E.
func (x *index[E]) swap(e E) E {
	k := e.Key()
	sh := x.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]E)
	}
	prior := sh.m[k]
	sh.m[k] = e
	return prior
}

// remove deletes key if it holds e (any entry, when e is the zero E) and
// returns what it held (the zero E when it removed nothing).
func (x *index[E]) remove(key string, e E) E {
	var zero E
	sh := x.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := sh.m[key]
	if cur == zero || e != zero && cur != e {
		return zero
	}
	delete(sh.m, key)
	return cur
}

// clear empties the index.
func (x *index[E]) clear() {
	for i := range x.shards {
		sh := &x.shards[i]
		sh.mu.Lock()
		sh.m = nil
		sh.mu.Unlock()
	}
}
