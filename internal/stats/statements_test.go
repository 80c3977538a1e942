package stats_test

import (
	"database/sql/driver"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// fixedClock is a Clock that tells one time.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// fp is a fingerprint for the tests: the text with a prefix, so that a
// test sees it is the one given.
func fp(normalized string) string { return "fp:" + normalized }

// The Space-Saving table keeps the true top 10 of a Zipf(1.1) workload
// over 100,000 distinct statements in its 256 counters, each count within
// its error bound of the truth.
func TestStatementsTopKZipf(t *testing.T) {
	const distinct, calls = 100_000, 1_000_000
	results := make([]*sqlscan.Result, distinct)
	for i := range results {
		results[i] = sqlscan.Parse(fmt.Sprintf("SELECT v FROM t%d WHERE k = $1", i))
	}
	rng := rand.New(rand.NewSource(14))
	z := rand.NewZipf(rng, 1.1, 1, distinct-1)
	truth := make([]uint64, distinct)
	var tbl stats.Table
	clock := fixedClock{t0}
	for range calls {
		i := z.Uint64()
		truth[i]++
		tbl.Of(results[i], "", clock, stats.OutNone, fp)
	}
	got := tbl.Snapshot()
	if len(got) != stats.StatementCapacity {
		t.Fatalf("%d statements counted, want %d", len(got), stats.StatementCapacity)
	}
	order := make([]int, distinct)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(truth[b]) - int(truth[a]) })
	byText := map[string]int{}
	for i, r := range results {
		byText[r.Normalized] = i
	}
	minCount := got[len(got)-1].Calls()
	for rank, st := range got[:10] {
		x := st.Export()
		i := byText[x.SQL]
		if i != order[rank] {
			t.Errorf("rank %d: statement %d (count %d), want %d (true %d)", rank, i, x.Calls, order[rank], truth[order[rank]])
		}
		if x.Calls < truth[i] || x.Calls-x.Error > truth[i] || x.Error > minCount {
			t.Errorf("statement %d: count %d error %d, true %d, min count %d", i, x.Calls, x.Error, truth[i], minCount)
		}
	}
	if bound := uint64(calls / stats.StatementCapacity); minCount > bound {
		t.Errorf("smallest count %d exceeds calls/capacity = %d", minCount, bound)
	}
}

// A statement that enters a full table inherits the smallest count as its
// error, and the one it replaced is no longer found.
func TestStatementEviction(t *testing.T) {
	var tbl stats.Table
	clock := fixedClock{t0}
	scan := func(i int) *sqlscan.Result { return sqlscan.Parse(fmt.Sprintf("SELECT v FROM t%d", i)) }
	for i := range stats.StatementCapacity {
		for range 2 + i { // statement 0 has the fewest calls: 2
			tbl.Of(scan(i), "", clock, stats.OutNone, fp)
		}
	}
	newcomer := scan(stats.StatementCapacity)
	st, n := tbl.Of(newcomer, "", clock, stats.OutNone, fp)
	if n != 3 || st.Export().Error != 2 || st.Fingerprint() != fp(newcomer.Normalized) {
		t.Errorf("newcomer counted %d with error %d (fingerprint %q), want 3 with error 2", n, st.Export().Error, st.Fingerprint())
	}
	if tbl.Lookup(scan(0).Normalized) != nil || tbl.Lookup(newcomer.Normalized) != st {
		t.Error("the evicted statement is still found, or the newcomer is not")
	}
	if got := len(tbl.Snapshot()); got != stats.StatementCapacity {
		t.Errorf("%d statements after an eviction, want %d", got, stats.StatementCapacity)
	}
}

// Texts are kept bounded: the normalized text cut at 2 KiB (Truncated),
// the text as sent then left out, but kept for pre-warming up to 16 KiB.
func TestStatementTexts(t *testing.T) {
	var tbl stats.Table
	clock := fixedClock{t0}
	long := "SELECT v FROM t WHERE k = 'é" + strings.Repeat("x", stats.MaxStatementText) + "'::text"
	st, _ := tbl.Of(sqlscan.Parse(long), long, clock, stats.OutNone, fp)
	x := st.Export()
	if !x.Truncated || x.Text != "" || len(x.SQL) > stats.MaxStatementText+len("…") || st.WarmText() != long {
		t.Errorf("truncated %v, text %d bytes, sql %d bytes, warm %d bytes", x.Truncated, len(x.Text), len(x.SQL), len(st.WarmText()))
	}
	huge := long + strings.Repeat(" ", stats.MaxWarmText)
	st, _ = tbl.Of(sqlscan.Parse(huge+" AND true"), huge, clock, stats.OutNone, fp)
	if st.WarmText() != "" {
		t.Errorf("a text over %d bytes was kept for pre-warming", stats.MaxWarmText)
	}
	if s, cut := stats.Bounded("aé", 2); !cut || s != "a…" {
		t.Errorf("Bounded cut inside a rune: %q", s)
	}
}

// Outcomes are counted one by one, except the residual one (a first
// bypass), derived from the calls; the export names bypasses by reason.
func TestStatementOutcomes(t *testing.T) {
	var tbl stats.Table
	clock := fixedClock{t0}
	r := sqlscan.Parse("SELECT v FROM t WHERE k = $1 FOR UPDATE")
	for i := range 5 {
		st, _ := tbl.Of(r, "", clock, stats.OutBypassWrite, fp)
		out := stats.OutBypassWrite
		if i == 4 {
			out = stats.BypassOutcome("busy connection")
		}
		st.Ended(out, time.Time{}, i == 0)
	}
	st := tbl.Lookup(r.Normalized)
	st.SetPlan(&stats.Plan{Reason: "write", Detail: "FOR UPDATE"})
	x := st.Export()
	if x.Calls != 5 || x.Errors != 1 || x.Bypass["write"] != 4 || x.Bypass["busy connection"] != 1 || len(x.Bypass) != 2 ||
		x.Shared || x.Reason != "write: FOR UPDATE" || x.Policy != "" {
		t.Errorf("export %+v", x)
	}
	for i, reason := range stats.BypassReasons {
		if o := stats.BypassOutcome(reason); o != stats.OutBypass+stats.Outcome(i) || o.Path() != len(stats.PathNames)-1 {
			t.Errorf("reason %q: outcome %d path %d", reason, o, o.Path())
		}
	}
	if stats.BypassOutcome("") != stats.OutNone || stats.BypassOutcome("no such reason") != stats.OutNone {
		t.Error("an empty or unknown reason has an outcome")
	}
}

// A plan's policy in annotation terms.
func TestPlanPolicy(t *testing.T) {
	for _, c := range []struct {
		p    stats.Plan
		want string
	}{
		{stats.Plan{Reason: "policy"}, "off"},
		{stats.Plan{Reason: "write"}, ""},
		{stats.Plan{Cache: true, Soft: 30 * time.Second, Hard: 5 * time.Minute}, "soft=30s hard=5m"},
		{stats.Plan{Cache: true, Soft: 90 * time.Minute}, "soft=1h30m hard=1h30m"},
		{stats.Plan{}, "coalesce only"},
	} {
		if got := c.p.Policy(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}

// The package doc states the memory bound from these sizes.
func TestStatementStatsSize(t *testing.T) {
	if n := unsafe.Sizeof(stats.Statement{}); n > 1536 {
		t.Errorf("Statement is %d bytes; the README says 1.5 KiB", n)
	}
	if n := unsafe.Sizeof(stats.Repeats{}); n > 2304 {
		t.Errorf("Repeats is %d bytes; the README says 2.3 KiB", n)
	}
}

// Hot keys: a Space-Saving of 8, whose counts overestimate by at most
// their Error; arguments printed from a key's second call, bounded, and
// copied for pre-warming only when plain and small.
func TestHotKeys(t *testing.T) {
	var tbl stats.Table
	st, _ := tbl.Of(sqlscan.Parse("SELECT v FROM t WHERE k = $1"), "", fixedClock{t0}, stats.OutNone, fp)
	arg := func(v any) []driver.NamedValue { return []driver.NamedValue{{Ordinal: 1, Value: v}} }
	for range 10 {
		st.SawKey("hot", arg(int64(1)))
	}
	for i := range 50 { // more cold keys than slots
		st.SawKey(fmt.Sprint("cold", i), arg(int64(i)))
	}
	keys := st.HotKeys()
	if len(keys) != stats.HotKeyCapacity || keys[0].Calls != 10 || keys[0].Error != 0 || len(keys[0].Args) != 1 || keys[0].Args[0] != "1" {
		t.Fatalf("hot keys %+v", keys)
	}
	if raw, ok := stats.WarmArgs(keys[0]); !ok || len(raw) != 1 || raw[0] != int64(1) {
		t.Errorf("warm args %v %v", raw, ok)
	}
	for _, k := range keys[1:] {
		if k.Calls-k.Error != 1 || k.Args != nil {
			t.Errorf("cold key %+v: want one true call, arguments not yet printed", k)
		}
	}
	if h := st.SawKey("hot", nil); fmt.Sprintf("%016x", h) != keys[0].Hash || h != stats.KeyHash([]byte("hot")) {
		t.Errorf("SawKey's hash %x, KeyHash %x, snapshot %s", h, stats.KeyHash([]byte("hot")), keys[0].Hash)
	}
	var nilStmt *stats.Statement
	if nilStmt.SawKey("x", nil) != 0 {
		t.Error("a nil statement counted a key")
	}
	nilStmt.Origin(time.Second, 1, 1, false)
	nilStmt.Refreshed()

	long := []driver.NamedValue{{Ordinal: 1, Value: strings.Repeat("y", 5000)}}
	for i := 2; i <= 9; i++ {
		long = append(long, driver.NamedValue{Ordinal: i, Value: strings.Repeat("z", 100)})
	}
	st2, _ := tbl.Of(sqlscan.Parse("SELECT w FROM t WHERE a = $1"), "", fixedClock{t0}, stats.OutNone, fp)
	st2.SawKey("k", long)
	st2.SawKey("k", long)
	k := st2.HotKeys()[0]
	total := 0
	for _, a := range k.Args[:len(k.Args)-1] {
		total += len(a)
		if len(a) > stats.MaxArgText+len("…") {
			t.Errorf("argument printed in %d bytes", len(a))
		}
	}
	if total > stats.MaxArgsText || k.Args[len(k.Args)-1] != "… 6 more" {
		t.Errorf("arguments %q (%d bytes)", k.Args, total)
	}
	if _, ok := stats.WarmArgs(k); ok {
		t.Errorf("arguments over %d bytes kept for pre-warming", stats.MaxWarmArgs)
	}
}

// Counting is safe under concurrent callers: every call is counted.
func TestTableConcurrent(t *testing.T) {
	var tbl stats.Table
	clock := fixedClock{t0}
	r := sqlscan.Parse("SELECT v FROM t WHERE k = $1")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				st, _ := tbl.Of(r, "", clock, stats.OutNone, fp)
				st.SawKey(fmt.Sprint(i%3), nil)
				st.Ended(stats.OutFresh, time.Time{}, false)
				if i%100 == 0 {
					_ = tbl.Snapshot()[0].Export()
				}
			}
		})
	}
	wg.Wait()
	x := tbl.Lookup(r.Normalized).Export()
	if x.Calls != 8000 || x.Fresh != 8000 {
		t.Errorf("calls %d fresh %d, want 8000", x.Calls, x.Fresh)
	}
}

// NotePlan stores a new plan only when one of the fields it compares
// changed; the detail and the tables alone do not make a new plan.
func TestNotePlan(t *testing.T) {
	var tbl stats.Table
	r := sqlscan.Parse("SELECT v FROM t WHERE k = $1")
	st, _ := tbl.Of(r, "", fixedClock{t0}, stats.OutNone, fp)
	st.NotePlan(stats.Plan{Soft: time.Second, Name: "a", Tables: []string{"t"}})
	first := st.Plan()
	if first == nil || first.Soft != time.Second || first.Name != "a" {
		t.Fatalf("plan %+v", first)
	}
	st.NotePlan(stats.Plan{Soft: time.Second, Name: "a", Detail: "other", Tables: []string{"u"}})
	if st.Plan() != first {
		t.Error("a plan of the same policy replaced the one noted")
	}
	if n := testing.AllocsPerRun(100, func() { st.NotePlan(stats.Plan{Soft: time.Second, Name: "a"}) }); n != 0 {
		t.Errorf("noting the same plan allocates %v times", n)
	}
	for _, p := range []stats.Plan{{Soft: 2 * time.Second, Name: "a"}, {Soft: 2 * time.Second, Name: "b"},
		{Reason: "write"}, {Cache: true}, {Cacheable: true}, {NoCache: true}, {Hard: time.Minute}} {
		st.NotePlan(p)
		if q := st.Plan(); q.Reason != p.Reason || q.Soft != p.Soft || q.Hard != p.Hard || q.Cache != p.Cache ||
			q.Cacheable != p.Cacheable || q.NoCache != p.NoCache || q.Name != p.Name {
			t.Errorf("noted %+v, plan is %+v", p, q)
		}
	}
}

// A call not counted (a nil statement) ends and runs origins quietly;
// OriginResult counts a result's rows over its sets, and its bytes.
func TestStatementOriginsAndNil(t *testing.T) {
	var none *stats.Statement
	none.Ended(stats.OutMiss, time.Now(), true)
	none.OriginResult(time.Millisecond, nil, true)
	var tbl stats.Table
	r := sqlscan.Parse("SELECT v FROM t")
	st, _ := tbl.Of(r, "", fixedClock{t0}, stats.OutNone, fp)
	st.OriginResult(time.Millisecond, &resultset.Result{Sets: []resultset.Set{{N: 2}, {N: 3}}, Bytes: 100}, false)
	st.OriginResult(time.Millisecond, nil, true)
	x := tbl.Export(r.Normalized)
	if x == nil || x.OriginExecutions != 2 || x.OriginErrors != 1 || x.Rows != 5 || x.Bytes != 100 {
		t.Errorf("export %+v", x)
	}
	if tbl.Export("SELECT w FROM t") != nil {
		t.Error("a statement not counted is exported")
	}
	if all := tbl.Exports(); len(all) != 1 || all[0].Fingerprint != x.Fingerprint {
		t.Errorf("Exports = %+v", all)
	}
	if (&stats.Table{}).Exports() != nil {
		t.Error("an empty table exports a list")
	}
}

// TestStatementsByShape: the texts of one shape, their constants' values
// aside, are one statement, shown as the shape; each hot key keeps the text
// it was first sent with, for pre-warming.
func TestStatementsByShape(t *testing.T) {
	var tbl stats.Table
	clock := fixedClock{t0}
	text := func(n int) string {
		return fmt.Sprintf(`/* sqlflight: ttl=1m */ SELECT id, v FROM t WHERE (id = %d)`, n)
	}
	var st *stats.Statement
	for n := range 200 {
		q := text(n)
		r := sqlscan.Scan(q)
		got, _ := tbl.Of(r, q, clock, stats.OutNone, fp)
		if st == nil {
			st = got
		}
		if got != st {
			t.Fatalf("id = %d: another statement", n)
		}
		if n < 3 {
			h := st.SawKey(fmt.Sprint("key ", n), nil)
			st.NoteKeyText(h, q)
		}
	}
	r := sqlscan.Scan(text(7))
	x := st.Export()
	if len(tbl.Snapshot()) != 1 || x.Calls != 200 || x.SQL != `SELECT id, v FROM t WHERE (id = $1)` ||
		x.Fingerprint != fp(r.ShapeKey) || x.Text != text(0) || tbl.Lookup(r.ShapeKey) != st || !st.Shaped() {
		t.Fatalf("%d statements; export %+v", len(tbl.Snapshot()), x)
	}
	texts := map[string]bool{}
	for _, k := range st.HotKeys() {
		kt, ok := stats.KeyText(k)
		if !ok {
			t.Fatalf("key %s: no text", k.Hash)
		}
		texts[kt] = true
	}
	if len(texts) != 3 || !texts[text(0)] || !texts[text(1)] || !texts[text(2)] {
		t.Fatalf("hot keys' texts %v", texts)
	}
	// A parameter in the constant's place is another statement, whose
	// keys' text is the statement's.
	p := sqlscan.Scan(`SELECT id, v FROM t WHERE (id = $1)`)
	other, _ := tbl.Of(p, p.Normalized, clock, stats.OutNone, fp)
	other.NoteKeyText(other.SawKey("k", nil), "ignored")
	if other == st || other.Shaped() || len(tbl.Snapshot()) != 2 {
		t.Fatal("the statement of a parameter is the shape's")
	}
	if kt, ok := stats.KeyText(other.HotKeys()[0]); kt != "" || !ok {
		t.Fatalf("a key of a statement that is not shaped has the text %q (%v)", kt, ok)
	}
}
