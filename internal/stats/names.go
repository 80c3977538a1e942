package stats

import (
	"sync"
	"sync/atomic"
)

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

// NameCounters are the live counters of one policy name, counted by the
// caller.
type NameCounters struct {
	Queries, FreshHits, StaleHits, NegHits, Misses, OriginExecs, OriginErrors atomic.Uint64
	OriginDuration                                                            Durations
}

const (
	// MaxNames bounds the policy names counted apart; later names count
	// under OtherName.
	MaxNames  = 1000
	OtherName = "_other"
)

// Names are the counters of the policy names, at most MaxNames apart; its
// zero value is ready to use and its methods are safe for concurrent use.
type Names struct {
	m sync.Map // string → *NameCounters
	n atomic.Int64
}

// Of returns the counters of name (OtherName's past MaxNames names), or
// nil for the empty name.
func (ns *Names) Of(name string) *NameCounters {
	if name == "" {
		return nil
	}
	if v, ok := ns.m.Load(name); ok {
		return v.(*NameCounters)
	}
	if ns.n.Load() >= MaxNames {
		name = OtherName
	}
	v, loaded := ns.m.LoadOrStore(name, new(NameCounters))
	if !loaded {
		ns.n.Add(1)
	}
	return v.(*NameCounters)
}

// Snapshot returns the counters of every name counted so far.
func (ns *Names) Snapshot() map[string]NameStats {
	out := map[string]NameStats{}
	ns.m.Range(func(k, v any) bool {
		c := v.(*NameCounters)
		out[k.(string)] = NameStats{
			Queries: c.Queries.Load(), FreshHits: c.FreshHits.Load(), StaleHits: c.StaleHits.Load(),
			NegativeHits: c.NegHits.Load(), Misses: c.Misses.Load(), OriginExecutions: c.OriginExecs.Load(),
			OriginErrors: c.OriginErrors.Load(), OriginDuration: c.OriginDuration.Snapshot(),
		}
		return true
	})
	return out
}
