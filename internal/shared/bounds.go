package shared

import (
	"slices"
	"strconv"
	"strings"
)

// Bounds of one invalidation. It names at most MaxMessageTables tables,
// each at most MaxTableName bytes long and MaxMessageNames together: a
// write to more, or to longer names, is published (and, received, applied)
// as a write to every table. Its row writes hold at most MaxMessagePins
// values in all, their names (tables, columns, values) counted with the
// tables' against MaxMessageNames: a row write past them is published
// (and, received, applied) as a write to its table.
const (
	MaxMessageTables = 256
	MaxTableName     = 255
	// MaxMessageNames bounds the bytes of an invalidation's names
	// together, so that its message, whatever the bus's quoting (up to four
	// bytes a byte), stays within what a subscriber reads (redistier: 64
	// KiB).
	MaxMessageNames = 8 << 10
	MaxMessagePins  = 256
)

// Pins is the shape of a row write as an invalidation carries it (the
// root package's RowPins): Columns sorted and distinct, Values[i] the
// values of Columns[i].
type Pins interface{ ~row }

// row is a Pins's shape, whose fields can be read.
type row = struct {
	Table   string
	Columns []string
	Values  [][]string
}

// BoundedTables reports whether an invalidation may name tables one by
// one: not too many, none too long or holding a NUL, and not too many bytes
// together (see MaxMessageTables). An empty list is bounded.
func BoundedTables(tables []string) bool {
	if len(tables) > MaxMessageTables {
		return false
	}
	n := 0
	for _, t := range tables {
		if len(t) > MaxTableName || strings.IndexByte(t, 0) >= 0 {
			return false // a NUL separates a table from its rows in epoch names
		}
		n += len(t)
	}
	return n <= MaxMessageNames
}

// BoundRows returns tables and rows within the bounds of one invalidation:
// a row write that is not well formed (no column, columns not sorted and
// distinct, a NUL or nothing in a column's name, a NUL in its table's, a
// table name too long), or past the bounds (see MaxMessagePins), moves its
// table to tables (appended, without writing to tables' array). Rows are
// kept in order while they fit; with no rows, it returns tables and nil.
// The tables it returns may still not be bounded: see BoundedTables.
func BoundRows[P Pins](tables []string, rows []P) ([]string, []P) {
	if len(rows) == 0 {
		return tables, nil
	}
	n := 0
	for _, t := range tables {
		n += len(t)
	}
	pins := 0
	var kept []P
	var whole []string
	for _, rp := range rows {
		r := row(rp)
		size, vals, ok := rowSize(r)
		if !ok || pins+vals > MaxMessagePins || n+size+len(r.Table) > MaxMessageNames {
			whole = append(whole, r.Table)
			n += len(r.Table)
			continue
		}
		pins += vals
		n += size
		kept = append(kept, rp)
	}
	if len(whole) > 0 {
		tables = append(slices.Clip(tables), whole...)
	}
	return tables, kept
}

// Bound returns the write to tables as a whole (to every table, when all)
// and to the rows that rows pin as one invalidation carries it: a row
// write past the bounds (see BoundRows) becomes a write to its table, and
// tables past them (see BoundedTables) a write to every table. A write to
// every table names no table and no row.
func Bound[P Pins](all bool, tables []string, rows []P) (bool, []string, []P) {
	if all {
		return true, nil, nil
	}
	tables, rows = BoundRows(tables, rows)
	if !BoundedTables(tables) {
		return true, nil, nil
	}
	return false, tables, rows
}

// rowSize returns the bytes of rp's names and the number of its values,
// and whether it is well formed.
func rowSize(rp row) (size, vals int, ok bool) {
	if len(rp.Columns) == 0 || len(rp.Values) != len(rp.Columns) || len(rp.Table) > MaxTableName ||
		strings.IndexByte(rp.Table, 0) >= 0 {
		return 0, 0, false
	}
	size = len(rp.Table)
	for i, c := range rp.Columns {
		if c == "" || strings.IndexByte(c, 0) >= 0 || (i > 0 && rp.Columns[i-1] >= c) {
			return 0, 0, false
		}
		size += len(c)
		for _, v := range rp.Values[i] {
			size += len(v)
		}
		vals += len(rp.Values[i])
	}
	return size, vals, true
}

// RowsFlat is the canonical form of rows that an invalidation's MAC
// covers: for each, its table, its number of columns, and for each column
// its name, its number of values and the values (a column without its
// values counts as one with none). It returns nil for no rows.
func RowsFlat[P Pins](rows []P) []string {
	if len(rows) == 0 {
		return nil
	}
	var out []string
	for _, p := range rows {
		rp := row(p)
		out = append(out, rp.Table, strconv.Itoa(len(rp.Columns)))
		for i, c := range rp.Columns {
			var vals []string
			if i < len(rp.Values) {
				vals = rp.Values[i]
			}
			out = append(out, c, strconv.Itoa(len(vals)))
			out = append(out, vals...)
		}
	}
	return out
}
