package sqlflight

import (
	"sync"
	"time"
)

// The recent load of a Shield, for the live page (livepage.go): its
// cumulative counters sampled about once a second, for the last five
// minutes, from which the page draws rates per second.
//
// Samples come from a ticker, so that the series has no holes while nobody
// looks, and from each request to the page, so that it is current. The
// ticker starts with the first request (a Shield whose page is never
// served runs no goroutine for it) and stops with Shield.Close. A sample is
// timed by the Shield's Clock and kept only if it is at least a second
// after the last one kept; rates divide by the real gap between two
// samples, so a late tick or a skipped one never distorts them.

const (
	// loadSamples is how many samples the series keeps: one a second or
	// fewer, so at least five minutes.
	loadSamples = 301
	// loadWindow is how far back the series reaches from its last sample.
	loadWindow = 5 * time.Minute
	// loadEvery is the ticker's period and the least gap between samples.
	loadEvery = time.Second
)

// loadSample is a Shield's cumulative counters at one moment.
type loadSample struct {
	at                                                  time.Time
	queries, hits, misses, followers, origins, bypassed uint64
}

// loadSeries is a bounded ring of samples.
type loadSeries struct {
	mu      sync.Mutex
	ring    [loadSamples]loadSample
	n       int // samples held
	next    int // where the next one goes
	ticking bool
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// sampleLoad reads s's counters at now into its series.
func (s *Shield) sampleLoad(now time.Time) {
	c := &s.stats
	x := loadSample{
		at:        now,
		queries:   c.queries.Load(),
		hits:      c.freshHits.Load() + c.staleHits.Load() + c.negHits.Load(),
		misses:    c.misses.Load(),
		followers: c.followers.Load(),
		origins:   c.originExecs.Load(),
		bypassed:  c.bypassed.Load(),
	}
	s.load.add(x)
}

// add keeps x unless it comes less than loadEvery after the last sample.
func (ls *loadSeries) add(x loadSample) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.n > 0 {
		last := ls.ring[(ls.next+loadSamples-1)%loadSamples]
		if x.at.Sub(last.at) < loadEvery {
			return
		}
	}
	ls.ring[ls.next] = x
	ls.next = (ls.next + 1) % loadSamples
	ls.n = min(ls.n+1, loadSamples)
}

// startLoad starts sampling s's load once a second, unless it runs
// already or s is closed.
func (s *Shield) startLoad() {
	ls := &s.load
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ticking || ls.closed {
		return
	}
	ls.ticking = true
	ls.stop, ls.done = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(loadEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.sampleLoad(s.opts.Clock.Now())
			}
		}
	}(ls.stop, ls.done)
}

// close stops the sampling for good and waits for its goroutine.
func (ls *loadSeries) close() {
	ls.mu.Lock()
	ls.closed = true
	done := ls.done
	if ls.ticking {
		close(ls.stop)
		ls.ticking = false
	}
	ls.mu.Unlock()
	if done != nil {
		<-done
	}
}

// loadPoint is the load between two samples, in events per second, at the
// time of the later one.
type loadPoint struct {
	At        time.Time `json:"t"`
	Seconds   float64   `json:"seconds"` // the gap it spans
	Queries   float64   `json:"queries"`
	Hits      float64   `json:"hits"` // fresh, stale and negative
	Misses    float64   `json:"misses"`
	Followers float64   `json:"followers"`
	Origins   float64   `json:"origin_executions"`
	Bypassed  float64   `json:"bypassed"`
}

// points returns the load between consecutive samples within loadWindow
// of the last one, oldest first.
func (ls *loadSeries) points() []loadPoint {
	ls.mu.Lock()
	samples := make([]loadSample, 0, ls.n)
	for i := range ls.n {
		samples = append(samples, ls.ring[(ls.next+loadSamples-ls.n+i)%loadSamples])
	}
	ls.mu.Unlock()
	out := []loadPoint{}
	if len(samples) < 2 {
		return out
	}
	from := samples[len(samples)-1].at.Add(-loadWindow)
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if a.at.Before(from) {
			continue
		}
		dt := b.at.Sub(a.at).Seconds()
		rate := func(x, y uint64) float64 { return float64(y-x) / dt }
		out = append(out, loadPoint{
			At: b.at, Seconds: dt,
			Queries: rate(a.queries, b.queries), Hits: rate(a.hits, b.hits), Misses: rate(a.misses, b.misses),
			Followers: rate(a.followers, b.followers), Origins: rate(a.origins, b.origins),
			Bypassed: rate(a.bypassed, b.bypassed),
		})
	}
	return out
}
