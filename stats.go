package sqlflight

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// Histogram is a cumulative distribution of durations in seconds:
// Counts[i] observations were ≤ Bounds[i] and above the bound before it;
// the last count is the observations above every bound. Its Quantile
// estimates a quantile from the buckets.
type Histogram = stats.Histogram

// NameStats are the counters of the statements of one policy name (the
// name= annotation or Policy.Name); statements without a name count under
// their fingerprint only in the totals, not here.
type NameStats struct {
	Queries          uint64 // shareable reads that reached the sharing path
	FreshHits        uint64
	StaleHits        uint64
	NegativeHits     uint64
	Misses           uint64
	OriginExecutions uint64
	OriginErrors     uint64
	OriginDuration   Histogram
}

// histogram is the lock-free form of Histogram (stats.Durations).
type histogram struct{ d stats.Durations }

// observe counts d.
func (h *histogram) observe(d time.Duration) { h.d.Observe(d) }

// snapshot returns the observations so far.
func (h *histogram) snapshot() Histogram { return h.d.Snapshot() }

// nameCounters are the counters of one policy name.
type nameCounters struct {
	queries, freshHits, staleHits, negHits, misses, originExecs, originErrors atomic.Uint64
	originDuration                                                            histogram
}

// maxNames bounds the policy names counted apart; later names count under
// otherName.
const (
	maxNames  = 1000
	otherName = "_other"
)

type names struct {
	m sync.Map // string → *nameCounters
	n atomic.Int64
}

// of returns the counters of name, or nil for the empty name.
func (ns *names) of(name string) *nameCounters {
	if name == "" {
		return nil
	}
	if v, ok := ns.m.Load(name); ok {
		return v.(*nameCounters)
	}
	if ns.n.Load() >= maxNames {
		name = otherName
	}
	v, loaded := ns.m.LoadOrStore(name, new(nameCounters))
	if !loaded {
		ns.n.Add(1)
	}
	return v.(*nameCounters)
}

func (ns *names) snapshot() map[string]NameStats {
	out := map[string]NameStats{}
	ns.m.Range(func(k, v any) bool {
		c := v.(*nameCounters)
		out[k.(string)] = NameStats{
			Queries: c.queries.Load(), FreshHits: c.freshHits.Load(), StaleHits: c.staleHits.Load(),
			NegativeHits: c.negHits.Load(), Misses: c.misses.Load(), OriginExecutions: c.originExecs.Load(),
			OriginErrors: c.originErrors.Load(), OriginDuration: c.originDuration.snapshot(),
		}
		return true
	})
	return out
}
