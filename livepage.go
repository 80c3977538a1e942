package sqlflight

import (
	"net/http"
	"time"

	"github.com/sqlflight/sqlflight/internal/livepage"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// The live page: a Shield's statistics, statements, load and advice, as
// JSON and as an HTML page that redraws itself from the JSON. The page is
// internal/livepage's; this file is its Source over a Shield.

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

// pageSource is the live page's view of a Shield (livepage.Source).
type pageSource struct{ s *Shield }

// Sample starts the load's sampling unless it runs or s is closed, and
// samples it now, by s's Clock.
func (p pageSource) Sample() time.Time {
	s := p.s
	s.startLoad()
	now := s.opts.Clock.Now()
	s.sampleLoad(now)
	return now
}

// Started is when s was made.
func (p pageSource) Started() time.Time { return p.s.started }

// Stats is one Shield.Stats, whole and in the figures the HTML prints.
func (p pageSource) Stats() livepage.Stats {
	st := p.s.Stats()
	out := livepage.Stats{
		Doc:     st,
		Queries: st.Queries, Bypassed: st.Bypassed, Flights: st.Flights, Followers: st.Followers,
		OriginExecutions: st.OriginExecutions,
		FreshHits:        st.FreshHits, StaleHits: st.StaleHits, NegativeHits: st.NegativeHits, Misses: st.Misses,
		CacheEntries: st.CacheEntries,
		BreakerState: st.BreakerState, SharedState: st.SharedState, FeedState: st.FeedState,
		SharedTrusted: st.SharedTrusted,
		Breakers:      make(map[string]livepage.Breaker, len(st.Breakers)),
	}
	for name, b := range st.Breakers {
		out.Breakers[name] = livepage.Breaker(b)
	}
	return out
}

// Load is the load series' points.
func (p pageSource) Load() []stats.LoadPoint { return p.s.load.Points() }

// Advice is Shield.Advice.
func (p pageSource) Advice() []stats.Advice { return p.s.Advice() }

// Statements are the statement table's, each exported with the
// histograms of its paths.
func (p pageSource) Statements() []livepage.Statement {
	sts := p.s.statements.Snapshot()
	out := make([]livepage.Statement, len(sts))
	for i, st := range sts {
		out[i].Stats = st.Export()
		out[i].Latencies = make([]stats.Histogram, len(stats.PathNames))
		for j := range stats.PathNames {
			out[i].Latencies[j] = st.Latency(j)
		}
	}
	return out
}

// ValueKey is the statement table's key of the page's hashes.
func (p pageSource) ValueKey() []byte { return p.s.statements.ValueKey() }
