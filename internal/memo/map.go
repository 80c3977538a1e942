package memo

import "sync/atomic"

// Map is a bounded map of one generation from K to V: when a new entry
// finds it past its bound of entries or bytes, every entry is dropped and
// the new one starts an empty generation (see the package comment). Its
// zero value is not usable: make one with NewMap.
type Map[K comparable, V any] struct {
	cur     atomic.Pointer[generation]
	entries int64
	bytes   int64
	size    func(K, V) int64
}

// NewMap returns an empty Map that is dropped when a new entry takes it
// past entries entries or bytes bytes, an entry counting size(k, v) bytes
// (nil size counts none, leaving the entries as the only bound).
func NewMap[K comparable, V any](entries, bytes int64, size func(K, V) int64) *Map[K, V] {
	m := &Map[K, V]{entries: entries, bytes: bytes, size: size}
	m.cur.Store(new(generation))
	return m
}

// Load returns the value stored under k and whether there is one; it takes
// no lock.
func (m *Map[K, V]) Load(k K) (V, bool) {
	if v, ok := m.cur.Load().m.Load(k); ok {
		return v.(V), true
	}
	var zero V
	return zero, false
}

// LoadOrStore returns the value stored under k and true, or stores v and
// returns it and false. It counts v against the bound before it looks
// (call it after a Load missed): when that takes the generation past
// entries or bytes, a new empty generation replaces it and v goes there,
// the first of the new one and not counted in it.
func (m *Map[K, V]) LoadOrStore(k K, v V) (V, bool) {
	cur := m.cur.Load()
	if cur.n.Add(1) > m.entries || m.size != nil && cur.bytes.Add(m.size(k, v)) > m.bytes {
		m.cur.CompareAndSwap(cur, new(generation))
		cur = m.cur.Load()
	}
	x, loaded := cur.m.LoadOrStore(k, v)
	return x.(V), loaded
}

// CompareAndSwap replaces the value under k with new if it is old, and
// reports whether it did; it counts nothing against the bound. Like
// sync.Map's, it panics when old is of a type that is not comparable.
func (m *Map[K, V]) CompareAndSwap(k K, old, new V) bool {
	return m.cur.Load().m.CompareAndSwap(k, old, new)
}

// Range calls f for each entry of the generation in force, in no order,
// until f returns false; entries stored meanwhile may be seen or not.
func (m *Map[K, V]) Range(f func(K, V) bool) {
	m.cur.Load().m.Range(func(k, v any) bool { return f(k.(K), v.(V)) })
}
