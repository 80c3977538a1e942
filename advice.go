package sqlflight

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The advisor: which statements that run uncached would a TTL save the
// most database time on, and which TTL.

// adviceTTLs are the TTLs the advisor proposes, and the buckets of the gaps
// between two calls of one key (repeatTable).
var adviceTTLs = [...]time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
}

const (
	minAdvisedSoft = time.Second
	maxAdvisedSoft = 5 * time.Minute
	maxAdvisedHard = time.Hour
	// maxWriteTables bounds the tables whose writes are counted one by
	// one; writes to more count as writes to every table (the advice then
	// errs on the short side).
	maxWriteTables = 4096
)

// Advice is one statement the advisor would cache: it runs uncached (its
// policy coalesces only, or is off) though its verdict lets a TTL cache it.
// Durations are in seconds; the window is the Shield's life so far.
type Advice struct {
	Fingerprint string   `json:"fingerprint"`
	SQL         string   `json:"sql"`
	Name        string   `json:"name,omitempty"`
	Tables      []string `json:"tables,omitempty"`
	Policy      string   `json:"policy"` // today's: "coalesce only" or "off"

	// Annotation is what to add to the statement, e.g.
	// "/* sqlflight: soft=30s hard=5m */".
	Annotation  string  `json:"annotation"`
	SoftSeconds float64 `json:"soft_seconds"`
	HardSeconds float64 `json:"hard_seconds"`

	// WritesPerSecond are the writes through the Shield (and its change
	// feed) to the tables the statement reads, over WindowSeconds; writes
	// whose tables are unknown count for every statement.
	WritesPerSecond float64 `json:"writes_per_second"`
	WindowSeconds   float64 `json:"window_seconds"`

	// Of the Executions (calls that reached the database), Repeats asked
	// for a key already asked for at most Soft before: under the proposed
	// policy they would have been cache hits. SavedSeconds is Repeats ×
	// MeanOriginSeconds, the database time the policy would have saved.
	Executions        uint64  `json:"executions"`
	Repeats           uint64  `json:"repeats"`
	RepeatRate        float64 `json:"repeat_rate"`
	MeanOriginSeconds float64 `json:"mean_origin_seconds"`
	SavedSeconds      float64 `json:"saved_seconds"`
}

// Advice ranks the statements s counts that run uncached although they
// could be cached, by the database time a TTL would have saved in the
// window observed (Advice.SavedSeconds), and proposes each one's
// annotation. The rule (docs/operations.md, "Per-statement statistics and the
// advisor"): soft is a tenth of the mean time between writes to the
// statement's tables, rounded down to a step of adviceTTLs and kept within
// 1s and 5m (5m when its tables see no write); hard is ten times soft, at
// most 1h. Statements that would have saved nothing are left out.
func (s *Shield) Advice() []Advice {
	now := s.opts.Clock.Now()
	window := now.Sub(s.started)
	if window <= 0 {
		window = time.Nanosecond
	}
	var out []Advice
	for _, st := range s.statements.snapshot() {
		if a, ok := s.advise(st, window); ok {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b Advice) int {
		switch {
		case a.SavedSeconds != b.SavedSeconds:
			if a.SavedSeconds > b.SavedSeconds {
				return -1
			}
			return 1
		case a.Repeats != b.Repeats:
			if a.Repeats > b.Repeats {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Fingerprint, b.Fingerprint)
	})
	return out
}

// advise proposes a policy for st, if it runs uncached though it could be
// cached and a TTL would have saved some of its executions.
func (s *Shield) advise(st *stmtStats, window time.Duration) (Advice, bool) {
	p := st.plan.Load()
	rt := st.repeats.Load()
	if p == nil || rt == nil || !p.cacheable || p.cache || p.noCache || (p.reason != "" && p.reason != bypassPolicy) {
		return Advice{}, false
	}
	writes := s.writes.to(p.tables, p.known)
	soft, hard := advisedTTL(window, writes)
	x := st.export()
	a := Advice{
		Fingerprint: x.Fingerprint, SQL: x.SQL, Name: x.Name, Tables: p.tables, Policy: x.Policy,
		Annotation:  "/* sqlflight: soft=" + shortDuration(soft) + " hard=" + shortDuration(hard) + " */",
		SoftSeconds: soft.Seconds(), HardSeconds: hard.Seconds(),
		WritesPerSecond: float64(writes) / window.Seconds(), WindowSeconds: window.Seconds(),
		Executions: rt.calls.Load(), Repeats: rt.within(soft),
	}
	a.MeanOriginSeconds = x.MeanOriginSeconds
	if x.OriginExecutions == 0 {
		a.MeanOriginSeconds = x.Latency["bypass"].Mean // off: its own calls, sampled
	}
	if a.Repeats == 0 {
		return Advice{}, false
	}
	a.RepeatRate = float64(a.Repeats) / float64(max(a.Executions, 1))
	a.SavedSeconds = float64(a.Repeats) * a.MeanOriginSeconds
	return a, true
}

// advisedTTL is the advisor's rule: soft a tenth of the mean time between
// writes, on a step of adviceTTLs within [1s, 5m]; hard ten times soft, at
// most 1h.
func advisedTTL(window time.Duration, writes uint64) (soft, hard time.Duration) {
	soft = maxAdvisedSoft
	if writes > 0 {
		target := window / time.Duration(writes) / 10
		soft = minAdvisedSoft
		for _, d := range adviceTTLs {
			if d <= target && d <= maxAdvisedSoft {
				soft = d
			}
		}
	}
	return soft, min(10*soft, maxAdvisedHard)
}

// tableWrites counts the writes to each table through the Shield: its own
// writes, committed transactions, Invalidate, and the change feed's
// changes, which all move epochs through startWrite.
type tableWrites struct {
	m   sync.Map // table name as written → *atomic.Uint64 (tableKey when read)
	n   atomic.Int64
	all atomic.Uint64 // writes to unknown tables (or past maxWriteTables)
}

// note counts w.
func (tw *tableWrites) note(w write) {
	if !w.known {
		tw.all.Add(1)
		return
	}
	for _, t := range w.tables {
		tw.add(t)
	}
	for _, rw := range w.rows {
		tw.add(rw.table)
	}
}

func (tw *tableWrites) add(k string) {
	if v, ok := tw.m.Load(k); ok {
		v.(*atomic.Uint64).Add(1)
		return
	}
	if tw.n.Load() >= maxWriteTables {
		tw.all.Add(1)
		return
	}
	v, loaded := tw.m.LoadOrStore(k, new(atomic.Uint64))
	if !loaded {
		tw.n.Add(1)
	}
	v.(*atomic.Uint64).Add(1)
}

// to returns the writes a read of tables has seen: to any of them, and to
// unknown tables (to every table, when its own are not known).
func (tw *tableWrites) to(tables []string, known bool) uint64 {
	n := tw.all.Load()
	if !known {
		tw.m.Range(func(_, v any) bool {
			n += v.(*atomic.Uint64).Load()
			return true
		})
		return n
	}
	reads := map[string]bool{}
	for _, t := range tables {
		reads[tableKey(t)] = true
	}
	tw.m.Range(func(k, v any) bool {
		if reads[tableKey(k.(string))] {
			n += v.(*atomic.Uint64).Load()
		}
		return true
	})
	return n
}
