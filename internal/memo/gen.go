package memo

import (
	"sync"
	"sync/atomic"
)

// generation is one map of a Gen.
type generation struct {
	m     sync.Map // K → V
	n     atomic.Int64
	bytes atomic.Int64
}

// Gen is a two-generation bounded map from K to V (see the package
// comment). Its zero value is not usable: make one with NewGen.
type Gen[K comparable, V any] struct {
	cur, prev atomic.Pointer[generation]
	mu        sync.Mutex // serializes rotations
	entries   int64      // rotate when a generation holds this many entries …
	bytes     int64      // … or this many bytes
	size      func(K, V) int64
}

// NewGen returns an empty Gen whose generations rotate when one holds
// entries entries or bytes bytes, an entry counting size(k, v) bytes (nil
// size counts none, leaving the entries as the only bound).
func NewGen[K comparable, V any](entries, bytes int64, size func(K, V) int64) *Gen[K, V] {
	g := &Gen[K, V]{entries: entries, bytes: bytes, size: size}
	g.cur.Store(new(generation))
	g.prev.Store(new(generation))
	return g
}

// Load returns the value stored under k and whether there is one; a hit in
// the previous generation is promoted into the current one (which may
// rotate it).
func (g *Gen[K, V]) Load(k K) (V, bool) {
	if v, ok := g.cur.Load().m.Load(k); ok {
		return v.(V), true
	}
	if v, ok := g.prev.Load().m.Load(k); ok {
		g.Store(k, v.(V))
		return v.(V), true
	}
	var zero V
	return zero, false
}

// Store adds v under k to the current generation and returns it, or
// returns the value the current generation already holds under k (so that
// racing callers of one key share one value); a store that fills the
// current generation rotates it.
func (g *Gen[K, V]) Store(k K, v V) V {
	cur := g.cur.Load()
	if x, loaded := cur.m.LoadOrStore(k, v); loaded {
		return x.(V)
	}
	if cur.n.Add(1) >= g.entries || g.size != nil && cur.bytes.Add(g.size(k, v)) >= g.bytes {
		g.rotate(cur)
	}
	return v
}

// rotate makes the full generation the previous one and starts a new
// current one, unless another goroutine already did.
func (g *Gen[K, V]) rotate(full *generation) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur.Load() != full {
		return
	}
	g.prev.Store(full)
	g.cur.Store(new(generation))
}
