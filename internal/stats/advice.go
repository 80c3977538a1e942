package stats

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/epoch"
)

// The advisor: which statements that run uncached would a TTL save the
// most database time on, and which TTL.

// AdviceTTLs are the TTLs the advisor proposes, and the buckets of the gaps
// between two calls of one key (Repeats).
var AdviceTTLs = [...]time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
}

const (
	minAdvisedSoft = time.Second
	maxAdvisedSoft = 5 * time.Minute
	maxAdvisedHard = time.Hour
	// MaxWriteTables bounds the tables whose writes TableWrites counts
	// one by one; writes to more count as writes to every table (the
	// advice then errs on the short side).
	MaxWriteTables = 4096
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

// Advise ranks the statements sts that run uncached although they could be
// cached, by the database time a TTL would have saved in the window
// observed (Advice.SavedSeconds, ties by repeats then fingerprint), and
// proposes each one's annotation by AdvisedTTL from the writes that writes
// counts to the tables a statement reads. Statements that would have saved
// nothing are left out; nil when none is left.
func Advise(sts []*Statement, window time.Duration, writes func(tables []string, known bool) uint64) []Advice {
	var out []Advice
	for _, st := range sts {
		if a, ok := advise(st, window, writes); ok {
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
func advise(st *Statement, window time.Duration, writes func([]string, bool) uint64) (Advice, bool) {
	p := st.plan.Load()
	rt := st.repeats.Load()
	if p == nil || rt == nil || !p.Cacheable || p.Cache || p.NoCache || (p.Reason != "" && p.Reason != reasonPolicy) {
		return Advice{}, false
	}
	w := writes(p.Tables, p.Known)
	soft, hard := AdvisedTTL(window, w)
	x := st.Export()
	a := Advice{
		Fingerprint: x.Fingerprint, SQL: x.SQL, Name: x.Name, Tables: p.Tables, Policy: x.Policy,
		Annotation:  "/* sqlflight: soft=" + ShortDuration(soft) + " hard=" + ShortDuration(hard) + " */",
		SoftSeconds: soft.Seconds(), HardSeconds: hard.Seconds(),
		WritesPerSecond: float64(w) / window.Seconds(), WindowSeconds: window.Seconds(),
		Executions: rt.calls.Load(), Repeats: rt.Within(soft),
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

// AdvisedTTL is the advisor's rule: soft a tenth of the mean time between
// writes (window / writes), rounded down to a step of AdviceTTLs and kept
// within [1s, 5m] (5m without writes); hard ten times soft, at most 1h.
func AdvisedTTL(window time.Duration, writes uint64) (soft, hard time.Duration) {
	soft = maxAdvisedSoft
	if writes > 0 {
		target := window / time.Duration(writes) / 10
		soft = minAdvisedSoft
		for _, d := range AdviceTTLs {
			if d <= target && d <= maxAdvisedSoft {
				soft = d
			}
		}
	}
	return soft, min(10*soft, maxAdvisedHard)
}

// Repeats tells, for calls that reached the database, whether their key
// was seen before and how long before: a direct-mapped table of the last
// sighting of 256 keys (a 32-bit tag and milliseconds since base in one
// word; a collision forgets the other key, so repeats are undercounted,
// never invented) and a histogram of the gaps, bucketed by AdviceTTLs.
// Its methods are safe for concurrent use.
type Repeats struct {
	base  time.Time
	slots [256]atomic.Uint64
	gaps  [len(AdviceTTLs) + 1]atomic.Uint64
	calls atomic.Uint64
}

// RepeatTable returns the statement's Repeats, made with base now on the
// first call (for the advisor, once the statement runs uncached).
func (st *Statement) RepeatTable(now time.Time) *Repeats {
	if rt := st.repeats.Load(); rt != nil {
		return rt
	}
	st.repeats.CompareAndSwap(nil, &Repeats{base: now})
	return st.repeats.Load()
}

// See counts a call of the key of hash h at now; about 49 days after the
// table's base (or before it) it counts the call but no more repeats.
func (rt *Repeats) See(h uint64, now time.Time) {
	rt.calls.Add(1)
	ms := now.Sub(rt.base).Milliseconds() + 1
	if ms <= 0 || ms >= 1<<32 {
		return // ~49 days on: stop counting rather than wrap
	}
	tag := h >> 32
	old := rt.slots[h&255].Swap(tag<<32 | uint64(ms))
	if old == 0 || old>>32 != tag {
		return
	}
	gap := time.Duration(uint64(ms)-old&(1<<32-1)) * time.Millisecond
	i, _ := slices.BinarySearch(AdviceTTLs[:], gap)
	rt.gaps[i].Add(1)
}

// Within returns the calls whose key was seen at most d before (counted
// by the steps of AdviceTTLs up to d).
func (rt *Repeats) Within(d time.Duration) uint64 {
	var n uint64
	for i, b := range AdviceTTLs {
		if b > d {
			break
		}
		n += rt.gaps[i].Load()
	}
	return n
}

// TableWrites counts the writes to each table (as the writer names it),
// at most MaxWriteTables apart; its zero value is ready to use and its
// methods are safe for concurrent use.
type TableWrites struct {
	m   sync.Map // table name as written → *atomic.Uint64
	n   atomic.Int64
	all atomic.Uint64 // writes to unknown tables (or past MaxWriteTables)
}

// Unknown counts a write whose tables are not known (a write to every
// table).
func (tw *TableWrites) Unknown() { tw.all.Add(1) }

// Note counts one write: to each of tables and of the tables of rows,
// or, when known is false, to every table.
func (tw *TableWrites) Note(tables []string, known bool, rows []epoch.RowWrite) {
	if !known {
		tw.Unknown()
		return
	}
	for _, t := range tables {
		tw.Add(t)
	}
	for _, rw := range rows {
		tw.Add(rw.Table)
	}
}

// Add counts a write to table k; past MaxWriteTables distinct tables, a
// new table's write counts as one to every table.
func (tw *TableWrites) Add(k string) {
	if v, ok := tw.m.Load(k); ok {
		v.(*atomic.Uint64).Add(1)
		return
	}
	if tw.n.Load() >= MaxWriteTables {
		tw.all.Add(1)
		return
	}
	v, loaded := tw.m.LoadOrStore(k, new(atomic.Uint64))
	if !loaded {
		tw.n.Add(1)
	}
	v.(*atomic.Uint64).Add(1)
}

// To returns the writes a read of tables has seen: to any of them (names
// compared by key, which folds a name as written or read to one form), and
// to unknown tables; to every table when its own are not known.
func (tw *TableWrites) To(tables []string, known bool, key func(string) string) uint64 {
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
		reads[key(t)] = true
	}
	tw.m.Range(func(k, v any) bool {
		if reads[key(k.(string))] {
			n += v.(*atomic.Uint64).Load()
		}
		return true
	})
	return n
}
