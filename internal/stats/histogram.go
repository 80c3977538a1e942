package stats

import (
	"math"
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

// Bounds are the upper bounds, in seconds, of the duration buckets of every
// Durations (shared: callers must not change them).
var Bounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Durations is the lock-free form of Histogram; its zero value is empty
// and ready to use.
type Durations struct {
	counts [15]atomic.Uint64 // len(Bounds)+1
	sumNs  atomic.Int64
}

// Observe counts d in its bucket (a negative d in the first) and adds it
// to the sum.
func (h *Durations) Observe(d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(Bounds) && sec > Bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Snapshot returns the observations so far, each bucket read with an
// atomic load (Count is the sum of the counts read).
func (h *Durations) Snapshot() Histogram {
	out := Histogram{Bounds: Bounds, Counts: make([]uint64, len(h.counts))}
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
