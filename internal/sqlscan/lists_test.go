package sqlscan

import (
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/hugesql"
)

func hugeIn(n int) string     { return hugesql.In("users_list", n) }
func hugeInsert(n int) string { return hugesql.Insert("events_list", n) }

// Scanning a 6.9 MB statement allocates about its size (the normalized
// text), not fifty times it (a token per constant).
func TestLongListsScanCheaply(t *testing.T) {
	for name, sql := range map[string]string{"IN list": hugeIn(6_900_000), "INSERT": hugeInsert(6_900_000)} {
		var r *Result
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		r = Scan(sql)
		runtime.ReadMemStats(&m1)
		got := m1.TotalAlloc - m0.TotalAlloc
		t.Logf("%s of %d bytes: %d bytes in %d allocations", name, len(sql), got, m1.Mallocs-m0.Mallocs)
		if limit := uint64(len(sql)) * 3 / 2; got > limit {
			t.Errorf("%s of %d bytes allocated %d bytes to scan, want at most %d", name, len(sql), got, limit)
		}
		if allocs := testing.AllocsPerRun(2, func() { Scan(sql) }); allocs > 100 {
			t.Errorf("%s: %v allocations per scan, want at most 100", name, allocs)
		}
		if len(r.Normalized) < len(sql)*9/10 {
			t.Errorf("%s: the normalized text lost elements (%d of %d bytes)", name, len(r.Normalized), len(sql))
		}
	}
	if r := Scan(hugeIn(6_900_000)); r.Normalized != hugeIn(6_900_000) || r.Verdict != Shareable ||
		!reflect.DeepEqual(r.Tables, []string{"users_list"}) {
		t.Errorf("IN list: %v %v %q", r.Verdict, r.Tables, r.Reason)
	}
	if r := Scan(hugeInsert(6_900_000)); r.Kind != KindInsert || !reflect.DeepEqual(r.Writes, []string{"events_list"}) {
		t.Errorf("INSERT: %v writes %v", r.Kind, r.Writes)
	}
}

// A long list classifies as the same statement with a short list: what an
// element hidden in the middle of it says (a call, a time word, a
// subquery, a cast) is never dropped with the constants around it.
func TestLongListsClassifyAsShort(t *testing.T) {
	list := func(n int, mid string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == n/2 && mid != "" {
				b.WriteString(mid)
				continue
			}
			switch i % 4 {
			case 0:
				b.WriteString(strconv.Itoa(i))
			case 1:
				b.WriteString("'s" + strconv.Itoa(i) + "'")
			case 2:
				b.WriteString("-" + strconv.Itoa(i))
			default:
				b.WriteString("$" + strconv.Itoa(i%9+1))
			}
		}
		return b.String()
	}
	templates := []string{
		"SELECT * FROM lt WHERE id IN (%s)",
		"SELECT * FROM lt WHERE id = ANY(ARRAY[%s])",
		"SELECT %s FROM lt",
		"INSERT INTO lt VALUES (%s)",
		"INSERT INTO lt (a, b) VALUES (1, 'x'), (%s), (2, 'y')",
		"SELECT f(%s) FROM lt",
		"SELECT set_config('a', 'b', false), g(%s)",
		"UPDATE lt SET a = 1 WHERE id IN (%s)",
	}
	mids := []string{
		"", "nextval('seq_lt')", "now()", "'today'", "'now'::timestamptz", "(SELECT x FROM other_lt)",
		"my_fn(1)", "(1, 2)", "((3))", "(4, 'tomorrow')", "x'1f'", "E'yesterday'", "U&'\\0074oday'",
		"$$today$$", "'to' \n 'day'", "$42", "lt.col", "(SELECT 1) ; DELETE FROM gone_lt", "1 FOR UPDATE",
		"pg_advisory_lock(1)", "'a' || 'b'", "1::regclass", "ARRAY[(1), (SELECT y FROM arr_lt)]",
	}
	for _, tpl := range templates {
		for _, mid := range mids {
			short := strings.Replace(tpl, "%s", list(7, mid), 1)
			long := strings.Replace(tpl, "%s", list(3000, mid), 1)
			a, b := Parse(short), Parse(long)
			a.Normalized, b.Normalized = "", ""
			a.Shape, b.Shape, a.ShapeKey, b.ShapeKey = "", "", "", ""
			for i := range a.Statements {
				if i < len(b.Statements) {
					b.Statements[i].Reason = a.Statements[i].Reason
				}
			}
			if !reflect.DeepEqual(summary(a), summary(b)) {
				t.Errorf("template %q, element %q:\nshort %+v\nlong  %+v", tpl, mid, summary(a), summary(b))
			}
		}
	}
}

// summary is what a Result tells the driver, parameter count and texts aside (a short
// list may hold fewer $n).
func summary(r *Result) Result {
	s := *r
	s.Normalized, s.Params, s.Reason = "", 0, ""
	s.Shape, s.ShapeKey = "", ""
	s.Statements = nil
	for _, st := range r.Statements {
		st.Reason = ""
		s.Statements = append(s.Statements, st)
	}
	return s
}

func BenchmarkParseHuge(b *testing.B) {
	for name, sql := range map[string]string{"IN list": hugeIn(6_900_000), "INSERT": hugeInsert(6_900_000)} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(sql)))
			b.ReportAllocs()
			for b.Loop() {
				Parse(sql)
			}
		})
	}
}
