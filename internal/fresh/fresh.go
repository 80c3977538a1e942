// Package fresh is the freshness arithmetic of cached results: when an
// entry filled under a policy turns stale, expires, and stops being served
// even when the origin fails; whether a hit refreshes early; and how long a
// failed refresh waits before the next.
//
// Everything is a pure function of its arguments (the random draws are
// arguments too, but for Draw and Backoff, which draw themselves), so a
// reader sees the same deadlines on every hit of an entry, and tests need
// no clock:
//
//   - At spreads a policy's windows by the entry's jitter draw (soft and
//     hard move the same way, so hard never comes before soft) and gives
//     the three deadlines of an entry filled at a moment; an empty result
//     lives its Neg window (or Soft), with no stale window.
//   - EarlyRefresh is XFetch with its lead capped at delta·beta, never in the
//     first half of the fresh window.
//   - Backoff is full-jitter exponential back-off.
package fresh

import (
	"math"
	"math/rand/v2"
	"time"
)

// Freshness is what an entry is at a moment, to one reader.
type Freshness int

const (
	Fresh   Freshness = iota // before soft: replay, no database work
	Stale                    // soft ≤ now < hard: replay, and refresh once in the background
	Expired                  // hard ≤ now: fetch in the foreground (kept for stale-if-error until last)
)

// Deadlines are an entry's deadlines as one reader sees them: fresh until
// Soft, served stale until Hard, served when the origin fails until Last.
type Deadlines struct{ Soft, Hard, Last time.Time }

// At returns what the entry is at now.
func (d Deadlines) At(now time.Time) Freshness {
	switch {
	case now.Before(d.Soft):
		return Fresh
	case now.Before(d.Hard):
		return Stale
	}
	return Expired
}

// Within returns d with every deadline at most last (an entry's life in
// the store bounds what any reader may make of it).
func (d Deadlines) Within(last time.Time) Deadlines {
	return Deadlines{Soft: earlier(d.Soft, last), Hard: earlier(d.Hard, last), Last: earlier(d.Last, last)}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Windows are what of a policy the deadlines follow from. Jitter is the
// fraction soft and hard are spread by (0: the default 10%; negative:
// none). MaxStale is how long past hard an entry is served when the origin
// fails (0: as long as hard; negative: not at all).
type Windows struct {
	Soft, Hard, Neg time.Duration
	Jitter          float64
	MaxStale        time.Duration
}

// DefaultJitter is the fraction deadlines are spread by when a policy says
// nothing.
const DefaultJitter = 0.10

// At returns the deadlines of an entry filled at filled under w whose
// jitter draw is u (in [-1, 1]): soft and hard move by w's jitter fraction
// times u, both the same way, so hard stays at or after soft. A Hard below
// Soft counts as Soft. Empty results live w.Neg (or w.Soft), with no stale
// window.
func At(filled time.Time, w Windows, empty bool, u float64) Deadlines {
	softD, hardD := w.Soft, w.Hard
	if hardD < softD {
		hardD = softD
	}
	if empty {
		softD = w.Neg
		if softD <= 0 {
			softD = w.Soft
		}
		hardD = softD
	}
	j := w.Jitter
	switch {
	case j == 0:
		j = DefaultJitter
	case j < 0:
		j = 0
	}
	softD, hardD = Spread(softD, j, u), Spread(hardD, j, u)
	if hardD < softD {
		hardD = softD
	}
	maxStale := w.MaxStale
	switch {
	case maxStale == 0:
		maxStale = hardD
	case maxStale < 0:
		maxStale = 0
	}
	return Deadlines{Soft: filled.Add(softD), Hard: filled.Add(hardD), Last: filled.Add(hardD + maxStale)}
}

// Draw is an entry's jitter draw: uniform in [-1, 1).
func Draw() float64 { return 2*rand.Float64() - 1 }

// Spread returns d moved by the fraction j·u (u in [-1, 1]); d itself when
// j or d is not positive.
func Spread(d time.Duration, j, u float64) time.Duration {
	if j <= 0 || d <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + j*u))
}

// EarlyRefresh is XFetch (Vattani, Chierichetti, Lowenstein, VLDB 2015):
// refresh before the soft deadline with a probability that grows as it
// nears, faster for results that took long (delta) to compute:
// now − delta·beta·ln(u) ≥ soft, u uniform in (0, 1] (u ≤ 0 counts as the
// smallest positive float). Every hit draws, so at thousands of hits a
// second the uncapped draw would come about delta·beta·ln(rate·delta)
// early: with hundreds of readers, several times the time the refresh
// takes, and each refresh would shorten the period, multiplying the origin
// load that stale-while-revalidate already keeps off the database. So the
// lead is capped at delta·beta: with beta ≤ 1 the refreshed result arrives
// about when the old one turns stale, and the refreshes of a hot key stay
// at one per soft period. Nor does it come in the first half of the fresh
// window. It is false whenever InEarlyWindow is.
func EarlyRefresh(now, filled, soft time.Time, delta time.Duration, beta, u float64) bool {
	if !InEarlyWindow(now, filled, soft, delta, beta) {
		return false
	}
	if u <= 0 {
		u = math.SmallestNonzeroFloat64
	}
	lead := float64(delta) * beta
	gap := min(-lead*math.Log(u), lead)
	return !now.Add(time.Duration(gap)).Before(soft)
}

// InEarlyWindow reports whether EarlyRefresh may say yes at now, whatever
// it draws: beta and delta positive, in the second half of the fresh
// window, within the capped lead of soft. A hit outside it need not draw.
func InEarlyWindow(now, filled, soft time.Time, delta time.Duration, beta float64) bool {
	return beta > 0 && delta > 0 && !now.Before(filled.Add(soft.Sub(filled)/2)) &&
		!now.Add(time.Duration(float64(delta)*beta)).Before(soft)
}

// Backoff returns the full-jitter delay before retry number n (1-based) of
// a failed refresh: uniform in [0, min(cap, base·2ⁿ⁻¹)].
func Backoff(n int32, base, cap time.Duration) time.Duration {
	d := cap
	if n < 31 {
		if b := base << (n - 1); b > 0 && b < cap {
			d = b
		}
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}
