package livepage_test

import (
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/livepage"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

type clockAt time.Time

func (c clockAt) Now() time.Time { return time.Time(c) }

// Parts reads the statement table and the load series itself, with every
// path's histogram, and the rest through its funcs.
func TestParts(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	var tbl stats.Table
	r := sqlscan.Parse("SELECT a FROM t WHERE id = $1")
	st, _ := tbl.Of(r, "", clockAt(t0), stats.OutNone, func(n string) string { return "fp:" + n })
	st.Ended(stats.OutMiss, time.Now().Add(-time.Millisecond), false)
	var series stats.LoadSeries
	series.Add(stats.LoadSample{At: t0, Queries: 1})
	series.Add(stats.LoadSample{At: t0.Add(time.Second), Queries: 5})
	samples := 0
	p := livepage.Parts{
		SampleNow: func() time.Time { samples++; return t0.Add(time.Minute) },
		StartedAt: t0,
		Snapshot:  func() livepage.Stats { return livepage.Stats{Queries: 7} },
		Series:    &series,
		Advise:    func() []stats.Advice { return []stats.Advice{{Fingerprint: "x"}} },
		Table:     &tbl,
	}
	var src livepage.Source = p
	if now := src.Sample(); !now.Equal(t0.Add(time.Minute)) || samples != 1 {
		t.Errorf("Sample = %v after %d samples", now, samples)
	}
	if !src.Started().Equal(t0) || src.Stats().Queries != 7 || len(src.Advice()) != 1 {
		t.Errorf("Started %v, Stats %+v, Advice %+v", src.Started(), src.Stats(), src.Advice())
	}
	if load := src.Load(); len(load) != 1 || load[0].Queries != 4 {
		t.Errorf("Load = %+v", load)
	}
	sts := src.Statements()
	if len(sts) != 1 || sts[0].Stats.Fingerprint != "fp:"+r.Normalized || len(sts[0].Latencies) != len(stats.PathNames) {
		t.Fatalf("Statements = %+v", sts)
	}
	var timed uint64
	for _, h := range sts[0].Latencies {
		timed += h.Count
	}
	if timed != 1 {
		t.Errorf("%d timed calls in the histograms, want 1", timed)
	}
	if k := src.ValueKey(); len(k) == 0 || string(k) != string(tbl.ValueKey()) {
		t.Errorf("ValueKey = %x", k)
	}
}
