package sqlflight

import (
	"context"
	"database/sql/driver"
	"reflect"

	"github.com/sqlflight/sqlflight/internal/resultset"
)

// rowsCommon is every Rows method a wrapper may be asked for under any Go
// release; rowsImpl adds those of the release built with (rows_go127.go),
// and mirrorRows exposes only those the parent rows had.
type rowsCommon interface {
	driver.Rows
	driver.RowsNextResultSet
	driver.RowsColumnTypeScanType
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypeNullable
	driver.RowsColumnTypePrecisionScale
}

// Method-only faces of the driver's optional Rows interfaces, which embed
// driver.Rows themselves.
type (
	nextResultSetFace interface {
		HasNextResultSet() bool
		NextResultSet() error
	}
	scanTypeFace         interface{ ColumnTypeScanType(int) reflect.Type }
	databaseTypeNameFace interface{ ColumnTypeDatabaseTypeName(int) string }
	lengthFace           interface{ ColumnTypeLength(int) (int64, bool) }
	nullableFace         interface{ ColumnTypeNullable(int) (bool, bool) }
	precisionScaleFace   interface {
		ColumnTypePrecisionScale(int) (int64, int64, bool)
	}
)

// The recorded result and its bounds are internal/resultset's; the root
// keeps its names for them.
type (
	column    = resultset.Column
	resultSet = resultset.Set
	result    = resultset.Result
	limits    = resultset.Limits
)

// materialize reads rows to the end, deep-copying every value, and closes
// them (resultset.Materialize), recording the interfaces a replay of the
// result claims. If the result turns out larger than lim, or holds a value
// it cannot copy safely, it stops and returns handoff: rows that replay what
// was read and then go on reading the parent, for the leader alone. A read
// error fails the whole result: nothing partial is ever shared.
func materialize(rows driver.Rows, lim limits) (res *result, handoff *replay, err error) {
	res, prefix, err := resultset.Materialize(rows, shareMask(rows, mirrorRowsMask(rows)), lim)
	if prefix {
		return nil, resultset.NewHandoff(res, rows), nil
	}
	return res, nil, err
}

// replay is one caller's rows over a shared result (resultset.Replay).
type replay = resultset.Replay

var _ rowsImpl = (*replay)(nil)

func newReplay(res *result) driver.Rows {
	// A result from the shared tier may come from a build that knows
	// interfaces this one does not.
	return mirrorRows(resultset.NewReplay(res), res.Mask&mirrorRowsAll)
}

// passRows wraps the parent's rows of a statement that went straight to the
// database: Close tells the connection its real connection is free again
// and, for a write, bumps the epochs of the tables it wrote once it is done.
type passRows struct {
	driver.Rows
	c       *conn
	written []write // what the statement may have written, outside a transaction
	// The rows of an origin query that went to its leader alone
	// (engine.origin): Close stops its timeout and ends its context.
	timeout originTimeout
	cancel  context.CancelCauseFunc
	caller  context.Context // the caller's, whose end ends the rows (await) …
	watch   func() bool     // … until this stops it
	closed  bool
}

var _ rowsImpl = (*passRows)(nil)

func newPassRows(c *conn, rows driver.Rows, written []write) driver.Rows {
	return mirrorRows(&passRows{Rows: rows, c: c, written: written}, mirrorRowsMask(rows))
}

func (p *passRows) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	if p.watch != nil {
		p.watch()
		if p.caller.Err() != nil {
			// Closed because the caller's context ended (database/sql
			// does so): do not wait for the rest of the rows either.
			p.cancel(context.Cause(p.caller))
		}
	}
	err := p.Rows.Close()
	p.c.openRows.Add(-1)
	// A write is complete only now: its epochs move again, so that no
	// flight started while it ran is joined after it, and the fleet hears
	// of it once.
	for _, w := range p.written {
		p.c.s.finishWrite(w)
	}
	if p.cancel != nil {
		p.timeout.stop()
		p.cancel(nil)
	}
	return err
}

func (p *passRows) HasNextResultSet() bool {
	return p.Rows.(driver.RowsNextResultSet).HasNextResultSet()
}

func (p *passRows) NextResultSet() error { return p.Rows.(driver.RowsNextResultSet).NextResultSet() }

func (p *passRows) ColumnTypeScanType(i int) reflect.Type {
	return p.Rows.(driver.RowsColumnTypeScanType).ColumnTypeScanType(i)
}

func (p *passRows) ColumnTypeDatabaseTypeName(i int) string {
	return p.Rows.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(i)
}

func (p *passRows) ColumnTypeLength(i int) (int64, bool) {
	return p.Rows.(driver.RowsColumnTypeLength).ColumnTypeLength(i)
}

func (p *passRows) ColumnTypeNullable(i int) (bool, bool) {
	return p.Rows.(driver.RowsColumnTypeNullable).ColumnTypeNullable(i)
}

func (p *passRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	return p.Rows.(driver.RowsColumnTypePrecisionScale).ColumnTypePrecisionScale(i)
}
