package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
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

// colClass is how a column's values are compared and put in canonical form.
type colClass uint8

const (
	classNone colClass = iota // not taggable
	classInt                  // int2, int4, int8: decimal
	classText                 // text, varchar with a deterministic collation: the bytes
	classUUID                 // uuid: lower-case 8-4-4-4-12
	classBool                 // bool: "t" or "f"
)

// classOfType is the class of a column or parameter of type oid.
func classOfType(oid uint32) colClass {
	switch oid {
	case 20, 21, 23:
		return classInt
	case 25, 1043:
		return classText
	case 2950:
		return classUUID
	case 16:
		return classBool
	}
	return classNone
}

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

// rowDeps are the rows of one table a read depends on: those whose column
// cols[i] has one of the values its tags name.
type rowDeps struct {
	table string   // tableKey
	cols  []string // the tagged columns, sorted
	keys  []string // tagKey of each (column, value)
}

// rowWrite is a write to one table whose touched rows are known to have,
// before and after the write, column c equal to one of pins[c] (or NULL).
// Columns not in pins are not known; a rowWrite without pins is a write to
// the whole table.
type rowWrite struct {
	table string // tableKey
	pins  map[string][]string
}

func tagKey(table, col, val string) string { return table + "\x00" + col + "\x00" + val }

// rowColumns remembers the classes of the columns of tables (by tableKey,
// over every schema's table of that name), learned from the catalog under
// a schema generation: DDL through the Shield forgets them.
type rowColumns struct {
	mu  sync.RWMutex
	gen uint64
	m   map[string]map[string]colClass
}

func (rc *rowColumns) get(table string, gen uint64) map[string]colClass {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if rc.gen != gen {
		return nil
	}
	return rc.m[table]
}

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

// columnsQuery describes the columns of every relation whose name folds to
// $1 (epochs share one name over schemas and case): their type, whether they
// are generated, whether their collation compares bytes, and the relation's
// kind.
const columnsQuery = `SELECT a.attname::text, a.atttypid::oid, a.attgenerated <> '',
       COALESCE(co.collisdeterministic, true), c.relkind::text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
WHERE pg_catalog.lower(c.relname) = $1`

// queryColumns returns the taggable columns of the tables named table (a
// tableKey): a column is taggable when it has the same taggable class in
// every plain or partitioned table of that name; a name that also names
// another kind of relation (a view, a foreign table) has none.
func queryColumns(ctx context.Context, conn catalogSession, table string) (map[string]colClass, error) {
	rows, err := conn.query(ctx, columnsQuery, table)
	if err != nil {
		return nil, err
	}
	cols := map[string]colClass{}
	conflict := map[string]bool{}
	other := false
	for _, row := range rows {
		if len(row) != 5 || row[0] == nil || row[1] == nil || row[2] == nil || row[3] == nil || row[4] == nil {
			return nil, errors.New("sqlflight: unexpected answer to the columns query")
		}
		name, kind := *row[0], *row[4]
		t, err := strconv.ParseUint(*row[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("sqlflight: column type %q: %w", *row[1], err)
		}
		typ := uint32(t)
		generated, deterministic := *row[2] == "t", *row[3] == "t"
		if kind != "r" && kind != "p" {
			other = true
		}
		cl := classOfType(typ)
		if generated || (cl == classText && !deterministic) {
			cl = classNone
		}
		if old, ok := cols[name]; ok && old != cl {
			conflict[name] = true
		}
		cols[name] = cl
	}
	out := map[string]colClass{}
	if other {
		return out, nil
	}
	for name, cl := range cols {
		if cl != classNone && !conflict[name] {
			out[name] = cl
		}
	}
	return out, nil
}

// canonText puts s, a value in text form (a literal's, the feed's), in the
// canonical form of class, or reports false.
func canonText(class colClass, s string) (string, bool) {
	switch class {
	case classInt:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	case classText:
		return s, true
	case classUUID:
		return canonUUID(s)
	case classBool:
		switch strings.ToLower(s) {
		case "t", "true":
			return "t", true
		case "f", "false":
			return "f", true
		}
	}
	return "", false
}

// canonUUID accepts the forms PostgreSQL's uuid input does (upper or lower
// case, hyphens between groups of four digits, braces) as far as they are
// unambiguous, and returns the standard lower-case form.
func canonUUID(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '{' && s[len(s)-1] == '}' {
		s = s[1 : len(s)-1]
	}
	var hex [32]byte
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' && n > 0 && n%4 == 0 && i+1 < len(s) && s[i+1] != '-':
			continue
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", false
		}
		if n == 32 {
			return "", false
		}
		hex[n] = c
		n++
	}
	if n != 32 {
		return "", false
	}
	h := string(hex[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], true
}

// canonArg puts an argument's value in the canonical form of class, or
// reports false for a type whose encoding it does not know for sure.
func canonArg(class colClass, v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return canonText(class, x)
	case []byte:
		if class == classUUID {
			return "", false // sent as the 16 raw bytes
		}
		return canonText(class, string(x))
	}
	switch class {
	case classInt:
		switch x := v.(type) {
		case int64:
			return strconv.FormatInt(x, 10), true
		case int:
			return strconv.FormatInt(int64(x), 10), true
		case int32:
			return strconv.FormatInt(int64(x), 10), true
		case int16:
			return strconv.FormatInt(int64(x), 10), true
		case int8:
			return strconv.FormatInt(int64(x), 10), true
		case uint32:
			return strconv.FormatUint(uint64(x), 10), true
		case uint16:
			return strconv.FormatUint(uint64(x), 10), true
		case uint8:
			return strconv.FormatUint(uint64(x), 10), true
		}
	case classUUID:
		if b, ok := v.([16]byte); ok {
			const digits = "0123456789abcdef"
			var h [32]byte
			for i, c := range b {
				h[2*i], h[2*i+1] = digits[c>>4], digits[c&15]
			}
			s := string(h[:])
			return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32], true
		}
	case classBool:
		if b, ok := v.(bool); ok {
			if b {
				return "t", true
			}
			return "f", true
		}
	}
	return "", false
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
		val, ok = canonArg(class, v)
		return val, false, ok
	case sqlscan.OpNumber:
		if class != classInt {
			return "", false, false
		}
		val, ok = canonText(class, op.Text)
		return val, false, ok
	case sqlscan.OpString:
		val, ok = canonText(class, op.Text)
		return val, false, ok
	case sqlscan.OpBool:
		if class != classBool {
			return "", false, false
		}
		val, ok = canonText(class, op.Text)
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
				classOfType(params[op.Param-1]) != class) {
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
	d := &rowDeps{table: rf.table}
	for i, c := range rf.conds {
		vals, ok := operandValues(rf.classes[i], c.Values, args)
		if !ok {
			continue // the other conditions still bound the rows read
		}
		if !slices.Contains(d.cols, c.Column) {
			d.cols = append(d.cols, c.Column)
		}
		for _, v := range vals {
			d.keys = append(d.keys, tagKey(rf.table, c.Column, v))
		}
		if len(d.keys) > maxReadTags {
			return nil
		}
	}
	if len(d.cols) == 0 {
		return nil
	}
	slices.Sort(d.cols)
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
	rf, ok := sqlscan.Filter(r.Normalized, c.sc.nonStandard.Load())
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
	return rowWrite{table: table, pins: pins}, true
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
			cv, good := canonText(class, *v)
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
	return rowWrite{table: table, pins: pins}, true
}

// mergeRows returns one rowWrite for two writes to one table: the columns
// both pin, to the values either does; false when no column is left.
func mergeRows(a, b rowWrite) (rowWrite, bool) {
	out := rowWrite{table: a.table, pins: map[string][]string{}}
	for col, va := range a.pins {
		vb, ok := b.pins[col]
		if !ok {
			continue
		}
		vals := append(slices.Clone(va), vb...)
		slices.Sort(vals)
		vals = slices.Compact(vals)
		if len(vals) <= maxPinValues {
			out.pins[col] = vals
		}
	}
	return out, len(out.pins) > 0
}
