package sqlflight

import (
	"database/sql/driver"
	"slices"
	"sync"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// Row-level invalidation. A read whose statement reads one table only
// through equality conditions on columns of known types (WHERE id = $1,
// WHERE tenant_id = $1 AND id = $2, id IN (…)) depends on the rows those
// conditions select, and is tagged with (table, column, value) for each of
// them (rowDeps). A write that proves which values of which columns the rows
// it touches have, before and after (rowWrite: its pins), moves only those
// tags' epochs and the epoch of its set of pinned columns; the epochs type
// decides which entries that ends. Anything not proven moves the table's
// epoch, as a write did before. Values are compared in one canonical text
// form per column type, so that an argument, a literal in the SQL text and
// the change feed's text agree; only columns of a few types are ever tagged.

// colClass is how a column's values are compared and put in canonical
// form (pgverdict.ColClass).
type colClass = pgverdict.ColClass

// The column classes.
const (
	classNone = pgverdict.ClassNone
	classInt  = pgverdict.ClassInt
	classText = pgverdict.ClassText
	classUUID = pgverdict.ClassUUID
	classBool = pgverdict.ClassBool
)

const (
	// maxReadTags bounds the tags of one read; a read with more is
	// judged by its table.
	maxReadTags = 64
	// maxPinValues bounds the values a write pins one column to; past it
	// the column counts as not pinned.
	maxPinValues = 256
	// maxTxRows bounds the row writes a transaction remembers; past it
	// its commit moves its tables' epochs.
	maxTxRows = 256
	// maxFilterText bounds the texts whose row filters are looked for
	// (a huge INSERT … VALUES writes its table as a whole).
	maxFilterText = 64 << 10
)

// rowDeps are the rows of one table a read depends on (epoch.RowDeps).
type rowDeps = epoch.RowDeps

// rowWrite is a write to one table whose touched rows are known to have
// pinned values (epoch.RowWrite).
type rowWrite = epoch.RowWrite

// tagKey is the key of the tag (table, col, val) (epoch.TagKey).
func tagKey(table, col, val string) string { return epoch.TagKey(table, col, val) }

// rowColumns remembers the classes of the columns of tables (by tableKey,
// over every schema's table of that name), learned from the catalog under
// a schema generation: DDL through the Shield forgets them. A set under an
// older generation is ignored; one under a newer generation, or into a map
// of maxEpochTables tables, starts a new map. It is not a memo.Map: a set
// replaces a table's classes (learned again for every statement shape on
// that table) and the bound counts tables, not sets.
type rowColumns struct {
	mu  sync.RWMutex
	gen uint64
	m   map[string]map[string]colClass
}

// get returns the classes of table's columns learned under gen, or nil.
func (rc *rowColumns) get(table string, gen uint64) map[string]colClass {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if rc.gen != gen {
		return nil
	}
	return rc.m[table]
}

// set remembers cols as the classes of table's columns under gen.
func (rc *rowColumns) set(table string, cols map[string]colClass, gen uint64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if gen < rc.gen {
		return
	}
	if rc.m == nil || rc.gen != gen || len(rc.m) >= maxEpochTables {
		rc.m = make(map[string]map[string]colClass)
		rc.gen = gen
	}
	rc.m[table] = cols
}

// operandValue returns the canonical value of op for class: null when it is
// NULL (no row equals it), false when it cannot be known.
func operandValue(class colClass, op sqlscan.Operand, args []driver.NamedValue) (val string, null, ok bool) {
	switch op.Kind {
	case sqlscan.OpNull:
		return "", true, true
	case sqlscan.OpParam:
		n := op.Param
		if n < 1 || n > len(args) || args[n-1].Ordinal != n || args[n-1].Name != "" {
			return "", false, false
		}
		v := args[n-1].Value
		if v == nil {
			return "", true, true
		}
		val, ok = pgverdict.CanonArg(class, v)
		return val, false, ok
	case sqlscan.OpNumber:
		if class != classInt {
			return "", false, false
		}
		val, ok = pgverdict.CanonText(class, op.Text)
		return val, false, ok
	case sqlscan.OpString:
		val, ok = pgverdict.CanonText(class, op.Text)
		return val, false, ok
	case sqlscan.OpBool:
		if class != classBool {
			return "", false, false
		}
		val, ok = pgverdict.CanonText(class, op.Text)
		return val, false, ok
	}
	return "", false, false
}

// operandValues returns the canonical values of ops (NULLs left out), or
// false if one of them cannot be known.
func operandValues(class colClass, ops []sqlscan.Operand, args []driver.NamedValue) ([]string, bool) {
	vals := make([]string, 0, len(ops))
	for _, op := range ops {
		v, null, ok := operandValue(class, op, args)
		if !ok {
			return nil, false
		}
		if !null {
			vals = append(vals, v)
		}
	}
	return vals, true
}

// readFilter is the server-checked row filter of a statement shape: the
// conditions of its one table that may tag its reads.
type readFilter struct {
	table   string // tableKey
	conds   []sqlscan.Condition
	classes []colClass
}

// readFilterOf returns the row filter of r, a single SELECT with
// equality conditions on one table, and that table's tableKey; or nil. The
// read is tagged only when what it depends on (the server's tables, or a
// tables= annotation) is that table alone: decide checks.
func readFilterOf(r *sqlscan.Result, nonStd bool) (*sqlscan.RowFilter, string) {
	if len(r.Statements) != 1 || r.Kind != sqlscan.KindSelect || len(r.Normalized) > maxFilterText {
		return nil, ""
	}
	rf, ok := sqlscan.Filter(r.Normalized, nonStd)
	if !ok || rf.Kind != sqlscan.KindSelect || len(rf.Where) == 0 {
		return nil, ""
	}
	return rf, tableKey(rf.Table)
}

// newReadFilter keeps the conditions of rf on columns of known classes
// whose parameters the server typed in the same class.
func newReadFilter(rf *sqlscan.RowFilter, table string, cols map[string]colClass, params []uint32) *readFilter {
	out := &readFilter{table: table}
	for _, c := range rf.Where {
		class := cols[c.Column]
		if class == classNone {
			continue
		}
		ok := true
		for _, op := range c.Values {
			if op.Kind == sqlscan.OpParam && (op.Param < 1 || op.Param > len(params) ||
				pgverdict.ClassOfType(params[op.Param-1]) != class) {
				ok = false
			}
		}
		if ok {
			out.conds = append(out.conds, c)
			out.classes = append(out.classes, class)
		}
	}
	if len(out.conds) == 0 {
		return nil
	}
	return out
}

// deps returns the tags of one read of the filter's shape with args, or nil
// (judged by its table).
func (rf *readFilter) deps(args []driver.NamedValue) *rowDeps {
	d := &rowDeps{Table: rf.table}
	for i, c := range rf.conds {
		vals, ok := operandValues(rf.classes[i], c.Values, args)
		if !ok {
			continue // the other conditions still bound the rows read
		}
		if !slices.Contains(d.Cols, c.Column) {
			d.Cols = append(d.Cols, c.Column)
		}
		for _, v := range vals {
			d.Keys = append(d.Keys, tagKey(rf.table, c.Column, v))
		}
		if len(d.Keys) > maxReadTags {
			return nil
		}
	}
	if len(d.Cols) == 0 {
		return nil
	}
	slices.Sort(d.Cols)
	return d
}

// rowWriteOf returns what st, the one statement of f, proves about the
// rows it writes, given the tables a write to its table may change
// (closure: the server's, or a tables= annotation's): false when nothing
// (the table is written as a whole).
func (c *conn) rowWriteOf(f *fate, st *sqlscan.Statement, closure []string) (rowWrite, bool) {
	r := f.r
	if len(r.Statements) != 1 || len(r.Normalized) > maxFilterText {
		return rowWrite{}, false
	}
	switch st.Kind {
	case sqlscan.KindInsert, sqlscan.KindUpdate, sqlscan.KindDelete:
	default:
		return rowWrite{}, false
	}
	rf, ok := sqlscan.Filter(r.Normalized, c.sc.verdicts.NonStandard())
	if !ok {
		return rowWrite{}, false
	}
	table := tableKey(rf.Table)
	for _, t := range closure {
		// Cascading foreign keys or inheritance reach other rows (of this
		// table too, for a key that references its own table).
		if tableKey(t) != table {
			return rowWrite{}, false
		}
	}
	cols := c.s.rowCols.get(table, c.s.schemaGen.Load())
	if cols == nil {
		return rowWrite{}, false
	}
	pins := map[string][]string{}
	pin := func(col string, vals []string) {
		if old, ok := pins[col]; ok {
			vals = append(old, vals...)
		}
		slices.Sort(vals)
		pins[col] = slices.Compact(vals)
	}
	switch rf.Kind {
	case sqlscan.KindUpdate, sqlscan.KindDelete:
		for _, cond := range rf.Where {
			class := cols[cond.Column]
			if class == classNone {
				continue
			}
			if vals, ok := operandValues(class, cond.Values, f.args); ok {
				pin(cond.Column, vals)
			}
		}
		for _, a := range rf.Set {
			if _, ok := pins[a.Column]; !ok {
				continue // its old values are not known: it stays unpinned
			}
			v, null, ok := operandValue(cols[a.Column], a.Value, f.args)
			switch {
			case !ok:
				delete(pins, a.Column) // a new value that is not known
			case !null:
				pin(a.Column, []string{v})
			}
		}
	case sqlscan.KindInsert:
		for j, col := range rf.Columns {
			class := cols[col]
			if class == classNone || slices.Contains(rf.Columns[:j], col) {
				continue
			}
			vals := make([]string, 0, len(rf.Rows))
			ok := true
			for _, row := range rf.Rows {
				v, null, known := operandValue(class, row[j], f.args)
				if !known {
					ok = false
					break
				}
				if !null {
					vals = append(vals, v)
				}
			}
			if ok {
				pin(col, vals)
			}
		}
	}
	for col, vals := range pins {
		if len(vals) > maxPinValues {
			delete(pins, col)
		}
	}
	if len(pins) == 0 {
		return rowWrite{}, false
	}
	return rowWrite{Table: table, Pins: pins}, true
}

// changeRows returns what one change from a feed proves about the rows it
// touched: each column of a known class present in both its old and new
// values (in the one of them an INSERT or a DELETE has) is pinned to those
// values; false when no column is.
func (s *Shield) changeRows(ch change) (rowWrite, bool) {
	if ch.whole || (ch.old == nil && ch.new == nil) {
		return rowWrite{}, false
	}
	table := tableKey(ch.table)
	cols := s.rowCols.get(table, s.schemaGen.Load())
	if cols == nil {
		return rowWrite{}, false
	}
	pins := map[string][]string{}
	for col, class := range cols {
		var vals []string
		ok := true
		for _, side := range [2]map[string]*string{ch.old, ch.new} {
			if side == nil {
				continue
			}
			v, present := side[col]
			if !present {
				ok = false
				break
			}
			if v == nil {
				continue // NULL: equal to no value
			}
			cv, good := pgverdict.CanonText(class, *v)
			if !good {
				ok = false
				break
			}
			vals = append(vals, cv)
		}
		if ok {
			slices.Sort(vals)
			pins[col] = slices.Compact(vals)
		}
	}
	if len(pins) == 0 {
		return rowWrite{}, false
	}
	return rowWrite{Table: table, Pins: pins}, true
}

// mergeRows returns one rowWrite for two writes to one table: the columns
// both pin, to the values either does; false when no column is left.
func mergeRows(a, b rowWrite) (rowWrite, bool) {
	out := rowWrite{Table: a.Table, Pins: map[string][]string{}}
	for col, va := range a.Pins {
		vb, ok := b.Pins[col]
		if !ok {
			continue
		}
		vals := append(slices.Clone(va), vb...)
		slices.Sort(vals)
		vals = slices.Compact(vals)
		if len(vals) <= maxPinValues {
			out.Pins[col] = vals
		}
	}
	return out, len(out.Pins) > 0
}
