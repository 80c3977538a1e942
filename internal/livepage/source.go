package livepage

import (
	"encoding/json"
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// Source is what the page shows of one Shield, as plain values. Its
// methods are called by many requests at once, each from its own
// goroutine: they must be safe for concurrent use. Each request calls
// Sample first, then Started, Stats, Load, Advice, Statements and, unless
// Options.ShowArguments, ValueKey, once each.
type Source interface {
	// Sample starts sampling the load once every stats.LoadEvery, unless
	// that runs already or the Shield is closed, then takes one sample and
	// returns its time by the Shield's clock: the page's time. It is the
	// only call of the page that changes anything, and it changes the
	// load series alone.
	Sample() time.Time

	// Started returns when the Shield was made, by its clock.
	Started() time.Time

	// Stats returns one snapshot of the Shield's counters.
	Stats() Stats

	// Load returns the load between consecutive samples within
	// stats.LoadWindow of the last one, oldest first; empty (or nil)
	// before two samples.
	Load() []stats.LoadPoint

	// Advice returns the advisor's advice with the application's values
	// as they are, in a slice of its own on each call: the page hashes
	// the values in place unless Options.ShowArguments. Nil when it has
	// none.
	Advice() []stats.Advice

	// Statements returns every statement counted, in any order, with the
	// application's values as they are (the page hides them); nil when
	// none is counted.
	Statements() []Statement

	// ValueKey returns the key of the page's hashes: secret, and the same
	// for as long as the Shield runs, so that one value shows as one hash
	// from request to request.
	ValueKey() []byte
}

// Stats is a snapshot of a Shield's counters: the whole of it in Doc, for
// the JSON, and the figures of it that the HTML prints, read from that
// same snapshot.
type Stats struct {
	// Doc is the whole snapshot (the root's Stats), marshaled with
	// encoding/json as the page's "stats" object, as it is: the page's
	// script and cmd/sqlflight's top read it by its Go field names. A nil
	// Doc marshals as null.
	Doc any

	Queries          uint64 // statements seen
	Bypassed         uint64 // statements sent straight to the real connection
	Flights          uint64 // shared flights started
	Followers        uint64 // callers that joined a running flight
	OriginExecutions uint64 // shared-flight queries that reached the database

	// Batches are the statements that answered the reads of many keys at
	// once, BatchedReads the reads they answered, BatchSaved the
	// statements saved, BatchLargest the most reads one answered.
	Batches, BatchedReads, BatchSaved, BatchLargest uint64

	// FreshHits, StaleHits and NegativeHits are the cache's hits, Misses
	// the cacheable reads that found no usable entry: the hit ratio.
	FreshHits, StaleHits, NegativeHits, Misses uint64

	CacheEntries int64 // results the cache holds

	BreakerState string // the worst of the scopes' breakers
	SharedState  string // the shared tier's state, "" without one
	FeedState    string // the change feed's state, "" without one

	// SharedTrusted is true when the shared tier is trusted without a
	// secret: the page shows a warning.
	SharedTrusted bool

	// Breakers are the scopes' circuit breakers, keyed by the scope's
	// label.
	Breakers map[string]Breaker
}

// MarshalJSON marshals Doc: the JSON's "stats" is the Shield's snapshot
// as a whole, not the figures the HTML prints.
func (s Stats) MarshalJSON() ([]byte, error) { return json.Marshal(s.Doc) }

// Breaker is one scope's circuit breaker, as the HTML prints it.
type Breaker struct {
	State       string // "closed", "open" or "half-open"
	Rejected    uint64 // statements of the scope refused while it was open
	Transitions uint64
}

// Statement is one statement counted, as the Source reads it.
type Statement struct {
	// Stats are its statistics (stats.Statement.Export), its hot keys
	// hottest first and with their arguments as they are.
	Stats stats.StatementStats

	// Latencies are the histograms of its sampled calls, one for each
	// path of stats.PathNames (fewer or none counts as no timed call on
	// the paths left out).
	Latencies []stats.Histogram
}
