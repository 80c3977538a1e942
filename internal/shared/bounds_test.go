package shared_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/shared"
)

// pins has the shape of the root package's RowPins.
type pins struct {
	Table   string
	Columns []string
	Values  [][]string
}

// TestBoundedTables: an invalidation names tables one by one only within
// its bounds.
func TestBoundedTables(t *testing.T) {
	many := make([]string, shared.MaxMessageTables+1)
	for i := range many {
		many[i] = fmt.Sprint("t", i)
	}
	long := strings.Repeat("x", shared.MaxTableName)
	heavy := slices.Repeat([]string{long}, shared.MaxMessageNames/shared.MaxTableName+1)
	for _, c := range []struct {
		name   string
		tables []string
		want   bool
	}{
		{"none", nil, true},
		{"some", []string{"items", "users"}, true},
		{"as many as allowed", many[:shared.MaxMessageTables], true},
		{"too many", many, false},
		{"longest name", []string{long}, true},
		{"name too long", []string{long + "x"}, false},
		{"a NUL", []string{"it\x00ems"}, false},
		{"too many bytes", heavy, false},
	} {
		if got := shared.BoundedTables(c.tables); got != c.want {
			t.Errorf("%s: BoundedTables = %v", c.name, got)
		}
	}
}

// TestBoundRows: row writes that are not well formed, or past the bounds,
// become writes to their tables; the others are kept in order, and the
// caller's tables are not written to.
func TestBoundRows(t *testing.T) {
	good := pins{"items", []string{"id"}, [][]string{{"1", "2"}}}
	for _, c := range []struct {
		name string
		rp   pins
	}{
		{"no column", pins{"a", nil, nil}},
		{"values not matching columns", pins{"a", []string{"id"}, nil}},
		{"columns not sorted", pins{"a", []string{"b", "a"}, [][]string{{"1"}, {"2"}}}},
		{"columns not distinct", pins{"a", []string{"a", "a"}, [][]string{{"1"}, {"2"}}}},
		{"empty column", pins{"a", []string{""}, [][]string{{"1"}}}},
		{"NUL in a column", pins{"a", []string{"i\x00d"}, [][]string{{"1"}}}},
		{"NUL in the table", pins{"a\x00", []string{"id"}, [][]string{{"1"}}}},
		{"table too long", pins{strings.Repeat("a", shared.MaxTableName+1), []string{"id"}, [][]string{{"1"}}}},
		{"too many values", pins{"a", []string{"id"}, [][]string{make([]string, shared.MaxMessagePins+1)}}},
		{"names too long", pins{"a", []string{"id"}, [][]string{{strings.Repeat("v", shared.MaxMessageNames)}}}},
	} {
		base := make([]string, 1, 4)
		base[0] = "users"
		tables, rows := shared.BoundRows(base, []pins{good, c.rp, good})
		if !slices.Equal(tables, []string{"users", c.rp.Table}) || len(rows) != 2 ||
			rows[0].Table != "items" || rows[1].Table != "items" {
			t.Errorf("%s: BoundRows = %q, %+v", c.name, tables, rows)
		}
		if base[:2][1] != "" {
			t.Errorf("%s: BoundRows wrote to its caller's array", c.name)
		}
	}
	// Values count together: the second write that passes the bound moves.
	half := pins{"a", []string{"id"}, [][]string{make([]string, shared.MaxMessagePins/2+1)}}
	second := half
	second.Table = "b"
	tables, rows := shared.BoundRows(nil, []pins{half, second})
	if !slices.Equal(tables, []string{"b"}) || len(rows) != 1 || rows[0].Table != "a" {
		t.Fatalf("BoundRows = %q, %+v", tables, rows)
	}
	if tables, rows := shared.BoundRows([]string{"x"}, []pins(nil)); !slices.Equal(tables, []string{"x"}) || rows != nil {
		t.Fatalf("no rows: %q, %+v", tables, rows)
	}
}

// TestRowsFlat: the canonical form names every table, column and value
// with their counts, so that no two sets of rows share it.
func TestRowsFlat(t *testing.T) {
	got := shared.RowsFlat([]pins{
		{"items", []string{"id", "kind"}, [][]string{{"1", "2"}, {}}},
		{"users", []string{"id"}, nil}, // a column without its values has none
	})
	want := []string{"items", "2", "id", "2", "1", "2", "kind", "0", "users", "1", "id", "0"}
	if !slices.Equal(got, want) {
		t.Fatalf("RowsFlat = %q", got)
	}
	a := shared.RowsFlat([]pins{{"t", []string{"a"}, [][]string{{"b", "c"}}}})
	b := shared.RowsFlat([]pins{{"t", []string{"a", "b"}, [][]string{{}, {"c"}}}})
	if slices.Equal(a, b) {
		t.Fatalf("two writes share %q", a)
	}
	if shared.RowsFlat([]pins(nil)) != nil {
		t.Fatal("no rows is not nil")
	}
}

// TestBound: a write past the bounds of a message is carried as a coarser
// one, and a write to every table names nothing.
func TestBound(t *testing.T) {
	row := pins{Table: "items", Columns: []string{"id"}, Values: [][]string{{"1"}}}
	if all, tables, rows := shared.Bound(true, []string{"items"}, []pins{row}); !all || tables != nil || rows != nil {
		t.Fatalf("every table: %v %q %v", all, tables, rows)
	}
	if all, tables, rows := shared.Bound(false, []string{"users"}, []pins{row}); all || !slices.Equal(tables, []string{"users"}) || len(rows) != 1 {
		t.Fatalf("within the bounds: %v %q %v", all, tables, rows)
	}
	bad := pins{Table: "items", Columns: []string{"b", "a"}, Values: [][]string{{"1"}, {"2"}}}
	if all, tables, rows := shared.Bound(false, nil, []pins{bad}); all || !slices.Equal(tables, []string{"items"}) || rows != nil {
		t.Fatalf("a row write not well formed: %v %q %v", all, tables, rows)
	}
	many := make([]string, shared.MaxMessageTables+1)
	for i := range many {
		many[i] = fmt.Sprint("t", i)
	}
	if all, tables, rows := shared.Bound(false, many, []pins{row}); !all || tables != nil || rows != nil {
		t.Fatalf("too many tables: %v %d %v", all, len(tables), rows)
	}
}
