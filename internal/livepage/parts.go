package livepage

import (
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// Parts is a Source made of a Shield's parts: its statement table and load
// series are read here, the rest through its funcs. Every field must be
// set; each func must be safe for concurrent use.
type Parts struct {
	// SampleNow is Source.Sample.
	SampleNow func() time.Time
	// StartedAt is when the Shield was made, by its clock.
	StartedAt time.Time
	// Snapshot is Source.Stats.
	Snapshot func() Stats
	// Series is the Shield's load series.
	Series *stats.LoadSeries
	// Advise is Source.Advice.
	Advise func() []stats.Advice
	// Table is the Shield's statement table.
	Table *stats.Table
}

// Sample calls SampleNow.
func (p Parts) Sample() time.Time { return p.SampleNow() }

// Started returns StartedAt.
func (p Parts) Started() time.Time { return p.StartedAt }

// Stats calls Snapshot.
func (p Parts) Stats() Stats { return p.Snapshot() }

// Load returns the series' points.
func (p Parts) Load() []stats.LoadPoint { return p.Series.Points() }

// Advice calls Advise.
func (p Parts) Advice() []stats.Advice { return p.Advise() }

// Statements exports every statement of the table, each with the
// histograms of its paths.
func (p Parts) Statements() []Statement {
	sts := p.Table.Snapshot()
	out := make([]Statement, len(sts))
	for i, st := range sts {
		out[i].Stats = st.Export()
		out[i].Latencies = make([]stats.Histogram, len(stats.PathNames))
		for j := range stats.PathNames {
			out[i].Latencies[j] = st.Latency(j)
		}
	}
	return out
}

// ValueKey is the table's key of the page's hashes.
func (p Parts) ValueKey() []byte { return p.Table.ValueKey() }
