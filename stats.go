package sqlflight

import "github.com/sqlflight/sqlflight/internal/stats"

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

// nameCounters are the live counters of one policy name.
type nameCounters = stats.NameCounters
