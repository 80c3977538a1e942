package stats_test

import (
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// t0 is the tests' time zero.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The load series keeps one sample a second at most, bounded, and reports
// rates between samples over the real gap.
func TestLoadSeries(t *testing.T) {
	var ls stats.LoadSeries
	ls.Add(stats.LoadSample{At: t0})
	ls.Add(stats.LoadSample{At: t0.Add(500 * time.Millisecond), Origins: 99}) // too soon: dropped
	ls.Add(stats.LoadSample{At: t0.Add(2 * time.Second), Queries: 10, Hits: 6, Origins: 4, Bypassed: 2})
	ls.Add(stats.LoadSample{At: t0.Add(3 * time.Second), Queries: 13, Hits: 9, Origins: 4, Bypassed: 2})
	pts := ls.Points()
	if len(pts) != 2 || pts[0].Queries != 5 || pts[0].Hits != 3 || pts[0].Origins != 2 || pts[0].Bypassed != 1 ||
		pts[0].Seconds != 2 || pts[1].Queries != 3 || pts[1].Origins != 0 || !pts[1].At.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("points %+v", pts)
	}
	for i := range 1000 {
		ls.Add(stats.LoadSample{At: t0.Add(time.Duration(4+i) * time.Second), Queries: uint64(13 + i)})
	}
	pts = ls.Points()
	if len(pts) != int(stats.LoadWindow/time.Second) || ls.Len() != stats.LoadSamples {
		t.Fatalf("%d points from %d samples, want %d", len(pts), ls.Len(), stats.LoadWindow/time.Second)
	}
	if pts[0].Queries != 1 || !pts[len(pts)-1].At.Equal(t0.Add(1003*time.Second)) {
		t.Errorf("first %+v last %+v", pts[0], pts[len(pts)-1])
	}
}

// Points is empty, not nil, with fewer than two samples (the page's JSON
// shows [] rather than null).
func TestLoadSeriesEmpty(t *testing.T) {
	var ls stats.LoadSeries
	if pts := ls.Points(); pts == nil || len(pts) != 0 {
		t.Errorf("points %v", pts)
	}
	ls.Add(stats.LoadSample{At: t0})
	if pts := ls.Points(); pts == nil || len(pts) != 0 {
		t.Errorf("points of one sample %v", pts)
	}
}

// Start ticks once; Close stops it for good and waits for its goroutine.
func TestLoadSeriesTicker(t *testing.T) {
	var ls stats.LoadSeries
	ls.Start(func() {})
	ls.Start(func() { t.Error("a second ticker runs") })
	if !ls.Ticking() {
		t.Fatal("Start did not start the ticker")
	}
	ls.Close()
	if ls.Ticking() {
		t.Error("Close did not stop the ticker")
	}
	ls.Start(func() { t.Error("a ticker runs after Close") })
	if ls.Ticking() {
		t.Error("Start after Close started the ticker")
	}
	ls.Close() // twice: a no-op
}
