package rowlevel_test

import (
	"database/sql/driver"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/feed"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/verdict"
)

// tagged is a read of table depending on the rows whose column cols[i]
// equals one of vals[i].
func tagged(table string, cols []string, vals ...[]string) *epoch.RowDeps {
	d := &epoch.RowDeps{Table: table, Cols: cols}
	for i, c := range cols {
		for _, v := range vals[i] {
			d.Keys = append(d.Keys, epoch.TagKey(table, c, v))
		}
	}
	return d
}

func TestReadFilterTags(t *testing.T) {
	r := sqlscan.Parse(`SELECT * FROM items WHERE tenant_id = $1 AND id IN ($2, '7') AND price = $3`)
	rf, table := rowlevel.FilterOf(r, false)
	if rf == nil {
		t.Fatal("no filter")
	}
	cols := map[string]verdict.ColClass{"id": verdict.ClassInt, "tenant_id": verdict.ClassUUID} // price: not taggable
	f := rowlevel.NewReadFilter(rf, table, cols, []uint32{2950, 20, 1700})
	args := []driver.NamedValue{{Ordinal: 1, Value: "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}, {Ordinal: 2, Value: int64(6)},
		{Ordinal: 3, Value: "9.5"}}
	d := f.Deps(args)
	want := tagged("items", []string{"id", "tenant_id"}, []string{"6", "7"}, []string{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"})
	if d == nil || fmt.Sprint(d.Cols) != fmt.Sprint(want.Cols) || len(d.Keys) != 3 {
		t.Fatalf("deps = %+v, want %+v", d, want)
	}
	// A parameter the server typed otherwise than its column: no tag on it.
	if f := rowlevel.NewReadFilter(rf, table, cols, []uint32{25, 20, 1700}); f == nil || len(f.Conds()) != 1 || f.Conds()[0].Column != "id" {
		t.Fatalf("mistyped parameter kept: %+v", f)
	}
	// A value that cannot be put in canonical form leaves its condition out.
	args[1].Value = 6.5
	if d := f.Deps(args); d == nil || fmt.Sprint(d.Cols) != "[tenant_id]" {
		t.Fatalf("deps with a float id = %+v", d)
	}
}

func sp(s string) *string { return &s }

// TestChangesRows: changes from a feed end the reads of the rows they
// report, old and new values alike, and leave the others.
func TestChangesRows(t *testing.T) {
	id5 := tagged("items", []string{"id"}, []string{"5"})
	id6 := tagged("items", []string{"id"}, []string{"6"})
	tenant7 := tagged("items", []string{"tenant_id"}, []string{"7"})
	tenant8 := tagged("items", []string{"tenant_id"}, []string{"8"})
	reads := map[string]*epoch.RowDeps{"id5": id5, "id6": id6, "tenant7": tenant7, "tenant8": tenant8, "table": nil}
	all := func(except ...string) map[string]bool {
		m := map[string]bool{"id5": true, "id6": true, "tenant7": true, "tenant8": true, "table": true}
		for _, e := range except {
			delete(m, e)
		}
		return m
	}
	for _, c := range []struct {
		name  string
		cs    []feed.Change
		known bool // the table's column types were learned
		stale map[string]bool
	}{
		{"insert", []feed.Change{{Table: "public.items", New: map[string]*string{"id": sp("5"), "tenant_id": sp("7"), "name": sp("a")}}}, true,
			map[string]bool{"id5": true, "tenant7": true, "table": true}},
		{"update moving tenant", []feed.Change{{Table: "public.items",
			Old: map[string]*string{"id": sp("5"), "tenant_id": sp("7")},
			New: map[string]*string{"id": sp("5"), "tenant_id": sp("8"), "name": sp("b")}}}, true,
			map[string]bool{"id5": true, "tenant7": true, "tenant8": true, "table": true}},
		{"update with the key alone in old", []feed.Change{{Table: "public.items",
			Old: map[string]*string{"id": sp("5")},
			New: map[string]*string{"id": sp("5"), "tenant_id": sp("8")}}}, true,
			all("id6")},
		{"delete with the key alone", []feed.Change{{Table: "public.items", Old: map[string]*string{"id": sp("6")}}}, true,
			all("id5")},
		{"NULL tenant", []feed.Change{{Table: "public.items", Old: map[string]*string{"id": sp("5"), "tenant_id": nil},
			New: map[string]*string{"id": sp("5"), "tenant_id": nil}}}, true,
			map[string]bool{"id5": true, "table": true}},
		{"two changes, one without tenant", []feed.Change{
			{Table: "public.items", New: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}},
			{Table: "public.items", New: map[string]*string{"id": sp("6")}}}, true,
			all()},
		{"two changes", []feed.Change{
			{Table: "public.items", New: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}},
			{Table: "public.items", Old: map[string]*string{"id": sp("9"), "tenant_id": sp("7")}}}, true,
			map[string]bool{"id5": true, "tenant7": true, "table": true}},
		{"non-canonical value", []feed.Change{{Table: "public.items", New: map[string]*string{"id": sp("x5"), "tenant_id": sp("7")}}}, true,
			all("tenant8")},
		{"whole", []feed.Change{{Table: "public.items", Whole: true}}, true, all()},
		{"whole after rows", []feed.Change{{Table: "public.items", New: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}},
			{Table: "public.items", Whole: true}}, true, all()},
		{"no values", []feed.Change{{Table: "public.items"}}, true, all()},
		{"types not known", []feed.Change{{Table: "public.items", New: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}}}, false, all()},
		{"unknown table", []feed.Change{{New: map[string]*string{"id": sp("5")}}}, true, all()},
		{"other table", []feed.Change{{Table: "public.other", New: map[string]*string{"id": sp("5")}}}, true, map[string]bool{}},
	} {
		var cols rowlevel.Columns
		var gen atomic.Uint64
		if c.known {
			cols.Set("items", map[string]verdict.ColClass{"id": verdict.ClassInt, "tenant_id": verdict.ClassInt}, gen.Load())
		}
		var e epoch.Epochs
		seq := e.Now()
		tables, rows, known := rowlevel.Changes(c.cs, &cols, &gen)
		e.BumpRows(tables, known, rows)
		for name, rows := range reads {
			if got := !e.UnchangedFor(seq, []string{"items"}, true, rows); got != c.stale[name] {
				t.Errorf("%s: read %s ended = %v, want %v", c.name, name, got, c.stale[name])
			}
		}
	}
}

// TestWriteOf: a statement's write pins the columns of known classes its
// conditions (and, for an INSERT, its rows) give, keeps a column an UPDATE
// sets only when its new value is known, and proves nothing when its
// closure reaches another table or its table's classes are not known
// under the current generation.
func TestWriteOf(t *testing.T) {
	var cols rowlevel.Columns
	var gen atomic.Uint64
	cols.Set("items", map[string]verdict.ColClass{"id": verdict.ClassInt, "tenant_id": verdict.ClassInt}, gen.Load())
	write := func(sql string, closure []string, args ...any) (epoch.RowWrite, bool) {
		r := sqlscan.Parse(sql)
		named := make([]driver.NamedValue, len(args))
		for i, a := range args {
			named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		}
		return rowlevel.WriteOf(r, &r.Statements[0], named, false, closure, &cols, &gen)
	}
	for _, c := range []struct {
		sql     string
		closure []string
		args    []any
		want    string // fmt of the pins; "" when nothing is proven
	}{
		{`UPDATE items SET name = $1 WHERE id = $2`, nil, []any{"a", int64(5)}, "map[id:[5]]"},
		{`UPDATE items SET id = $1 WHERE id = $2`, nil, []any{int64(6), int64(5)}, "map[id:[5 6]]"},
		{`UPDATE items SET id = $1 WHERE id = $2`, nil, []any{6.5, int64(5)}, ""},
		{`UPDATE items SET tenant_id = 8 WHERE id = 5`, nil, nil, "map[id:[5]]"},
		{`DELETE FROM items WHERE id IN (1, 2) AND tenant_id = $1`, []string{"public.items"}, []any{int64(7)}, "map[id:[1 2] tenant_id:[7]]"},
		{`INSERT INTO items (id, tenant_id, name) VALUES (1, $1, 'a'), (2, $1, 'b')`, nil, []any{int64(7)}, "map[id:[1 2] tenant_id:[7]]"},
		{`DELETE FROM items WHERE id = 1`, []string{"items", "orders"}, nil, ""},
		{`DELETE FROM other WHERE id = 1`, nil, nil, ""},
		{`SELECT * FROM items WHERE id = 1`, nil, nil, ""},
	} {
		rw, ok := write(c.sql, c.closure, c.args...)
		got := ""
		if ok {
			got = fmt.Sprint(rw.Pins)
			if rw.Table != "items" {
				t.Errorf("%s: table %q", c.sql, rw.Table)
			}
		}
		if got != c.want {
			t.Errorf("%s %v: pins %q, want %q", c.sql, c.args, got, c.want)
		}
	}
	gen.Add(1) // DDL: the classes learned before are not used
	if rw, ok := write(`DELETE FROM items WHERE id = 1`, nil); ok {
		t.Errorf("after a schema change: %+v", rw)
	}
}

// TestReadFilterPerText: the filter made from one text of a statement
// shape never tags the reads of another text of it by its own constants:
// that text gets its own filter, under the same classes and parameter
// types. A filter of parameters alone fits every text of its shape.
func TestReadFilterPerText(t *testing.T) {
	cols := map[string]verdict.ColClass{"id": verdict.ClassInt, "tenant_id": verdict.ClassInt}
	r4 := sqlscan.Parse(`SELECT id, v FROM items WHERE (id = 4)`)
	r5 := sqlscan.Parse(`SELECT id, v FROM items WHERE (id = 5)`)
	if r4.ShapeKey != r5.ShapeKey {
		t.Fatalf("two shapes: %q %q", r4.ShapeKey, r5.ShapeKey)
	}
	rf, table := rowlevel.FilterOf(r4, false)
	f4 := rowlevel.NewReadFilter(rf, table, cols, nil)
	if f4 == nil {
		t.Fatal("no filter for id = 4")
	}
	if f4.Fits(r5) {
		t.Fatal("the filter of id = 4 fits id = 5")
	}
	f5 := f4.For(r5, false)
	if d := f5.Deps(nil); d == nil || fmt.Sprint(d.Keys) != fmt.Sprint(tagged("items", []string{"id"}, []string{"5"}).Keys) {
		t.Fatalf("id = 5 tagged %+v", d)
	}
	if d := f4.Deps(nil); fmt.Sprint(d.Keys) != fmt.Sprint(tagged("items", []string{"id"}, []string{"4"}).Keys) {
		t.Fatalf("id = 4 tagged %+v", d)
	}
	// A text of the shape whose own conditions are not all proven: no
	// filter (a string with a backslash is never taken as a value).
	rs := sqlscan.Parse(`SELECT id, v FROM items WHERE (id = 4) AND (name = 'a')`)
	rb := sqlscan.Parse(`SELECT id, v FROM items WHERE (id = 4) AND (name = 'a\b')`)
	rf, table = rowlevel.FilterOf(rs, false)
	fs := rowlevel.NewReadFilter(rf, table, cols, nil)
	if rs.ShapeKey != rb.ShapeKey || fs == nil || fs.For(rb, false) != nil {
		t.Fatalf("the text with a backslash got a filter: %+v", fs.For(rb, false))
	}
	// Parameters alone (the constant is on a column that is not tagged):
	// one filter for every text of the shape.
	p1 := sqlscan.Parse(`SELECT * FROM items WHERE tenant_id = $1 AND name = 'a'`)
	p2 := sqlscan.Parse(`SELECT * FROM items WHERE tenant_id = $1 AND name = 'b'`)
	rf, table = rowlevel.FilterOf(p1, false)
	fp := rowlevel.NewReadFilter(rf, table, cols, []uint32{23})
	if fp == nil || !fp.Fits(p2) || p1.ShapeKey != p2.ShapeKey {
		t.Fatal("a filter of parameters alone does not fit its shape")
	}
	// A text that is its own shape (its constant stays: a time word):
	// its filter fits it.
	own := sqlscan.Parse(`SELECT * FROM items WHERE code = 'today'`)
	rf, table = rowlevel.FilterOf(own, false)
	fo := rowlevel.NewReadFilter(rf, table, map[string]verdict.ColClass{"code": verdict.ClassText}, nil)
	if own.ShapeKey != own.Normalized || fo == nil || !fo.Fits(own) {
		t.Fatalf("%q: shape %q, filter %+v", own.Normalized, own.ShapeKey, fo)
	}
}
