package sqlflight

import (
	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
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

// rowDeps are the rows of one table a read depends on (epoch.RowDeps).
type rowDeps = epoch.RowDeps

// rowWrite is a write to one table whose touched rows are known to have
// pinned values (epoch.RowWrite).
type rowWrite = epoch.RowWrite

// readFilter is a statement's row filter (rowlevel.ReadFilter).
type readFilter = rowlevel.ReadFilter
