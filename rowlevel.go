package sqlflight

import (
	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Row-level invalidation (internal/rowlevel). A read whose statement reads
// one table only through equality conditions on columns of known types
// (WHERE id = $1, WHERE tenant_id = $1 AND id = $2, id IN (…)) depends on
// the rows those conditions select, and is tagged with (table, column,
// value) for each of them (rowDeps). A write that proves which values of
// which columns the rows it touches have, before and after (rowWrite: its
// pins), moves only those tags' epochs and the epoch of its set of pinned
// columns; the epochs type decides which entries that ends. Anything not
// proven moves the table's epoch, as a write did before. Values are
// compared in one canonical text form per column type, so that an
// argument, a literal in the SQL text and the change feed's text agree;
// only columns of a few types are ever tagged.
//
// A verdict is shared by every text of a statement shape (WHERE id = 4 and
// WHERE id = 5), but its row filter is the probed text's: its conditions
// may hold that text's constants. A read of another text of the shape is
// tagged by its own filter (rowsOf), made from its own text under the
// column classes and parameter types of the shape's, once per text and
// verdict; a read whose own conditions are not all proven is judged by
// its table.

// rowDeps are the rows of one table a read depends on (epoch.RowDeps).
type rowDeps = epoch.RowDeps

// rowWrite is a write to one table whose touched rows are known to have
// pinned values (epoch.RowWrite).
type rowWrite = epoch.RowWrite

// readFilter is a statement's row filter (rowlevel.ReadFilter).
type readFilter = rowlevel.ReadFilter

// textRows is what a scanned text keeps of its own row filter: the one
// derived for it under the verdict v (nil: its reads are judged by their
// table).
type textRows struct {
	v  *verdict
	rf *readFilter
}

// rowsOf returns the row filter that tags the reads of r under v, the
// verdict of its statement shape, whose Rows are not nil: v.Rows when they
// fit r (see rowlevel.ReadFilter.Fits), else r's own, made from its text
// once per text and verdict and kept on its scan (sqlscan.Result.Rows).
func (sc *scope) rowsOf(v *verdict, r *sqlscan.Result) *readFilter {
	rf := v.Rows
	if rf.Fits(r) {
		return rf
	}
	if tr, ok := r.Rows.Load().(*textRows); ok && tr.v == v {
		return tr.rf
	}
	own := rf.For(r, sc.verdicts.NonStandard())
	r.Rows.Store(&textRows{v: v, rf: own})
	return own
}
