package stats

import (
	"crypto/rand"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// The statements are a Space-Saving top-K (Metwally, Agrawal and El
// Abbadi, 2005) of StatementCapacity counters: a statement already counted
// is found without a lock (through a slot on its memoized scan, else a
// sync.Map) and counted with atomics; a new statement takes the place of
// the one with the fewest calls, inheriting that count as its error. Every
// statement with more than 1/StatementCapacity of all calls is therefore
// counted, and a count overestimates the true calls by at most its Error,
// itself at most calls/StatementCapacity.

const (
	// StatementCapacity is how many statements a Table counts. 256 keeps
	// the table's worst case near 3 MiB and the scan for the smallest
	// count (done only when an uncounted statement arrives) near a
	// microsecond, while an application's statements rarely number more
	// than a few hundred; the error bound is calls/256.
	StatementCapacity = 256
	// HotKeyCapacity is how many keys (statement and arguments) are
	// counted per statement, by a Space-Saving of their own.
	HotKeyCapacity = 8
	// MaxStatementText bounds the texts kept per statement.
	MaxStatementText = 2048
	// MaxArgText bounds one argument, MaxArgsText all of a key's, in print.
	MaxArgText  = 64
	MaxArgsText = 256
	// MaxWarmText bounds the text kept for pre-warming, and MaxWarmArgs a
	// key's raw arguments, counted as their bytes (8 for a number, a bool
	// or a time).
	MaxWarmText = 16 << 10
	MaxWarmArgs = 1 << 10
	// SampleEvery: one call in this many of a statement is timed, and
	// notes its plan (reading the clock costs more than the rest).
	SampleEvery = 64
)

// Clock tells the time at which statements enter a Table and keys are
// seen.
type Clock interface{ Now() time.Time }

// StatementStats are the statistics of one statement shape (its
// normalized text, constants as placeholders: sqlscan.Result.Shape) in
// Shield.Statements. Calls is a Space-Saving count: the true number of
// calls lies between Calls-Error and Calls. The other counters count
// exactly, from Since, when the statement entered the table (a statement
// leaves it when a new one needs its place and it has the fewest calls).
// Durations are in seconds.
type StatementStats struct {
	Fingerprint string `json:"fingerprint"` // of the shape, as in Explain and the logs
	// SQL is the shape: the normalized text, with the constants that do
	// not change what the server concludes as $n placeholders numbered
	// after its parameters (WHERE (id = 4) and WHERE (id = 5) are one
	// statement, WHERE (id = $1)). Text is the text of the shape as first
	// sent (with its annotation and constants); each is cut at 2 KiB
	// (Truncated), Text then left out.
	SQL       string    `json:"sql"`
	Text      string    `json:"text,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
	Name      string    `json:"name,omitempty"` // its policy's name=, if any
	Tables    []string  `json:"tables,omitempty"`
	Since     time.Time `json:"since"`

	Calls  uint64 `json:"calls"`
	Error  uint64 `json:"error"`  // how much Calls may overestimate
	Errors uint64 `json:"errors"` // calls that returned an error

	// Verdict is the scanner's ("shareable", "in-flight-only", "opt-in",
	// "never"); Shared says whether its last call was shared, and Reason,
	// when not, why (a Stats.BypassReasons key, with the scanner's detail).
	// Cacheable says the verdict lets a TTL cache it. Policy is its last
	// call's: "soft=30s hard=5m", "coalesce only", "off", or empty when no
	// policy applied (a write, a transaction).
	Verdict   string `json:"verdict"`
	Shared    bool   `json:"shared"`
	Reason    string `json:"reason,omitempty"`
	Cacheable bool   `json:"cacheable"`
	Policy    string `json:"policy,omitempty"`

	// Outcomes of the calls: served fresh, stale or empty from the cache,
	// by a flight another call led (Follower), by a flight this call led
	// (Miss), or straight from the database (Bypass, by reason).
	Fresh    uint64            `json:"fresh"`
	Stale    uint64            `json:"stale"`
	Negative uint64            `json:"negative"`
	Follower uint64            `json:"follower"`
	Miss     uint64            `json:"miss"`
	Bypass   map[string]uint64 `json:"bypass,omitempty"`
	// WaitersPerFlight is the callers per flight this statement led:
	// (Miss+Follower)/Miss.
	WaitersPerFlight float64 `json:"waiters_per_flight,omitempty"`
	// Latency by path ("fresh", "stale", "negative", "follower", "miss",
	// "bypass"), from QueryContext to its rows, of one call in 64.
	Latency map[string]Latency `json:"latency,omitempty"`

	// The shared flights' (and refreshes') queries that reached the
	// database: how many, how many failed, how long they took, and the
	// rows and bytes of their results.
	OriginExecutions  uint64  `json:"origin_executions"`
	OriginErrors      uint64  `json:"origin_errors"`
	OriginSeconds     float64 `json:"origin_seconds"`
	MeanOriginSeconds float64 `json:"mean_origin_seconds"`
	Rows              uint64  `json:"rows"`
	Bytes             uint64  `json:"bytes"`
	Refreshes         uint64  `json:"refreshes"` // background refreshes started

	// HotKeys are its most called keys (arguments), hottest first.
	HotKeys []HotKey `json:"hot_keys,omitempty"`
}

// Latency is a distribution of sampled call durations, in seconds.
type Latency struct {
	Count uint64  `json:"count"` // calls timed
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"` // upper bounds of histogram buckets
	P99   float64 `json:"p99"`
}

// Statement is one statement's counters in a Table. Its methods are safe
// for concurrent use; those that count are no-ops on a nil *Statement.
type Statement struct {
	count   atomic.Uint64 // the Space-Saving count
	err     uint64        // the count it inherited
	evicted atomic.Bool
	// residual is the outcome of its first call, when that was a bypass:
	// calls of that outcome are not counted one by one but derived (the
	// calls with no other outcome), so that a statement that always
	// bypasses costs one atomic add per call.
	residual Outcome

	key       string // the index's key: the shape key, as scanned
	sql, text string // bounded copies
	warm      string // the text as sent, when at most MaxWarmText (pre-warming)
	truncated bool
	// shaped: the shape replaced constants, so that its texts may differ
	// (WHERE id = 4, WHERE id = 5): its hot keys keep their own texts.
	shaped  bool
	fp      string
	verdict sqlscan.Verdict
	since   time.Time

	errors    atomic.Uint64
	outcomes  [NumOutcomes]atomic.Uint64
	latency   [len(PathNames)]Durations
	origins   atomic.Uint64
	originErr atomic.Uint64
	originDur Durations
	rows      atomic.Uint64
	bytes     atomic.Uint64
	refreshes atomic.Uint64

	plan    atomic.Pointer[Plan]
	keys    hotKeys
	texts   atomic.Pointer[keyTexts] // the hot keys' texts, for a shaped statement
	repeats atomic.Pointer[Repeats]  // for the advisor, once it runs uncached
}

// Plan is how a statement's last call (of those sampled) was planned, as
// the caller tells it: plain data, never changed once noted.
type Plan struct {
	Reason    string        // its bypass reason; empty when it was shared
	Detail    string        // the scanner's detail of the reason
	Soft      time.Duration // its policy's TTLs (zero: coalesce only)
	Hard      time.Duration
	Cache     bool // its policy caches it
	Cacheable bool // its verdict lets a TTL cache it
	NoCache   bool // its policy forbids caching
	Name      string
	Tables    []string // the tables it reads (or, for an exec, writes)
	Known     bool     // Tables are all of them
}

// stmtNote is what a memoized scan holds for the table that counts it.
type stmtNote struct {
	t  *Table
	st *Statement
}

// Table is the Space-Saving table of a Shield's statements; its zero value
// is empty and ready to use, and its methods are safe for concurrent use.
type Table struct {
	index sync.Map // shape key (sqlscan.Result.ShapeKey) → *Statement
	mu    sync.Mutex
	slots []*Statement

	// pageKey is the key under which the live page hashes the values it
	// does not show (arguments, literals): drawn at random on first use,
	// so that a hash is stable within the Table and cannot be computed
	// outside it.
	pageKeyOnce sync.Once
	pageKey     [32]byte
}

// ValueKey returns the table's key for the live page's hashes of values:
// 32 random bytes drawn on the first call, the same ever after.
func (t *Table) ValueKey() []byte {
	t.pageKeyOnce.Do(func() {
		_, _ = rand.Read(t.pageKey[:]) // crypto/rand: never fails (Go 1.24 on)
	})
	return t.pageKey[:]
}

// Of counts a call of r (query is the text as sent) and returns its
// statement's counters and the count: the statement of r's shape
// (sqlscan.Result.ShapeKey), which every text differing from r only in the
// values of its constants shares. A statement not yet counted enters the
// table at clock's time, with the fingerprint fp gives its shape key (its
// normalized text when no constant was replaced); first is the call's
// outcome if already known (a bypass then becomes the statement's residual
// outcome, see Statement).
func (t *Table) Of(r *sqlscan.Result, query string, clock Clock, first Outcome, fp func(string) string) (*Statement, uint64) {
	if n, ok := r.Note.Load().(*stmtNote); ok && n.t == t && !n.st.evicted.Load() {
		return n.st, n.st.count.Add(1)
	}
	if v, ok := t.index.Load(r.ShapeKey); ok {
		if st := v.(*Statement); !st.evicted.Load() {
			t.remember(r, st)
			return st, st.count.Add(1)
		}
	}
	return t.admit(r, query, clock.Now(), first, fp)
}

// remember notes st on r, unless r already holds another table's live
// statement (two Shields share one memoized scan; the second uses the map).
func (t *Table) remember(r *sqlscan.Result, st *Statement) {
	if n, ok := r.Note.Load().(*stmtNote); !ok || n.t == t || n.st.evicted.Load() {
		r.Note.Store(&stmtNote{t: t, st: st})
	}
}

// admit counts a statement that is not in the table: it takes a free slot,
// or the place of the statement with the fewest calls, whose count it
// inherits.
func (t *Table) admit(r *sqlscan.Result, query string, now time.Time, first Outcome, fp func(string) string) (*Statement, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.index.Load(r.ShapeKey); ok {
		st := v.(*Statement)
		t.remember(r, st)
		return st, st.count.Add(1)
	}
	st := newStatement(r, query, now, fp)
	if first >= OutBypass {
		st.residual = first
	}
	if len(t.slots) < StatementCapacity {
		t.slots = append(t.slots, st)
	} else {
		i := 0
		low := t.slots[0].count.Load()
		for j, o := range t.slots[1:] {
			if c := o.count.Load(); c < low {
				i, low = j+1, c
			}
		}
		old := t.slots[i]
		old.evicted.Store(true)
		t.index.Delete(old.key)
		st.err = low
		st.count.Store(low)
		t.slots[i] = st
	}
	t.index.Store(st.key, st)
	t.remember(r, st)
	return st, st.count.Add(1)
}

func newStatement(r *sqlscan.Result, query string, now time.Time, fp func(string) string) *Statement {
	st := &Statement{key: r.ShapeKey, fp: fp(r.ShapeKey), verdict: r.Verdict, since: now,
		shaped: r.ShapeKey != r.Normalized}
	st.sql, st.truncated = Bounded(r.Shape, MaxStatementText)
	if len(query) <= MaxStatementText {
		st.text = strings.Clone(query)
		st.warm = st.text
	} else if len(query) <= MaxWarmText {
		st.warm = strings.Clone(query)
	}
	return st
}

// Bounded returns a copy of s cut at n bytes (on a rune boundary, then
// marked with "…"), and whether it was cut.
func Bounded(s string, n int) (string, bool) {
	if len(s) <= n {
		return strings.Clone(s), false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n]) + "…", true
}

// Snapshot returns the statements counted, most called first (ties by
// fingerprint).
func (t *Table) Snapshot() []*Statement {
	t.mu.Lock()
	out := slices.Clone(t.slots)
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b *Statement) int {
		if ca, cb := a.count.Load(), b.count.Load(); ca != cb {
			if ca > cb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.fp, b.fp)
	})
	return out
}

// Lookup returns the statement of the shape key (sqlscan.Result.ShapeKey),
// or nil.
func (t *Table) Lookup(shapeKey string) *Statement {
	if v, ok := t.index.Load(shapeKey); ok {
		return v.(*Statement)
	}
	return nil
}

// Export returns the statistics of the statement of the shape key, or nil
// when t does not count it.
func (t *Table) Export(shapeKey string) *StatementStats {
	st := t.Lookup(shapeKey)
	if st == nil {
		return nil
	}
	x := st.Export()
	return &x
}

// Exports returns the statistics of every statement t counts, most called
// first (Snapshot's order); nil when it counts none.
func (t *Table) Exports() []StatementStats {
	sts := t.Snapshot()
	out := make([]StatementStats, 0, len(sts))
	for _, st := range sts {
		out = append(out, st.Export())
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Calls is the statement's Space-Saving count.
func (st *Statement) Calls() uint64 { return st.count.Load() }

// Fingerprint is the fingerprint of the statement's shape key.
func (st *Statement) Fingerprint() string { return st.fp }

// WarmText is the text as first sent, for pre-warming; empty when it was
// longer than MaxWarmText. A hot key of another text of the shape has its
// own (KeyText).
func (st *Statement) WarmText() string { return st.warm }

// Shaped reports whether the statement's texts may differ in the values of
// constants (its shape replaced some): its callers then tell each key's
// text (NoteKeyText).
func (st *Statement) Shaped() bool { return st.shaped }

// Plan returns the plan last noted, or nil before the first.
func (st *Statement) Plan() *Plan { return st.plan.Load() }

// SetPlan notes p as the statement's plan; p must not change after.
func (st *Statement) SetPlan(p *Plan) { st.plan.Store(p) }

// NotePlan notes p as the statement's plan unless the plan noted already
// has the same reason, TTLs, caching and name (its detail and tables are
// not compared): a call planned as the last one costs no allocation.
func (st *Statement) NotePlan(p Plan) {
	q := st.Plan()
	if q != nil && q.Reason == p.Reason && q.Soft == p.Soft && q.Hard == p.Hard && q.Cache == p.Cache &&
		q.Cacheable == p.Cacheable && q.NoCache == p.NoCache && q.Name == p.Name {
		return
	}
	n := p
	st.plan.Store(&n)
}

// Ended records a call's end: an error if failed, its outcome (OutNone
// counts no outcome), and, when began is not zero, its latency since then.
// A nil st (a call not counted) records nothing.
func (st *Statement) Ended(out Outcome, began time.Time, failed bool) {
	if st == nil {
		return
	}
	if failed {
		st.errors.Add(1)
	}
	if out == OutNone {
		return
	}
	if out != st.residual {
		st.outcomes[out].Add(1)
	}
	if !began.IsZero() {
		st.latency[out.Path()].Observe(time.Since(began))
	}
}

// Latency returns the histogram of the sampled calls of path (an index in
// PathNames).
func (st *Statement) Latency(path int) Histogram { return st.latency[path].Snapshot() }

// Policy describes the plan's policy in annotation terms: "off",
// "soft=30s hard=5m", "coalesce only", or empty when no policy applied.
func (p *Plan) Policy() string {
	switch {
	case p.Reason == reasonPolicy:
		return "off"
	case p.Reason != "" && p.Soft == 0:
		return ""
	case p.Cache:
		hard := p.Hard
		if hard <= 0 {
			hard = p.Soft
		}
		return "soft=" + ShortDuration(p.Soft) + " hard=" + ShortDuration(hard)
	default:
		return "coalesce only"
	}
}

// ShortDuration prints d without trailing zero units: 5m, 1h30m, 2m30s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

var keySeed = maphash.MakeSeed()

// KeyHash hashes a key as SawKey does (stable within the process); never
// 0 (an empty slot).
func KeyHash(key []byte) uint64 {
	return max(maphash.Bytes(keySeed, key), 1)
}

// Origin records one origin query of the statement: its duration, whether
// it failed, and its result's rows and bytes.
func (st *Statement) Origin(took time.Duration, rows, bytes uint64, failed bool) {
	if st == nil {
		return
	}
	st.origins.Add(1)
	st.originDur.Observe(took)
	if failed {
		st.originErr.Add(1)
	}
	st.rows.Add(rows)
	st.bytes.Add(bytes)
}

// OriginResult is Origin with the rows and bytes of res (none when res
// is nil).
func (st *Statement) OriginResult(took time.Duration, res *resultset.Result, failed bool) {
	var rows, bytes uint64
	if res != nil {
		n := 0
		for i := range res.Sets {
			n += res.Sets[i].N
		}
		rows, bytes = uint64(n), uint64(res.Bytes)
	}
	st.Origin(took, rows, bytes, failed)
}

// Refreshed counts a background refresh of the statement.
func (st *Statement) Refreshed() {
	if st != nil {
		st.refreshes.Add(1)
	}
}

// Export returns the statement's statistics, each counter read with an
// atomic load.
func (st *Statement) Export() StatementStats {
	calls := st.count.Load()
	var outcomes [NumOutcomes]uint64
	if st.residual != OutNone {
		// The calls counted since the statement entered the table with no
		// other outcome (a call still running counts too).
		outcomes[st.residual] = calls - st.err
	}
	for o := range st.outcomes {
		if n := st.outcomes[o].Load(); Outcome(o) != st.residual {
			outcomes[o] = n
			outcomes[st.residual] -= min(outcomes[st.residual], n)
		}
	}
	x := StatementStats{
		Fingerprint: st.fp, SQL: st.sql, Text: st.text, Truncated: st.truncated, Since: st.since,
		Calls: calls, Error: st.err, Errors: st.errors.Load(), Verdict: st.verdict.String(),
		Fresh: outcomes[OutFresh], Stale: outcomes[OutStale],
		Negative: outcomes[OutNegative], Follower: outcomes[OutFollower],
		Miss:             outcomes[OutMiss],
		OriginExecutions: st.origins.Load(), OriginErrors: st.originErr.Load(),
		Rows: st.rows.Load(), Bytes: st.bytes.Load(), Refreshes: st.refreshes.Load(),
		HotKeys: st.keys.snapshot(st.shaped, st.texts.Load()),
	}
	if p := st.plan.Load(); p != nil {
		x.Shared, x.Cacheable, x.Policy, x.Name = p.Reason == "", p.Cacheable, p.Policy(), p.Name
		x.Tables = p.Tables
		if p.Reason != "" {
			x.Reason = p.Reason
			if p.Detail != "" {
				x.Reason += ": " + p.Detail
			}
		}
	}
	for i, r := range BypassReasons {
		if n := outcomes[OutBypass+Outcome(i)]; n > 0 {
			if x.Bypass == nil {
				x.Bypass = map[string]uint64{}
			}
			x.Bypass[r] = n
		}
	}
	if x.Miss > 0 {
		x.WaitersPerFlight = float64(x.Miss+x.Follower) / float64(x.Miss)
	}
	for i, name := range PathNames {
		h := st.latency[i].Snapshot()
		if h.Count == 0 {
			continue
		}
		if x.Latency == nil {
			x.Latency = map[string]Latency{}
		}
		x.Latency[name] = Latency{Count: h.Count, Mean: h.Sum / float64(h.Count), P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
	}
	od := st.originDur.Snapshot()
	x.OriginSeconds = od.Sum
	if od.Count > 0 {
		x.MeanOriginSeconds = od.Sum / float64(od.Count)
	}
	return x
}
