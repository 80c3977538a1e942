package sqlflight

import (
	"hash/maphash"
	"sync"
)

// index maps a key to the entry the store holds under it (see store): Go
// maps in shards, each under its own lock, so that lookups of different
// keys seldom meet. A map costs about 30–60 bytes an entry (a sync.Map
// about 230: its trie of nodes).
type index struct {
	seed   maphash.Seed
	shards [indexShards]indexShard
}

const indexShards = 64

type indexShard struct {
	mu sync.RWMutex
	m  map[string]*entry
	_  [64 - 32]byte // one cache line each
}

func newIndex() *index { return &index{seed: maphash.MakeSeed()} }

func (x *index) shard(key string) *indexShard {
	return &x.shards[maphash.String(x.seed, key)%indexShards]
}

func (x *index) load(key string) *entry {
	sh := x.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	return e
}

// swap stores e under its key and returns the entry it replaced, or nil.
func (x *index) swap(e *entry) *entry {
	sh := x.shard(e.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]*entry)
	}
	prior := sh.m[e.key]
	sh.m[e.key] = e
	return prior
}

// remove deletes key if it holds e (any entry, when e is nil) and returns
// what it held.
func (x *index) remove(key string, e *entry) *entry {
	sh := x.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := sh.m[key]
	if cur == nil || e != nil && cur != e {
		return nil
	}
	delete(sh.m, key)
	return cur
}

func (x *index) clear() {
	for i := range x.shards {
		sh := &x.shards[i]
		sh.mu.Lock()
		sh.m = nil
		sh.mu.Unlock()
	}
}
