package stats

import (
	"sync"
	"time"
)

// The recent load of a Shield, for the live page: its cumulative counters
// sampled about once a second, for the last five minutes, from which the
// page draws rates per second.
//
// Samples come from a ticker, so that the series has no holes while nobody
// looks, and from each request to the page, so that it is current. The
// ticker starts with Start (a Shield whose page is never served runs no
// goroutine for it) and stops with Close. A sample is kept only if it is at
// least LoadEvery after the last one kept, by the times its caller gives;
// rates divide by the real gap between two samples, so a late tick or a
// skipped one never distorts them.

const (
	// LoadSamples is how many samples a LoadSeries keeps: one a second or
	// fewer, so at least five minutes.
	LoadSamples = 301
	// LoadWindow is how far back Points reaches from the last sample.
	LoadWindow = 5 * time.Minute
	// LoadEvery is the ticker's period and the least gap between samples.
	LoadEvery = time.Second
)

// LoadSample is a Shield's cumulative counters at one moment.
type LoadSample struct {
	At                                                  time.Time
	Queries, Hits, Misses, Followers, Origins, Bypassed uint64
}

// LoadSeries is a bounded ring of LoadSamples (LoadSamples of them) and the
// ticker that takes them. Its zero value is empty and not ticking; its
// methods are safe for concurrent use.
type LoadSeries struct {
	mu      sync.Mutex
	ring    [LoadSamples]LoadSample
	n       int // samples held
	next    int // where the next one goes
	ticking bool
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// Add keeps x unless it comes less than LoadEvery after the last sample;
// past LoadSamples, it takes the place of the oldest.
func (ls *LoadSeries) Add(x LoadSample) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.n > 0 {
		last := ls.ring[(ls.next+LoadSamples-1)%LoadSamples]
		if x.At.Sub(last.At) < LoadEvery {
			return
		}
	}
	ls.ring[ls.next] = x
	ls.next = (ls.next + 1) % LoadSamples
	ls.n = min(ls.n+1, LoadSamples)
}

// Len is the number of samples held, at most LoadSamples.
func (ls *LoadSeries) Len() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.n
}

// Start calls sample once every LoadEvery on a goroutine of its own (sample
// is to Add a sample), unless it ticks already or Close was called.
func (ls *LoadSeries) Start(sample func()) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ticking || ls.closed {
		return
	}
	ls.ticking = true
	ls.stop, ls.done = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(LoadEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				sample()
			}
		}
	}(ls.stop, ls.done)
}

// Ticking reports whether the ticker Start began runs.
func (ls *LoadSeries) Ticking() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.ticking
}

// Close stops the ticking for good (Start does nothing after it) and waits
// for its goroutine to end; Add and Points still work.
func (ls *LoadSeries) Close() {
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

// LoadPoint is the load between two samples, in events per second, at the
// time of the later one.
type LoadPoint struct {
	At        time.Time `json:"t"`
	Seconds   float64   `json:"seconds"` // the gap it spans
	Queries   float64   `json:"queries"`
	Hits      float64   `json:"hits"` // fresh, stale and negative
	Misses    float64   `json:"misses"`
	Followers float64   `json:"followers"`
	Origins   float64   `json:"origin_executions"`
	Bypassed  float64   `json:"bypassed"`
}

// Points returns the load between consecutive samples within LoadWindow
// of the last one, oldest first; empty (not nil) with fewer than two
// samples.
func (ls *LoadSeries) Points() []LoadPoint {
	ls.mu.Lock()
	samples := make([]LoadSample, 0, ls.n)
	for i := range ls.n {
		samples = append(samples, ls.ring[(ls.next+LoadSamples-ls.n+i)%LoadSamples])
	}
	ls.mu.Unlock()
	out := []LoadPoint{}
	if len(samples) < 2 {
		return out
	}
	from := samples[len(samples)-1].At.Add(-LoadWindow)
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if a.At.Before(from) {
			continue
		}
		dt := b.At.Sub(a.At).Seconds()
		rate := func(x, y uint64) float64 { return float64(y-x) / dt }
		out = append(out, LoadPoint{
			At: b.At, Seconds: dt,
			Queries: rate(a.Queries, b.Queries), Hits: rate(a.Hits, b.Hits), Misses: rate(a.Misses, b.Misses),
			Followers: rate(a.Followers, b.Followers), Origins: rate(a.Origins, b.Origins),
			Bypassed: rate(a.Bypassed, b.Bypassed),
		})
	}
	return out
}
