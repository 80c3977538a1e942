package sqlflight

import (
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// The recent load of a Shield, for the live page (livepage.go,
// internal/livepage): its cumulative counters sampled about once a
// second, for the last five minutes (stats.LoadSeries). The ticker starts
// with the first request to the page and stops with Shield.Close; a
// sample is timed by the Shield's Clock.

// loadSeries is a bounded ring of samples and its ticker.
type loadSeries struct{ stats.LoadSeries }

// close stops the sampling for good and waits for its goroutine.
func (ls *loadSeries) close() { ls.Close() }

// points returns the load between consecutive samples within
// stats.LoadWindow of the last one, oldest first.
func (ls *loadSeries) points() []stats.LoadPoint { return ls.Points() }

// sampleLoad reads s's counters at now into its series.
func (s *engine) sampleLoad(now time.Time) {
	c := &s.stats
	s.load.Add(stats.LoadSample{
		At:        now,
		Queries:   c.queries.Load(),
		Hits:      c.freshHits.Load() + c.staleHits.Load() + c.negHits.Load(),
		Misses:    c.misses.Load(),
		Followers: c.followers.Load(),
		Origins:   c.originExecs.Load(),
		Bypassed:  c.bypassed.Load(),
	})
}

// startLoad starts sampling s's load once a second, unless it runs
// already or s is closed.
func (s *engine) startLoad() {
	s.load.Start(func() { s.sampleLoad(s.opts.Clock.Now()) })
}
