package sqlflight

import (
	"database/sql/driver"
	"fmt"
	"testing"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// tagged is a read of table depending on the rows whose column cols[i]
// equals one of vals[i].
func tagged(table string, cols []string, vals ...[]string) *rowDeps {
	d := &rowDeps{Table: table, Cols: cols}
	for i, c := range cols {
		for _, v := range vals[i] {
			d.Keys = append(d.Keys, tagKey(table, c, v))
		}
	}
	return d
}

func pinned(table string, kv ...any) rowWrite {
	rw := rowWrite{Table: table, Pins: map[string][]string{}}
	for i := 0; i < len(kv); i += 2 {
		rw.Pins[kv[i].(string)] = kv[i+1].([]string)
	}
	return rw
}

func TestReadFilterTags(t *testing.T) {
	r := sqlscan.Parse(`SELECT * FROM items WHERE tenant_id = $1 AND id IN ($2, '7') AND price = $3`)
	rf, table := readFilterOf(r, false)
	if rf == nil {
		t.Fatal("no filter")
	}
	cols := map[string]colClass{"id": classInt, "tenant_id": classUUID} // price: not taggable
	f := newReadFilter(rf, table, cols, []uint32{2950, 20, 1700})
	args := []driver.NamedValue{{Ordinal: 1, Value: "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}, {Ordinal: 2, Value: int64(6)},
		{Ordinal: 3, Value: "9.5"}}
	d := f.deps(args)
	want := tagged("items", []string{"id", "tenant_id"}, []string{"6", "7"}, []string{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"})
	if d == nil || fmt.Sprint(d.Cols) != fmt.Sprint(want.Cols) || len(d.Keys) != 3 {
		t.Fatalf("deps = %+v, want %+v", d, want)
	}
	// A parameter the server typed otherwise than its column: no tag on it.
	if f := newReadFilter(rf, table, cols, []uint32{25, 20, 1700}); f == nil || len(f.conds) != 1 || f.conds[0].Column != "id" {
		t.Fatalf("mistyped parameter kept: %+v", f)
	}
	// A value that cannot be put in canonical form leaves its condition out.
	args[1].Value = 6.5
	if d := f.deps(args); d == nil || fmt.Sprint(d.Cols) != "[tenant_id]" {
		t.Fatalf("deps with a float id = %+v", d)
	}
}

func sp(s string) *string { return &s }

// TestApplyChangesRows: changes from a feed end the reads of the rows they
// report, old and new values alike, and leave the others.
func TestApplyChangesRows(t *testing.T) {
	id5 := tagged("items", []string{"id"}, []string{"5"})
	id6 := tagged("items", []string{"id"}, []string{"6"})
	tenant7 := tagged("items", []string{"tenant_id"}, []string{"7"})
	tenant8 := tagged("items", []string{"tenant_id"}, []string{"8"})
	reads := map[string]*rowDeps{"id5": id5, "id6": id6, "tenant7": tenant7, "tenant8": tenant8, "table": nil}
	all := func(except ...string) map[string]bool {
		m := map[string]bool{"id5": true, "id6": true, "tenant7": true, "tenant8": true, "table": true}
		for _, e := range except {
			delete(m, e)
		}
		return m
	}
	for _, c := range []struct {
		name  string
		cs    []change
		known bool // the table's column types were learned
		stale map[string]bool
	}{
		{"insert", []change{{table: "public.items", new: map[string]*string{"id": sp("5"), "tenant_id": sp("7"), "name": sp("a")}}}, true,
			map[string]bool{"id5": true, "tenant7": true, "table": true}},
		{"update moving tenant", []change{{table: "public.items",
			old: map[string]*string{"id": sp("5"), "tenant_id": sp("7")},
			new: map[string]*string{"id": sp("5"), "tenant_id": sp("8"), "name": sp("b")}}}, true,
			map[string]bool{"id5": true, "tenant7": true, "tenant8": true, "table": true}},
		{"update with the key alone in old", []change{{table: "public.items",
			old: map[string]*string{"id": sp("5")},
			new: map[string]*string{"id": sp("5"), "tenant_id": sp("8")}}}, true,
			all("id6")},
		{"delete with the key alone", []change{{table: "public.items", old: map[string]*string{"id": sp("6")}}}, true,
			all("id5")},
		{"NULL tenant", []change{{table: "public.items", old: map[string]*string{"id": sp("5"), "tenant_id": nil},
			new: map[string]*string{"id": sp("5"), "tenant_id": nil}}}, true,
			map[string]bool{"id5": true, "table": true}},
		{"two changes, one without tenant", []change{
			{table: "public.items", new: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}},
			{table: "public.items", new: map[string]*string{"id": sp("6")}}}, true,
			all()},
		{"two changes", []change{
			{table: "public.items", new: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}},
			{table: "public.items", old: map[string]*string{"id": sp("9"), "tenant_id": sp("7")}}}, true,
			map[string]bool{"id5": true, "tenant7": true, "table": true}},
		{"non-canonical value", []change{{table: "public.items", new: map[string]*string{"id": sp("x5"), "tenant_id": sp("7")}}}, true,
			all("tenant8")},
		{"whole", []change{{table: "public.items", whole: true}}, true, all()},
		{"whole after rows", []change{{table: "public.items", new: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}},
			{table: "public.items", whole: true}}, true, all()},
		{"no values", []change{{table: "public.items"}}, true, all()},
		{"types not known", []change{{table: "public.items", new: map[string]*string{"id": sp("5"), "tenant_id": sp("7")}}}, false, all()},
		{"unknown table", []change{{new: map[string]*string{"id": sp("5")}}}, true, all()},
		{"other table", []change{{table: "public.other", new: map[string]*string{"id": sp("5")}}}, true, map[string]bool{}},
	} {
		s := New()
		if c.known {
			s.rowCols.set("items", map[string]colClass{"id": classInt, "tenant_id": classInt}, s.schemaGen.Load())
		}
		seq := s.epochs.Now()
		s.applyChanges(c.cs)
		for name, rows := range reads {
			if got := !s.epochs.UnchangedFor(seq, []string{"items"}, true, rows); got != c.stale[name] {
				t.Errorf("%s: read %s ended = %v, want %v", c.name, name, got, c.stale[name])
			}
		}
	}
}
