package sqlflight

import (
	"crypto/rand"
	"database/sql/driver"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Per-statement statistics: what each statement shape (the fingerprint of
// its normalized text) costs the database and how it was served. The
// connection and the flights make one call each into this file.
//
// The statements are a Space-Saving top-K (Metwally, Agrawal and El
// Abbadi, 2005) of statementCapacity counters: a statement already counted
// is found without a lock (through a slot on its memoized scan, else a
// sync.Map) and counted with atomics; a new statement takes the place of
// the one with the fewest calls, inheriting that count as its error. Every
// statement with more than 1/statementCapacity of all calls is therefore
// counted, and a count overestimates the true calls by at most its Error,
// itself at most calls/statementCapacity.

const (
	// statementCapacity is how many statements are counted. 256 keeps the
	// table's worst case near 3 MiB and the scan for the smallest count
	// (done only when an uncounted statement arrives) near a microsecond,
	// while an application's statements rarely number more than a few
	// hundred; the error bound is calls/256.
	statementCapacity = 256
	// hotKeyCapacity is how many keys (statement and arguments) are counted
	// per statement, by a Space-Saving of their own.
	hotKeyCapacity = 8
	// maxStatementText bounds the texts kept per statement.
	maxStatementText = 2048
	// maxArgText bounds one argument, maxArgsText all of a key's, in print.
	maxArgText  = 64
	maxArgsText = 256
	// maxWarmText bounds the text kept for pre-warming (prewarm.go), and
	// maxWarmArgs a key's raw arguments, counted as their bytes (8 for
	// a number, a bool or a time).
	maxWarmText = 16 << 10
	maxWarmArgs = 1 << 10
	// sampleEvery: one call in this many of a statement is timed, and
	// notes its plan (reading the clock costs more than the rest).
	sampleEvery = 64
)

// outcome is how one call was served: a path through the cache and the
// flights, or the reason it bypassed them (outBypass + the reason's index in
// bypassReasonList).
type outcome uint8

const (
	outNone outcome = iota
	outFresh
	outStale
	outNegative
	outFollower
	outMiss
	outBypass
)

// bypassReasonList are the reasons a statement bypasses sharing (route.go), in
// the order of their outcomes.
var bypassReasonList = [...]string{bypassExec, bypassTx, bypassSession, bypassWrite, bypassNotShareable,
	bypassUnverified, bypassPolicy, bypassArgs, bypassTooLarge, bypassBusy, bypassBadAnnotation}

const numOutcomes = int(outBypass) + len(bypassReasonList)

// bypassOutcome is the outcome of a bypass for reason.
func bypassOutcome(reason string) outcome {
	switch reason {
	case "":
		return outNone
	case bypassWrite: // the common ones first
		return outBypassWrite
	case bypassPolicy:
		return outBypassPolicy
	}
	for i, r := range bypassReasonList {
		if r == reason {
			return outBypass + outcome(i)
		}
	}
	return outNone
}

// Outcomes the hot path names.
const (
	outBypassExec   = outBypass
	outBypassWrite  = outBypass + 3
	outBypassPolicy = outBypass + 6
)

// Latency paths: an outcome's histogram (every bypass shares one).
var pathNames = [...]string{"fresh", "stale", "negative", "follower", "miss", "bypass"}

func (o outcome) path() int { return int(min(o, outBypass)) - 1 }

// StatementStats are the statistics of one statement shape (its
// normalized text) in Shield.Statements. Calls is a Space-Saving count: the
// true number of calls lies between Calls-Error and Calls. The other
// counters count exactly, from Since, when the statement entered the table
// (a statement leaves it when a new one needs its place and it has the
// fewest calls). Durations are in seconds.
type StatementStats struct {
	Fingerprint string `json:"fingerprint"` // as in Explain and the logs
	// SQL is the normalized text, Text the text as first sent (with its
	// annotation); each is cut at 2 KiB (Truncated), Text then left out.
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

// HotKey is one of a statement's hottest keys: its calls that reached the
// sharing path (a Space-Saving count, over by at most Error), a hash of the
// key (stable within the process), and its arguments in print, each cut at
// 64 bytes and 256 in all. The arguments are kept in memory for this API
// (and Shield.SaveHotSet) only: they never go to a log or a metric, and the
// live page shows keyed hashes of them unless LivePageOptions.ShowArguments
// is set. Shield.Statements, seen only by the application, keeps them.
type HotKey struct {
	Hash  string   `json:"hash"`
	Calls uint64   `json:"calls"`
	Error uint64   `json:"error"`
	Args  []string `json:"args,omitempty"`

	// raw are its arguments as sent, for pre-warming, when warm.
	raw  []driver.Value
	warm bool
}

// stmtStats are one statement's counters.
type stmtStats struct {
	count   atomic.Uint64 // the Space-Saving count
	err     uint64        // the count it inherited
	evicted atomic.Bool
	// residual is the outcome of its first call, when that was a bypass:
	// calls of that outcome are not counted one by one but derived (the
	// calls with no other outcome), so that a statement that always
	// bypasses costs one atomic add per call.
	residual outcome

	normalized string // the index's key, as scanned
	sql, text  string // bounded copies
	warm       string // the text as sent, when at most maxWarmText (pre-warming)
	truncated  bool
	fp         string
	verdict    sqlscan.Verdict
	since      time.Time

	errors    atomic.Uint64
	outcomes  [numOutcomes]atomic.Uint64
	latency   [len(pathNames)]histogram
	origins   atomic.Uint64
	originErr atomic.Uint64
	originDur histogram
	rows      atomic.Uint64
	bytes     atomic.Uint64
	refreshes atomic.Uint64

	plan    atomic.Pointer[planNote]
	keys    hotKeys
	repeats atomic.Pointer[repeatTable] // for the advisor, once it runs uncached
}

// planNote is how a statement's last call was planned.
type planNote struct {
	reason    string
	detail    string
	soft      time.Duration
	hard      time.Duration
	cache     bool
	cacheable bool
	noCache   bool
	name      string
	tables    []string
	known     bool
}

// stmtNote is what a memoized scan holds for the table that counts it.
type stmtNote struct {
	t  *stmtTable
	st *stmtStats
}

// stmtTable is the Space-Saving table of a Shield's statements.
type stmtTable struct {
	index sync.Map // normalized text → *stmtStats
	mu    sync.Mutex
	slots []*stmtStats
	cap   int // zero: statementCapacity

	// pageKey is the key under which the live page hashes the values it
	// does not show (arguments, literals): drawn at random on first use,
	// so that a hash is stable within the Shield and cannot be computed
	// outside it.
	pageKeyOnce sync.Once
	pageKey     [32]byte
}

// valueKey returns the Shield's key for the live page's hashes of values.
func (t *stmtTable) valueKey() []byte {
	t.pageKeyOnce.Do(func() {
		_, _ = rand.Read(t.pageKey[:]) // crypto/rand: never fails (Go 1.24 on)
	})
	return t.pageKey[:]
}

// of counts a call of r and returns its statement's counters and the
// count.
func (t *stmtTable) of(r *sqlscan.Result, query string, clock Clock, first outcome) (*stmtStats, uint64) {
	if n, ok := r.Note.Load().(*stmtNote); ok && n.t == t && !n.st.evicted.Load() {
		return n.st, n.st.count.Add(1)
	}
	if v, ok := t.index.Load(r.Normalized); ok {
		if st := v.(*stmtStats); !st.evicted.Load() {
			t.remember(r, st)
			return st, st.count.Add(1)
		}
	}
	return t.admit(r, query, clock.Now(), first)
}

// remember notes st on r, unless r already holds another table's live
// statement (two Shields share one memoized scan; the second uses the map).
func (t *stmtTable) remember(r *sqlscan.Result, st *stmtStats) {
	if n, ok := r.Note.Load().(*stmtNote); !ok || n.t == t || n.st.evicted.Load() {
		r.Note.Store(&stmtNote{t: t, st: st})
	}
}

// admit counts a statement that is not in the table: it takes a free slot,
// or the place of the statement with the fewest calls, whose count it
// inherits.
func (t *stmtTable) admit(r *sqlscan.Result, query string, now time.Time, first outcome) (*stmtStats, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.index.Load(r.Normalized); ok {
		st := v.(*stmtStats)
		t.remember(r, st)
		return st, st.count.Add(1)
	}
	capacity := t.cap
	if capacity <= 0 {
		capacity = statementCapacity
	}
	st := newStmtStats(r, query, now)
	if first >= outBypass {
		st.residual = first
	}
	if len(t.slots) < capacity {
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
		t.index.Delete(old.normalized)
		st.err = low
		st.count.Store(low)
		t.slots[i] = st
	}
	t.index.Store(st.normalized, st)
	t.remember(r, st)
	return st, st.count.Add(1)
}

func newStmtStats(r *sqlscan.Result, query string, now time.Time) *stmtStats {
	st := &stmtStats{normalized: r.Normalized, fp: key.Fingerprint(r.Normalized), verdict: r.Verdict, since: now}
	st.sql, st.truncated = bounded(r.Normalized, maxStatementText)
	if len(query) <= maxStatementText {
		st.text = strings.Clone(query)
		st.warm = st.text
	} else if len(query) <= maxWarmText {
		st.warm = strings.Clone(query)
	}
	return st
}

// bounded returns a copy of s cut at n bytes (on a rune boundary), and
// whether it was cut.
func bounded(s string, n int) (string, bool) {
	if len(s) <= n {
		return strings.Clone(s), false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n]) + "…", true
}

// snapshot returns the statements counted, most called first.
func (t *stmtTable) snapshot() []*stmtStats {
	t.mu.Lock()
	out := slices.Clone(t.slots)
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b *stmtStats) int {
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

// lookup returns the statement of normalized text, or nil.
func (t *stmtTable) lookup(normalized string) *stmtStats {
	if v, ok := t.index.Load(normalized); ok {
		return v.(*stmtStats)
	}
	return nil
}

// stmtCall is one call of a statement on its way: its counters, its
// outcome, when it began (zero when it is not timed) and its key's hash.
type stmtCall struct {
	st    *stmtStats
	out   outcome
	began time.Time
	key   uint64
}

// callBegins counts a call of f's statement (query is the text as sent),
// before it is served.
func (s *Shield) callBegins(f *fate, query string) {
	if s.opts.NoStatementStats {
		return
	}
	st, n := s.statements.of(f.r, query, s.opts.Clock, bypassOutcome(f.reason))
	f.stat.st = st
	if n%sampleEvery == 1 || st.plan.Load() == nil {
		f.stat.began = time.Now()
		st.notePlan(f)
	}
}

// callEnds records how f's call was served: its outcome (a bypass's
// reason, if it was decided before sharing), its latency, its error, and,
// for a statement that runs uncached though it could be cached, whether its
// key was seen recently (for Advice). It is deferred: errp points to the
// call's error.
func (s *Shield) callEnds(c *conn, f *fate, errp *error) {
	sc := &f.stat
	st := sc.st
	if st == nil {
		return
	}
	out := sc.out
	if out == outNone {
		out = bypassOutcome(f.reason)
	}
	if *errp != nil {
		st.errors.Add(1)
	}
	if out == outNone {
		return
	}
	if out != st.residual {
		st.outcomes[out].Add(1)
	}
	if !sc.began.IsZero() {
		st.latency[out.path()].observe(time.Since(sc.began))
	}
	if f.plan.cache || !f.cacheable || f.plan.pol.NoCache || (out != outMiss && out != outBypassPolicy) {
		return
	}
	if sc.key == 0 {
		// Off by policy: not keyed on the way, so keyed here.
		var buf [256]byte
		key, ok := key.Append(buf[:0], c.sc.id, f.part, f.r.Normalized, f.args)
		if !ok {
			return
		}
		sc.key = keyHash(key)
	}
	now := s.opts.Clock.Now()
	st.repeatTable(now).see(sc.key, now)
}

// execBegins counts an exec of r; the caller ends it with execEnds.
func (s *Shield) execBegins(r *sqlscan.Result, query string) stmtCall {
	if s.opts.NoStatementStats {
		return stmtCall{}
	}
	st, n := s.statements.of(r, query, s.opts.Clock, outBypassExec)
	sc := stmtCall{st: st, out: outBypassExec}
	if n%sampleEvery == 1 {
		sc.began = time.Now()
		if p := st.plan.Load(); p == nil || p.reason != bypassExec {
			st.plan.Store(&planNote{reason: bypassExec, detail: r.Reason, tables: r.Writes, known: r.TablesKnown})
		}
	}
	return sc
}

// execEnds records an exec begun by execBegins.
func (sc stmtCall) execEnds(err error) {
	if sc.st == nil {
		return
	}
	if err != nil {
		sc.st.errors.Add(1)
	}
	if sc.out != sc.st.residual {
		sc.st.outcomes[sc.out].Add(1)
	}
	if !sc.began.IsZero() {
		sc.st.latency[sc.out.path()].observe(time.Since(sc.began))
	}
}

// bypass counts a read that leaves the sharing path for reason, before it
// runs on the caller's connection.
func (f *fate) bypass(s *Shield, reason string) {
	s.stats.bypass(reason)
	f.stat.out = bypassOutcome(reason)
}

// notePlan keeps how f's call was planned, when it changed.
func (st *stmtStats) notePlan(f *fate) {
	pol := &f.plan.pol
	p := st.plan.Load()
	if p != nil && p.reason == f.reason && p.soft == pol.Soft && p.hard == pol.Hard && p.cache == f.plan.cache &&
		p.cacheable == f.cacheable && p.noCache == pol.NoCache && p.name == pol.Name {
		return
	}
	st.plan.Store(&planNote{reason: f.reason, detail: f.r.Reason, soft: pol.Soft, hard: pol.Hard, cache: f.plan.cache,
		cacheable: f.cacheable, noCache: pol.NoCache, name: pol.Name, tables: f.tables, known: f.known})
}

// policy describes the note's policy in annotation terms.
func (p *planNote) policy() string {
	switch {
	case p.reason == bypassPolicy:
		return "off"
	case p.reason != "" && p.soft == 0:
		return ""
	case p.cache:
		hard := p.hard
		if hard <= 0 {
			hard = p.soft
		}
		return "soft=" + shortDuration(p.soft) + " hard=" + shortDuration(hard)
	default:
		return "coalesce only"
	}
}

// shortDuration prints d without trailing zero units: 5m, 1h30m, 2m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// sawKey counts key (with args) among the statement's hot keys and returns
// its hash.
func (st *stmtStats) sawKey(key string, args []driver.NamedValue) uint64 {
	if st == nil {
		return 0
	}
	h := max(maphash.String(keySeed, key), 1)
	st.keys.see(h, args)
	return h
}

// origin records one origin query of the statement: its duration, error,
// and its result's size.
func (st *stmtStats) origin(took time.Duration, res *result, err error) {
	if st == nil {
		return
	}
	st.origins.Add(1)
	st.originDur.observe(took)
	if err != nil {
		st.originErr.Add(1)
	}
	if res != nil {
		n := 0
		for i := range res.Sets {
			n += res.Sets[i].N
		}
		st.rows.Add(uint64(n))
		st.bytes.Add(uint64(res.Bytes))
	}
}

// refreshed counts a background refresh of the statement.
func (st *stmtStats) refreshed() {
	if st != nil {
		st.refreshes.Add(1)
	}
}

var keySeed = maphash.MakeSeed()

// keyHash hashes a key; never 0 (an empty slot).
func keyHash(key []byte) uint64 {
	return max(maphash.Bytes(keySeed, key), 1)
}

// hotKeys is a small Space-Saving of a statement's keys. A key already
// counted is found and counted with atomics; a new one takes the place of
// the smallest count under a lock, or, when another caller holds it, is
// not counted (a sample: heavy keys are still found). Its arguments are
// kept in print from its second call on.
type hotKeys struct {
	mu    sync.Mutex
	slots [hotKeyCapacity]hotSlot
}

type hotSlot struct {
	hash  atomic.Uint64
	count atomic.Uint64
	err   atomic.Uint64
	args  atomic.Pointer[keyArgs]
}

// keyArgs are a key's arguments in print and, when they are plain driver
// values within maxWarmArgs (warm), copies of them for pre-warming.
type keyArgs struct {
	hash uint64
	args []string
	raw  []driver.Value
	warm bool
}

func (hk *hotKeys) see(h uint64, args []driver.NamedValue) {
	for i := range hk.slots {
		sl := &hk.slots[i]
		if sl.hash.Load() == h {
			sl.count.Add(1)
			if a := sl.args.Load(); a == nil || a.hash != h {
				raw, warm := rawArgs(args)
				sl.args.Store(&keyArgs{hash: h, args: printArgs(args), raw: raw, warm: warm})
			}
			return
		}
	}
	if !hk.mu.TryLock() {
		return
	}
	defer hk.mu.Unlock()
	low := &hk.slots[0]
	for i := range hk.slots {
		sl := &hk.slots[i]
		if sl.hash.Load() == h { // taken meanwhile
			sl.count.Add(1)
			return
		}
		if sl.count.Load() < low.count.Load() {
			low = sl
		}
	}
	c := low.count.Load()
	low.hash.Store(h)
	low.err.Store(c)
	low.count.Store(c + 1)
}

// snapshot returns the keys counted, hottest first.
func (hk *hotKeys) snapshot() []HotKey {
	var out []HotKey
	for i := range hk.slots {
		sl := &hk.slots[i]
		h := sl.hash.Load()
		if h == 0 {
			continue
		}
		k := HotKey{Hash: fmt.Sprintf("%016x", h), Calls: sl.count.Load(), Error: sl.err.Load()}
		if a := sl.args.Load(); a != nil && a.hash == h {
			k.Args, k.raw, k.warm = a.args, a.raw, a.warm
		}
		out = append(out, k)
	}
	slices.SortStableFunc(out, func(a, b HotKey) int {
		switch {
		case a.Calls > b.Calls:
			return -1
		case a.Calls < b.Calls:
			return 1
		}
		return strings.Compare(a.Hash, b.Hash)
	})
	return out
}

// printArgs prints args within maxArgText each and maxArgsText in all.
func printArgs(args []driver.NamedValue) []string {
	out := make([]string, 0, len(args))
	total := 0
	for i, a := range args {
		var p string
		switch v := a.Value.(type) {
		case string:
			p = fmt.Sprintf("%q", cut(v, maxArgText))
		case []byte:
			p = fmt.Sprintf("%q", cut(string(v), maxArgText))
		case time.Time:
			p = v.Format(time.RFC3339Nano)
		default:
			p = fmt.Sprint(v)
		}
		p, _ = bounded(p, maxArgText)
		if total+len(p) > maxArgsText {
			out = append(out, fmt.Sprintf("… %d more", len(args)-i))
			break
		}
		total += len(p)
		out = append(out, p)
	}
	return out
}

// rawArgs copies args for pre-warming and reports whether it could: only
// positional plain driver values (int64, float64, bool, []byte, string,
// time.Time, nil) and Go's other integer and float types, within
// maxWarmArgs in all.
func rawArgs(args []driver.NamedValue) ([]driver.Value, bool) {
	out := make([]driver.Value, len(args))
	size := 0
	for i, a := range args {
		if a.Name != "" || a.Ordinal != i+1 {
			return nil, false
		}
		switch v := a.Value.(type) {
		case nil, int64, float64, bool, time.Time, int, int8, int16, int32, uint, uint16, uint32, uint64, float32:
			out[i] = v // some drivers (pgx) take Go's integers as they are
			size += 8
		case string:
			out[i] = strings.Clone(v)
			size += len(v)
		case []byte:
			if v != nil {
				out[i] = append(make([]byte, 0, len(v)), v...)
			} else {
				out[i] = []byte(nil)
			}
			size += len(v)
		default:
			return nil, false
		}
		if size > maxWarmArgs {
			return nil, false
		}
	}
	return out, true
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// repeatTable tells, for calls that reached the database, whether their
// key was seen before and how long before: a direct-mapped table of the
// last sighting of 256 keys (a 32-bit tag and milliseconds since base in
// one word; a collision forgets the other key, so repeats are undercounted,
// never invented) and a histogram of the gaps, bucketed by adviceTTLs.
type repeatTable struct {
	base  time.Time
	slots [256]atomic.Uint64
	gaps  [len(adviceTTLs) + 1]atomic.Uint64
	calls atomic.Uint64
}

func (st *stmtStats) repeatTable(now time.Time) *repeatTable {
	if rt := st.repeats.Load(); rt != nil {
		return rt
	}
	st.repeats.CompareAndSwap(nil, &repeatTable{base: now})
	return st.repeats.Load()
}

func (rt *repeatTable) see(h uint64, now time.Time) {
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
	i, _ := slices.BinarySearch(adviceTTLs[:], gap)
	rt.gaps[i].Add(1)
}

// within returns the calls whose key was seen at most d before.
func (rt *repeatTable) within(d time.Duration) uint64 {
	var n uint64
	for i, b := range adviceTTLs {
		if b > d {
			break
		}
		n += rt.gaps[i].Load()
	}
	return n
}

// Statements returns the statistics of the statements s counts (at most
// 256, see StatementStats), most called first. It is safe to call at any
// time; each statement is read with atomics, not as one snapshot. It
// returns nil when Options.NoStatementStats is set.
func (s *Shield) Statements() []StatementStats {
	sts := s.statements.snapshot()
	out := make([]StatementStats, 0, len(sts))
	for _, st := range sts {
		out = append(out, st.export())
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// statementOf returns the statistics of the statement with normalized
// text, or nil.
func (s *Shield) statementOf(normalized string) *StatementStats {
	st := s.statements.lookup(normalized)
	if st == nil {
		return nil
	}
	x := st.export()
	return &x
}

func (st *stmtStats) export() StatementStats {
	calls := st.count.Load()
	var outcomes [numOutcomes]uint64
	if st.residual != outNone {
		// The calls counted since the statement entered the table with no
		// other outcome (a call still running counts too).
		outcomes[st.residual] = calls - st.err
	}
	for o := range st.outcomes {
		if n := st.outcomes[o].Load(); outcome(o) != st.residual {
			outcomes[o] = n
			outcomes[st.residual] -= min(outcomes[st.residual], n)
		}
	}
	x := StatementStats{
		Fingerprint: st.fp, SQL: st.sql, Text: st.text, Truncated: st.truncated, Since: st.since,
		Calls: calls, Error: st.err, Errors: st.errors.Load(), Verdict: st.verdict.String(),
		Fresh: outcomes[outFresh], Stale: outcomes[outStale],
		Negative: outcomes[outNegative], Follower: outcomes[outFollower],
		Miss:             outcomes[outMiss],
		OriginExecutions: st.origins.Load(), OriginErrors: st.originErr.Load(),
		Rows: st.rows.Load(), Bytes: st.bytes.Load(), Refreshes: st.refreshes.Load(),
		HotKeys: st.keys.snapshot(),
	}
	if p := st.plan.Load(); p != nil {
		x.Shared, x.Cacheable, x.Policy, x.Name = p.reason == "", p.cacheable, p.policy(), p.name
		x.Tables = p.tables
		if p.reason != "" {
			x.Reason = p.reason
			if p.detail != "" {
				x.Reason += ": " + p.detail
			}
		}
	}
	for i, r := range bypassReasonList {
		if n := outcomes[outBypass+outcome(i)]; n > 0 {
			if x.Bypass == nil {
				x.Bypass = map[string]uint64{}
			}
			x.Bypass[r] = n
		}
	}
	if x.Miss > 0 {
		x.WaitersPerFlight = float64(x.Miss+x.Follower) / float64(x.Miss)
	}
	for i, name := range pathNames {
		h := st.latency[i].snapshot()
		if h.Count == 0 {
			continue
		}
		if x.Latency == nil {
			x.Latency = map[string]Latency{}
		}
		x.Latency[name] = Latency{Count: h.Count, Mean: h.Sum / float64(h.Count), P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
	}
	od := st.originDur.snapshot()
	x.OriginSeconds = od.Sum
	if od.Count > 0 {
		x.MeanOriginSeconds = od.Sum / float64(od.Count)
	}
	return x
}
