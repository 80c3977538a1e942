package stats

import (
	"sync"
	"sync/atomic"
)

// Bypasses counts the statements sent straight to the real connection, in
// all and by reason (the caller's words, such as BypassReasons); its zero
// value is ready to use and its methods are safe for concurrent use.
type Bypasses struct {
	total   atomic.Uint64
	reasons sync.Map // string → *atomic.Uint64
}

// Add counts one bypass for reason.
func (b *Bypasses) Add(reason string) {
	b.total.Add(1)
	v, ok := b.reasons.Load(reason)
	if !ok {
		v, _ = b.reasons.LoadOrStore(reason, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
}

// Total returns the bypasses counted, whatever their reason.
func (b *Bypasses) Total() uint64 { return b.total.Load() }

// Reasons returns the count of each reason counted so far, in a map of its
// own (empty, not nil, before the first).
func (b *Bypasses) Reasons() map[string]uint64 {
	out := map[string]uint64{}
	b.reasons.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}
