package stats_test

import (
	"math"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// Durations counts each observation in the first bucket whose bound it
// does not exceed (the last bucket: above every bound), and Quantile
// answers bucket bounds: 0 without observations, +Inf above the last bound.
func TestDurations(t *testing.T) {
	var d stats.Durations
	if h := d.Snapshot(); h.Count != 0 || h.Quantile(0.5) != 0 || len(h.Counts) != len(stats.Bounds)+1 {
		t.Fatalf("empty snapshot %+v", h)
	}
	d.Observe(time.Millisecond)        // ≤ 0.001: bucket 1
	d.Observe(1500 * time.Microsecond) // ≤ 0.0025: bucket 2
	d.Observe(3 * time.Millisecond)    // bucket 3
	d.Observe(time.Minute)             // above 10 s
	h := d.Snapshot()
	if h.Count != 4 || h.Counts[1] != 1 || h.Counts[2] != 1 || h.Counts[3] != 1 || h.Counts[len(h.Counts)-1] != 1 {
		t.Errorf("counts %v", h.Counts)
	}
	if math.Abs(h.Sum-60.0055) > 1e-9 {
		t.Errorf("sum %v, want 60.0055", h.Sum)
	}
	if q := h.Quantile(0.25); q != 0.001 {
		t.Errorf("p25 %v, want 0.001", q)
	}
	if q := h.Quantile(0.5); q != 0.0025 {
		t.Errorf("p50 %v, want 0.0025", q)
	}
	if q := h.Quantile(1); !math.IsInf(q, 1) {
		t.Errorf("p100 %v, want +Inf", q)
	}
}
