package fresh_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/fresh"
)

// TestEarlyRefreshProbability: the draw refreshes with XFetch's
// probability, never more than delta·beta before soft, never in the first
// half of the fresh window, and only inside InEarlyWindow.
func TestEarlyRefreshProbability(t *testing.T) {
	now := time.Unix(1000, 0)
	soft := now.Add(time.Second)
	filled := now.Add(-time.Hour)
	rate := func(beta float64) float64 {
		hits := 0
		const n = 20000
		for i := range n {
			u := (float64(i) + 0.5) / n // u spread evenly over (0, 1)
			if fresh.EarlyRefresh(now, filled, soft, time.Second, beta, u) {
				hits++
			}
		}
		return float64(hits) / n
	}
	// P = P(−Δ·β·ln u ≥ soft−now) = exp(−(soft−now)/(Δ·β)), and 0 when
	// soft−now > Δ·β (the lead is capped there).
	for _, tc := range []struct{ beta, want float64 }{{1, math.Exp(-1)}, {0.5, 0}, {100, math.Exp(-0.01)}} {
		if got := rate(tc.beta); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("beta %v: rate %.3f, want %.3f", tc.beta, got, tc.want)
		}
	}
	if rate(0) != 0 || rate(-1) != 0 {
		t.Error("beta 0 must disable early refresh")
	}
	if !fresh.EarlyRefresh(soft, filled, soft, time.Second, 1, 0.999999) {
		t.Error("at the soft deadline the refresh is due")
	}
	if fresh.EarlyRefresh(now, now.Add(-time.Second/2), now.Add(time.Second), time.Hour, 1e9, 0.5) {
		t.Error("an early refresh in the first half of the fresh window")
	}
	// However many readers draw, none refreshes more than Δ·β early.
	delta := 20 * time.Millisecond
	for _, beta := range []float64{0.5, 1, 2} {
		lead := time.Duration(float64(delta) * beta)
		if fresh.EarlyRefresh(soft.Add(-lead-time.Microsecond), filled, soft, delta, beta, math.SmallestNonzeroFloat64) {
			t.Errorf("beta %v: a refresh more than delta·beta before the soft deadline", beta)
		}
		if !fresh.EarlyRefresh(soft.Add(-lead+time.Microsecond), filled, soft, delta, beta, 1e-9) {
			t.Errorf("beta %v: no refresh within delta·beta of the soft deadline for a low draw", beta)
		}
	}
	// A hit outside the window draws nothing: no draw would refresh there
	// (held against the formula written out).
	formula := func(now, filled, soft time.Time, delta time.Duration, beta, u float64) bool {
		if beta <= 0 || delta <= 0 || now.Before(filled.Add(soft.Sub(filled)/2)) {
			return false
		}
		lead := float64(delta) * beta
		gap := min(-lead*math.Log(max(u, math.SmallestNonzeroFloat64)), lead)
		return !now.Add(time.Duration(gap)).Before(soft)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		fill := soft.Add(-1 - time.Duration(r.Int64N(int64(10*time.Second))))
		at := soft.Add(time.Duration(r.Int64N(int64(4*time.Second))) - 3*time.Second)
		d := time.Duration(r.Int64N(int64(2 * time.Second)))
		b := r.Float64() * 3
		for _, u := range []float64{0, math.SmallestNonzeroFloat64, 1e-300, r.Float64(), 1} {
			want := formula(at, fill, soft, d, b, u)
			if fresh.EarlyRefresh(at, fill, soft, d, b, u) != want || want && !fresh.InEarlyWindow(at, fill, soft, d, b) {
				t.Fatalf("at soft%+v, filled soft%+v, delta %v, beta %v, u %v: the formula says %v, the window %v",
					at.Sub(soft), fill.Sub(soft), d, b, u, want, fresh.InEarlyWindow(at, fill, soft, d, b))
			}
		}
	}
}

// TestJitterBounds: the default spread is ±10%, a negative Jitter turns
// it off, and a fraction spreads by that much.
func TestJitterBounds(t *testing.T) {
	now := time.Unix(0, 0)
	p := fresh.Windows{Soft: 100 * time.Second, Hard: 200 * time.Second}
	deadlines := func() (soft, hard time.Time) {
		d := fresh.At(now, p, false, fresh.Draw())
		return d.Soft, d.Hard
	}
	var minS, maxS time.Duration = time.Hour, 0
	for range 2000 {
		soft, hard := deadlines()
		d := soft.Sub(now)
		minS, maxS = min(minS, d), max(maxS, d)
		if d < 90*time.Second || d > 110*time.Second || hard.Before(soft) {
			t.Fatalf("soft %v hard %v outside ±10%%", d, hard.Sub(now))
		}
	}
	if maxS-minS < 10*time.Second {
		t.Errorf("no spread: [%v, %v]", minS, maxS)
	}
	p.Jitter = -1
	if soft, hard := deadlines(); soft.Sub(now) != 100*time.Second || hard.Sub(now) != 200*time.Second {
		t.Error("jitter disabled still spread")
	}
	p.Jitter = 0.5
	for range 1000 {
		soft, _ := deadlines()
		if d := soft.Sub(now); d < 50*time.Second || d > 150*time.Second {
			t.Fatal(d)
		}
	}
}

// TestAtEmptyAndMaxStale: an empty result lives Neg (or Soft) with no
// stale window; Last is Hard plus MaxStale (Hard itself when zero, none
// when negative); a Hard below Soft counts as Soft.
func TestAtEmptyAndMaxStale(t *testing.T) {
	t0 := time.Unix(100, 0)
	w := fresh.Windows{Soft: 10 * time.Second, Hard: 30 * time.Second, Neg: 2 * time.Second, Jitter: -1}
	for _, c := range []struct {
		name             string
		w                fresh.Windows
		empty            bool
		soft, hard, last time.Duration
	}{
		{"plain", w, false, 10 * time.Second, 30 * time.Second, 60 * time.Second},
		{"empty", w, true, 2 * time.Second, 2 * time.Second, 4 * time.Second},
		{"empty without Neg", fresh.Windows{Soft: 10 * time.Second, Hard: 30 * time.Second, Jitter: -1}, true, 10 * time.Second, 10 * time.Second, 20 * time.Second},
		{"MaxStale", fresh.Windows{Soft: 10 * time.Second, Hard: 30 * time.Second, Jitter: -1, MaxStale: 5 * time.Second}, false, 10 * time.Second, 30 * time.Second, 35 * time.Second},
		{"no stale-if-error", fresh.Windows{Soft: 10 * time.Second, Hard: 30 * time.Second, Jitter: -1, MaxStale: -1}, false, 10 * time.Second, 30 * time.Second, 30 * time.Second},
		{"hard below soft", fresh.Windows{Soft: 10 * time.Second, Hard: time.Second, Jitter: -1}, false, 10 * time.Second, 10 * time.Second, 20 * time.Second},
	} {
		d := fresh.At(t0, c.w, c.empty, 0.7)
		if d.Soft.Sub(t0) != c.soft || d.Hard.Sub(t0) != c.hard || d.Last.Sub(t0) != c.last {
			t.Errorf("%s: %v %v %v, want %v %v %v", c.name, d.Soft.Sub(t0), d.Hard.Sub(t0), d.Last.Sub(t0), c.soft, c.hard, c.last)
		}
		atSoft := fresh.Stale
		if d.Soft.Equal(d.Hard) {
			atSoft = fresh.Expired // no stale window
		}
		if d.At(t0) != fresh.Fresh || d.At(d.Soft) != atSoft || d.At(d.Hard) != fresh.Expired {
			t.Errorf("%s: At misjudges %+v", c.name, d)
		}
	}
}

// TestWithin: no deadline passes the entry's life.
func TestWithin(t *testing.T) {
	t0 := time.Unix(100, 0)
	d := fresh.Deadlines{Soft: t0.Add(time.Second), Hard: t0.Add(2 * time.Second), Last: t0.Add(3 * time.Second)}
	if got := d.Within(t0.Add(time.Hour)); got != d {
		t.Errorf("a longer life changed %+v to %+v", d, got)
	}
	life := t0.Add(1500 * time.Millisecond)
	if got := d.Within(life); !got.Soft.Equal(d.Soft) || !got.Hard.Equal(life) || !got.Last.Equal(life) {
		t.Errorf("within %v: %+v", life, got)
	}
}

// TestBackoffBounds: retry n waits at most min(cap, base·2ⁿ⁻¹), never
// less than zero, however large n grows.
func TestBackoffBounds(t *testing.T) {
	base, limit := 100*time.Millisecond, 30*time.Second
	for n := int32(1); n < 80; n++ {
		bound := limit
		if n < 10 {
			bound = min(limit, base<<(n-1))
		}
		var top time.Duration
		for range 200 {
			d := fresh.Backoff(n, base, limit)
			if d < 0 || d > bound {
				t.Fatalf("retry %d waited %v, outside [0, %v]", n, d, bound)
			}
			top = max(top, d)
		}
		if top < bound/2 {
			t.Errorf("retry %d: the longest of 200 waits is %v of %v: no full jitter", n, top, bound)
		}
	}
}
