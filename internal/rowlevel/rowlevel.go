package rowlevel

import (
	"database/sql/driver"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/feed"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/verdict"
)

const (
	// MaxReadTags bounds the tags of one read; a read with more is judged
	// by its table.
	MaxReadTags = 64
	// MaxPinValues bounds the values a write pins one column to; past it
	// the column counts as not pinned.
	MaxPinValues = 256
	// MaxTxRows bounds the row writes a transaction remembers; past it its
	// commit moves its tables' epochs.
	MaxTxRows = 256
	// maxFilterText bounds the texts whose row filters are looked for (a
	// huge INSERT … VALUES writes its table as a whole).
	maxFilterText = 64 << 10
)

// Columns remembers the classes of the columns of tables (by
// epoch.TableKey, over every schema's table of that name), learned from
// the catalog under a schema generation: a new generation forgets them. A
// Set under an older generation is ignored; one under a newer generation,
// or into a map of epoch.MaxTables tables, starts a new map. It is not a
// memo.Map: a Set replaces a table's classes (learned again for every
// statement shape on that table) and the bound counts tables, not sets.
// Its zero value is ready; it is safe for concurrent use and must not be
// copied after first use.
type Columns struct {
	mu  sync.RWMutex
	gen uint64
	m   map[string]map[string]verdict.ColClass
}

// Get returns the classes of table's columns learned under gen, or nil.
func (rc *Columns) Get(table string, gen uint64) map[string]verdict.ColClass {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if rc.gen != gen {
		return nil
	}
	return rc.m[table]
}

// Set remembers cols as the classes of table's columns under gen.
func (rc *Columns) Set(table string, cols map[string]verdict.ColClass, gen uint64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if gen < rc.gen {
		return
	}
	if rc.m == nil || rc.gen != gen || len(rc.m) >= epoch.MaxTables {
		rc.m = make(map[string]map[string]verdict.ColClass)
		rc.gen = gen
	}
	rc.m[table] = cols
}

// operandValue returns the canonical value of op for class: null when it is
// NULL (no row equals it), false when it cannot be known.
func operandValue(class verdict.ColClass, op sqlscan.Operand, args []driver.NamedValue) (val string, null, ok bool) {
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
		val, ok = verdict.CanonArg(class, v)
		return val, false, ok
	case sqlscan.OpNumber:
		if class != verdict.ClassInt {
			return "", false, false
		}
		val, ok = verdict.CanonText(class, op.Text)
		return val, false, ok
	case sqlscan.OpString:
		val, ok = verdict.CanonText(class, op.Text)
		return val, false, ok
	case sqlscan.OpBool:
		if class != verdict.ClassBool {
			return "", false, false
		}
		val, ok = verdict.CanonText(class, op.Text)
		return val, false, ok
	}
	return "", false, false
}

// operandValues returns the canonical values of ops (NULLs left out), or
// false if one of them cannot be known.
func operandValues(class verdict.ColClass, ops []sqlscan.Operand, args []driver.NamedValue) ([]string, bool) {
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

// ReadFilter is the server-checked row filter of a statement text: the
// conditions on its one table that may tag its reads. It is read-only once
// made, and safe for concurrent use.
//
// A filter belongs to the text it was made from: a condition's values may
// be constants of that text (WHERE id = 4), and another text of the same
// statement shape (WHERE id = 5, sqlscan.Result.ShapeKey) reads other rows.
// Fits tells whether it tags the reads of another text too; For makes that
// text's own.
type ReadFilter struct {
	// Table is the filter's table (epoch.TableKey): its reads are tagged
	// only when what they depend on is that table alone.
	Table   string
	conds   []sqlscan.Condition
	classes []verdict.ColClass
	// literal: a condition's values hold a constant of the text.
	literal bool
	// cols and params are what it was made under (NewReadFilter's), for
	// For.
	cols   map[string]verdict.ColClass
	params []uint32
}

// Class returns the class of the column col of the filter's table, as the
// catalog told it (ClassNone: not one whose values compare as their
// canonical text).
func (rf *ReadFilter) Class(col string) verdict.ColClass { return rf.cols[col] }

// FilterOf returns the row filter of r, a single SELECT with equality
// conditions on one table, and that table's epoch.TableKey; or nil. nonStd
// is set when the server's strings are not standard-conforming.
func FilterOf(r *sqlscan.Result, nonStd bool) (*sqlscan.RowFilter, string) {
	if len(r.Statements) != 1 || r.Kind != sqlscan.KindSelect || len(r.Normalized) > maxFilterText {
		return nil, ""
	}
	rf, ok := sqlscan.Filter(r.Normalized, nonStd)
	if !ok || rf.Kind != sqlscan.KindSelect || len(rf.Where) == 0 {
		return nil, ""
	}
	return rf, epoch.TableKey(rf.Table)
}

// NewReadFilter keeps the conditions of rf (on table, as FilterOf named
// it) on columns of known classes in cols whose parameters the server
// typed (params, the parameters' type OIDs) in the same class; nil when
// none is left. cols and params must not change afterwards.
func NewReadFilter(rf *sqlscan.RowFilter, table string, cols map[string]verdict.ColClass, params []uint32) *ReadFilter {
	out := &ReadFilter{Table: table, cols: cols, params: params}
	for _, c := range rf.Where {
		class := cols[c.Column]
		if class == verdict.ClassNone {
			continue
		}
		ok := true
		for _, op := range c.Values {
			if op.Kind == sqlscan.OpParam && (op.Param < 1 || op.Param > len(params) ||
				verdict.ClassOfType(params[op.Param-1]) != class) {
				ok = false
			}
		}
		if ok {
			out.conds = append(out.conds, c)
			out.classes = append(out.classes, class)
			for _, op := range c.Values {
				out.literal = out.literal || op.Kind == sqlscan.OpNumber || op.Kind == sqlscan.OpString
			}
		}
	}
	if len(out.conds) == 0 {
		return nil
	}
	return out
}

// Fits reports whether rf, made from a text of r's statement shape, tags
// r's reads as they must be: its conditions hold no constant of the text it
// was made from (parameters alone: every text of the shape selects rows
// alike), or r is its own shape (no constant of r was replaced, so the
// only text of its shape is r's: rf was made from it).
func (rf *ReadFilter) Fits(r *sqlscan.Result) bool {
	return !rf.literal || r.ShapeKey == r.Normalized
}

// For returns the row filter of r, a text of the statement shape of the
// text rf was made from, when rf does not fit it: r's own conditions, kept
// under the column classes and parameter types rf was made under (the
// shape's, which the server gave), or nil when none is left (r's reads are
// judged by their table). nonStd is set when the server's strings are not
// standard-conforming.
func (rf *ReadFilter) For(r *sqlscan.Result, nonStd bool) *ReadFilter {
	f, table := FilterOf(r, nonStd)
	if f == nil || table != rf.Table {
		return nil
	}
	return NewReadFilter(f, table, rf.cols, rf.params)
}

// Deps returns the tags of one read of the filter's text with args, or
// nil (judged by its table): a condition whose values cannot be known is
// left out, the others still bound the rows read.
func (rf *ReadFilter) Deps(args []driver.NamedValue) *epoch.RowDeps {
	d := &epoch.RowDeps{Table: rf.Table}
	for i, c := range rf.conds {
		vals, ok := operandValues(rf.classes[i], c.Values, args)
		if !ok {
			continue // the other conditions still bound the rows read
		}
		if !slices.Contains(d.Cols, c.Column) {
			d.Cols = append(d.Cols, c.Column)
		}
		for _, v := range vals {
			d.Keys = append(d.Keys, epoch.TagKey(rf.Table, c.Column, v))
		}
		if len(d.Keys) > MaxReadTags {
			return nil
		}
	}
	if len(d.Cols) == 0 {
		return nil
	}
	slices.Sort(d.Cols)
	return d
}

// WriteOf returns what st, the one statement of r run with args, proves
// about the rows it writes, given the tables a write to its table may
// change (closure: the server's, or a tables= annotation's), the column
// classes cols remembers and the schema generation gen holds when they are
// looked up: false when nothing (the table is written as a whole). nonStd
// is set when the server's strings are not standard-conforming.
func WriteOf(r *sqlscan.Result, st *sqlscan.Statement, args []driver.NamedValue, nonStd bool, closure []string, cols *Columns, gen *atomic.Uint64) (epoch.RowWrite, bool) {
	if len(r.Statements) != 1 || len(r.Normalized) > maxFilterText {
		return epoch.RowWrite{}, false
	}
	switch st.Kind {
	case sqlscan.KindInsert, sqlscan.KindUpdate, sqlscan.KindDelete:
	default:
		return epoch.RowWrite{}, false
	}
	rf, ok := sqlscan.Filter(r.Normalized, nonStd)
	if !ok {
		return epoch.RowWrite{}, false
	}
	table := epoch.TableKey(rf.Table)
	for _, t := range closure {
		// Cascading foreign keys or inheritance reach other rows (of this
		// table too, for a key that references its own table).
		if epoch.TableKey(t) != table {
			return epoch.RowWrite{}, false
		}
	}
	classes := cols.Get(table, gen.Load())
	if classes == nil {
		return epoch.RowWrite{}, false
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
			class := classes[cond.Column]
			if class == verdict.ClassNone {
				continue
			}
			if vals, ok := operandValues(class, cond.Values, args); ok {
				pin(cond.Column, vals)
			}
		}
		for _, a := range rf.Set {
			if _, ok := pins[a.Column]; !ok {
				continue // its old values are not known: it stays unpinned
			}
			v, null, ok := operandValue(classes[a.Column], a.Value, args)
			switch {
			case !ok:
				delete(pins, a.Column) // a new value that is not known
			case !null:
				pin(a.Column, []string{v})
			}
		}
	case sqlscan.KindInsert:
		for j, col := range rf.Columns {
			class := classes[col]
			if class == verdict.ClassNone || slices.Contains(rf.Columns[:j], col) {
				continue
			}
			vals := make([]string, 0, len(rf.Rows))
			ok := true
			for _, row := range rf.Rows {
				v, null, known := operandValue(class, row[j], args)
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
		if len(vals) > MaxPinValues {
			delete(pins, col)
		}
	}
	if len(pins) == 0 {
		return epoch.RowWrite{}, false
	}
	return epoch.RowWrite{Table: table, Pins: pins}, true
}

// changeRows returns what one change from a feed proves about the rows it
// touched: each column of a known class present in both its old and new
// values (in the one of them an INSERT or a DELETE has) is pinned to those
// values; false when no column is.
func changeRows(ch feed.Change, cols *Columns, gen *atomic.Uint64) (epoch.RowWrite, bool) {
	if ch.Whole || (ch.Old == nil && ch.New == nil) {
		return epoch.RowWrite{}, false
	}
	table := epoch.TableKey(ch.Table)
	classes := cols.Get(table, gen.Load())
	if classes == nil {
		return epoch.RowWrite{}, false
	}
	pins := map[string][]string{}
	for col, class := range classes {
		var vals []string
		ok := true
		for _, side := range [2]map[string]*string{ch.Old, ch.New} {
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
			cv, good := verdict.CanonText(class, *v)
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
		return epoch.RowWrite{}, false
	}
	return epoch.RowWrite{Table: table, Pins: pins}, true
}

// mergeRows returns one RowWrite for two writes to one table: the columns
// both pin, to the values either does; false when no column is left.
func mergeRows(a, b epoch.RowWrite) (epoch.RowWrite, bool) {
	out := epoch.RowWrite{Table: a.Table, Pins: map[string][]string{}}
	for col, va := range a.Pins {
		vb, ok := b.Pins[col]
		if !ok {
			continue
		}
		vals := append(slices.Clone(va), vb...)
		slices.Sort(vals)
		vals = slices.Compact(vals)
		if len(vals) <= MaxPinValues {
			out.Pins[col] = vals
		}
	}
	return out, len(out.Pins) > 0
}

// Changes returns what committed changes (one feed transaction, or one
// NOTIFY record) wrote, as one write: the tables written as a whole, and
// the row writes of the others, each table once, in the order of their
// first change; known is false (and the rest nil) when one of them may
// have changed any table. Each change pins the columns of its table whose
// values it gives (before and after, or the one side an INSERT or a
// DELETE has) to those values; a column stays pinned only if every change
// to its table pins it. A change to a table whose column classes cols does
// not know under the generation gen holds, or that gives no such column,
// and a whole-table change (TRUNCATE) write their table as a whole.
func Changes(cs []feed.Change, cols *Columns, gen *atomic.Uint64) (tables []string, rows []epoch.RowWrite, known bool) {
	whole := map[string]bool{}
	byTable := map[string]epoch.RowWrite{}
	var order []string
	for _, c := range cs {
		if c.Table == "" {
			return nil, nil, false
		}
		k := epoch.TableKey(c.Table)
		if whole[k] {
			continue
		}
		rw, ok := changeRows(c, cols, gen)
		if prev, seen := byTable[k]; ok && seen {
			rw, ok = mergeRows(prev, rw)
		}
		if !ok {
			whole[k] = true
			delete(byTable, k)
			tables = append(tables, k)
			continue
		}
		if _, seen := byTable[k]; !seen {
			order = append(order, k)
		}
		byTable[k] = rw
	}
	for _, k := range order {
		if rw, ok := byTable[k]; ok {
			rows = append(rows, rw)
		}
	}
	return tables, rows, true
}
