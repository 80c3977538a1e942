package sqlflight

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Histogram is a cumulative distribution of durations in seconds:
// Counts[i] observations were ≤ Bounds[i] and above the bound before it;
// the last count is the observations above every bound.
type Histogram struct {
	Bounds []float64
	Counts []uint64 // len(Bounds)+1
	Sum    float64  // seconds
	Count  uint64
}

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

// histogramBounds are the upper bounds, in seconds, of the duration buckets.
var histogramBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// histogram is the lock-free form of Histogram.
type histogram struct {
	counts [15]atomic.Uint64 // len(histogramBounds)+1
	sumNs  atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(histogramBounds) && sec > histogramBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Bounds: histogramBounds, Counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		out.Counts[i] = h.counts[i].Load()
		out.Count += out.Counts[i]
	}
	out.Sum = float64(h.sumNs.Load()) / float64(time.Second)
	return out
}

// Quantile estimates the q-quantile (0 < q ≤ 1) in seconds from the
// buckets, taking each bucket's upper bound; +Inf if it falls above the
// last bound, 0 without observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.Count)))
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			if i < len(h.Bounds) {
				return h.Bounds[i]
			}
			return math.Inf(1)
		}
	}
	return math.Inf(1)
}

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
