package stats_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// The advisor's rule: a tenth of the mean time between writes, on a step,
// within [1s, 5m]; hard ten times soft, at most 1h.
func TestAdvisedTTL(t *testing.T) {
	for _, c := range []struct {
		window     time.Duration
		writes     uint64
		soft, hard time.Duration
	}{
		{time.Hour, 0, 5 * time.Minute, 50 * time.Minute},
		{time.Hour, 1, 5 * time.Minute, 50 * time.Minute},
		{time.Hour, 12, 30 * time.Second, 5 * time.Minute},  // every 5m: 30s
		{time.Hour, 100, 2 * time.Second, 20 * time.Second}, // every 36s: 3.6s, down to the step 2s
		{time.Minute, 600, time.Second, 10 * time.Second},
	} {
		soft, hard := stats.AdvisedTTL(c.window, c.writes)
		if soft != c.soft || hard != c.hard {
			t.Errorf("%v with %d writes: soft %v hard %v, want %v %v", c.window, c.writes, soft, hard, c.soft, c.hard)
		}
	}
}

// Repeats counts the calls whose key was seen within a gap, by the steps
// of AdviceTTLs; a key whose slot another key took is forgotten (an
// undercount, never an invented repeat).
func TestRepeats(t *testing.T) {
	var tbl stats.Table
	st, _ := tbl.Of(sqlscan.Parse("SELECT v FROM t WHERE k = $1"), "", fixedClock{t0}, stats.OutNone, fp)
	rt := st.RepeatTable(t0)
	if st.RepeatTable(t0.Add(time.Hour)) != rt {
		t.Fatal("RepeatTable made a second table")
	}
	const a, b, c = 0x1_0000_0007, 0x2_0000_0008, 0x3_0000_0007 // c takes a's slot
	rt.See(a, t0)
	rt.See(a, t0.Add(2*time.Second))  // a repeat within 2s
	rt.See(b, t0.Add(3*time.Second))  // new
	rt.See(b, t0.Add(36*time.Second)) // a repeat 33s on: within 1m, not 30s
	rt.See(c, t0.Add(37*time.Second)) // forgets a
	rt.See(a, t0.Add(38*time.Second)) // not a repeat: forgotten
	if rt.Within(time.Second) != 0 || rt.Within(2*time.Second) != 1 || rt.Within(30*time.Second) != 1 || rt.Within(time.Minute) != 2 {
		t.Errorf("within 1s %d, 2s %d, 30s %d, 1m %d; want 0 1 1 2",
			rt.Within(time.Second), rt.Within(2*time.Second), rt.Within(30*time.Second), rt.Within(time.Minute))
	}
	rt.See(a, t0.Add(-time.Second)) // before the base: counted as a call only
	if rt.Within(time.Hour) != 2 {
		t.Errorf("a call before the base counted as a repeat")
	}
}

// TableWrites counts a write to each table by name, folds names by the
// key given when read, and past MaxWriteTables counts new tables' writes
// as writes to every table.
func TestTableWrites(t *testing.T) {
	var tw stats.TableWrites
	lower := func(s string) string { return string([]byte{s[0] | 0x20}) + s[1:] }
	tw.Add("Items")
	tw.Add("items")
	tw.Add("prices")
	tw.Unknown()
	if n := tw.To([]string{"items"}, true, lower); n != 3 {
		t.Errorf("writes to items: %d, want 3 (two by name, one unknown)", n)
	}
	if n := tw.To(nil, false, lower); n != 4 {
		t.Errorf("writes to unknown tables: %d, want all 4", n)
	}
	for i := range stats.MaxWriteTables {
		tw.Add("t" + string(rune('a'+i%26)) + string(rune(i)))
	}
	before := tw.To([]string{"prices"}, true, lower)
	tw.Add("one too many")
	if after := tw.To([]string{"prices"}, true, lower); after != before+1 {
		t.Errorf("a table past the bound: %d writes to prices, want %d", after, before+1)
	}
}

// Note counts a write to each table and to the table of each row, or to
// every table when the write's tables are not known.
func TestTableWritesNote(t *testing.T) {
	var tw stats.TableWrites
	id := func(s string) string { return s }
	tw.Note([]string{"a", "b"}, true, []epoch.RowWrite{{Table: "c"}})
	tw.Note(nil, false, []epoch.RowWrite{{Table: "d"}})
	for _, c := range []struct {
		table string
		want  uint64
	}{{"a", 2}, {"b", 2}, {"c", 2}, {"d", 1}} {
		if n := tw.To([]string{c.table}, true, id); n != c.want {
			t.Errorf("writes to %s = %d, want %d", c.table, n, c.want)
		}
	}
}

// Advise ranks by the database time saved (repeats × mean origin time) and
// leaves out statements that are cached, cannot be cached, or never
// repeat.
func TestAdviseRanking(t *testing.T) {
	var tbl stats.Table
	clock := fixedClock{t0}
	add := func(q string, plan stats.Plan, repeats int, origin time.Duration) {
		st, _ := tbl.Of(sqlscan.Parse(q), q, clock, stats.OutNone, fp)
		st.SetPlan(&plan)
		st.Origin(origin, 1, 10, false)
		rt := st.RepeatTable(t0)
		for i := range repeats + 1 {
			rt.See(99, t0.Add(time.Duration(i)*time.Second))
		}
	}
	coalesced := stats.Plan{Cacheable: true, Tables: []string{"t"}, Known: true}
	add("SELECT a FROM t WHERE k = $1", coalesced, 100, time.Millisecond)     // 0.1 s saved
	add("SELECT b FROM t WHERE k = $1", coalesced, 10, 50*time.Millisecond)   // 0.5 s
	add("SELECT c FROM t WHERE k = $1", coalesced, 1000, 10*time.Microsecond) // 0.01 s
	add("SELECT d FROM t WHERE k = $1", stats.Plan{Cacheable: true, Cache: true, Soft: time.Minute}, 10, time.Second)
	add("SELECT e FROM t WHERE k = $1", stats.Plan{}, 10, time.Second)
	add("SELECT f FROM t WHERE k = $1", coalesced, 0, time.Second)
	var writes []string
	advice := stats.Advise(tbl.Snapshot(), time.Hour, func(tables []string, known bool) uint64 {
		writes = append(writes, tables...)
		return 12 // one every 5m: soft 30s
	})
	var got []string
	for _, a := range advice {
		got = append(got, a.SQL)
		if a.Annotation != "/* sqlflight: soft=30s hard=5m */" || a.Policy != "coalesce only" || a.WritesPerSecond != 12.0/3600 {
			t.Errorf("advice %+v", a)
		}
	}
	want := []string{"SELECT b FROM t WHERE k = $1", "SELECT a FROM t WHERE k = $1", "SELECT c FROM t WHERE k = $1"}
	if !slices.Equal(got, want) {
		t.Errorf("ranked %q, want %q", got, want)
	}
	if a := advice[0]; a.Executions != 11 || a.Repeats != 10 || a.SavedSeconds != 10*0.05 {
		t.Errorf("first advice %+v", a)
	}
	if len(writes) == 0 || writes[0] != "t" {
		t.Errorf("writes asked for tables %q", writes)
	}
	if stats.Advise(nil, time.Hour, nil) != nil {
		t.Error("no statements, yet advice")
	}
}
