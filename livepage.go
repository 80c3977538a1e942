package sqlflight

import (
	"net/http"
	"time"

	"github.com/sqlflight/sqlflight/internal/livepage"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// The live page: a Shield's statistics, statements, load and advice, as
// JSON and as an HTML page that redraws itself from the JSON. The page is
// internal/livepage's; this file is its Source over a Shield, and the
// recent load it charts: the Shield's cumulative counters sampled about
// once a second, for the last five minutes (stats.LoadSeries). The ticker
// starts with the first request to the page and stops with Shield.Close; a
// sample is timed by the Shield's Clock.

// Handler returns the live page of s, an http.Handler to mount on a debug
// or admin listener, as net/http/pprof and expvar are:
//
//	mux.Handle("/debug/sqlflight/", http.StripPrefix("/debug/sqlflight", sqlflight.Handler(shield)))
//
// A GET of a path whose last element is "json" (/debug/sqlflight/json)
// returns the page's data as JSON (see docs/operations.md, "Live page"); any other
// path returns the HTML page, which draws the same from the JSON every two
// seconds, without any external resource. The query parameter top=N (1 to
// 256, default 20) sets how many statements are listed.
//
// The page shows the normalized text of the statements and their hottest
// keys (HotKey), but not the application's values: every argument of a hot
// key, and every literal of a statement's text (strings, numbers,
// comments), shows as a keyed hash, as does the fingerprint of a text that
// holds literals (an unkeyed hash of the text, it would let a literal be
// guessed). HandlerWith and LivePageOptions.ShowArguments show them as they
// are. Even so it shows the shapes of the application's statements and the
// Shield's state: mount it only where those who run the service may look,
// never on a public listener.
//
// The first request starts sampling s's load once a second (the chart of
// the last five minutes); Shield.Close stops it.
func Handler(s *Shield) http.Handler { return HandlerWith(s, LivePageOptions{}) }

// pageSource is the live page's view of s (livepage.Source): its
// statement table, its load series, which the first request starts
// sampling once a second (unless s is closed) and every request samples by
// s's Clock, its Stats and its Advice.
func pageSource(s *Shield) livepage.Parts {
	sample := func(now time.Time) {
		c := &s.stats
		s.load.Add(stats.LoadSample{
			At:        now,
			Queries:   c.queries.Load(),
			Hits:      c.freshHits.Load() + c.staleHits.Load() + c.negHits.Load(),
			Misses:    c.misses.Load(),
			Followers: c.followers.Load(),
			Origins:   c.originExecs.Load(),
			Bypassed:  c.bypassed.Total(),
		})
	}
	return livepage.Parts{
		SampleNow: func() time.Time {
			s.load.Start(func() { sample(s.opts.Clock.Now()) })
			now := s.opts.Clock.Now()
			sample(now)
			return now
		},
		StartedAt: s.started,
		Snapshot: func() livepage.Stats {
			st := s.Stats()
			out := livepage.Stats{
				Doc:     st,
				Queries: st.Queries, Bypassed: st.Bypassed, Flights: st.Flights, Followers: st.Followers,
				OriginExecutions: st.OriginExecutions,
				Batches:          st.Batches, BatchedReads: st.BatchedReads, BatchSaved: st.BatchSaved, BatchLargest: st.BatchLargest,
				FreshHits: st.FreshHits, StaleHits: st.StaleHits, NegativeHits: st.NegativeHits, Misses: st.Misses,
				CacheEntries: st.CacheEntries,
				BreakerState: st.BreakerState, SharedState: st.SharedState, FeedState: st.FeedState,
				SharedTrusted: st.SharedTrusted,
				Breakers:      make(map[string]livepage.Breaker, len(st.Breakers)),
			}
			for name, b := range st.Breakers {
				out.Breakers[name] = livepage.Breaker(b)
			}
			return out
		},
		Series: &s.load,
		Advise: s.Advice,
		Table:  &s.statements,
	}
}
