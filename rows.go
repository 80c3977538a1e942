package sqlflight

import (
	"database/sql/driver"
	"io"
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
		return nil, &replay{cur: resultset.NewCursor(res), tail: rows}, nil
	}
	return res, nil, err
}

// replay is one caller's cursor over a shared result. If tail is set, the
// result is a prefix and tail goes on reading the parent after it (the
// leader's rows of a result too large to share); once tail moved to a later
// result set, replay only delegates (onParent).
type replay struct {
	cur      resultset.Cursor // over the recorded result
	tail     driver.Rows
	onParent bool
	// rowOnTail: the current row came from tail's NextRow (Go 1.27).
	rowOnTail bool
	release   func() // called once by Close
	closed    bool
}

var _ rowsImpl = (*replay)(nil)

func newReplay(res *result) driver.Rows {
	// A result from the shared tier may come from a build that knows
	// interfaces this one does not.
	return mirrorRows(&replay{cur: resultset.NewCursor(res)}, res.Mask&mirrorRowsAll)
}

// onTail reports whether the buffered rows are used up and the parent rows
// take over.
func (r *replay) onTail() bool {
	return r.onParent || (r.tail != nil && r.cur.AtEnd())
}

func (r *replay) Columns() []string {
	if r.onParent {
		return r.tail.Columns()
	}
	return r.cur.Columns()
}

// Next copies the next row into dest. Every []byte is a fresh copy, so a
// caller that scans into sql.RawBytes and writes to it changes only its own.
func (r *replay) Next(dest []driver.Value) error {
	if r.closed {
		return io.EOF
	}
	if r.onTail() {
		return r.tail.Next(dest)
	}
	return r.cur.Next(dest)
}

func (r *replay) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	if r.tail != nil {
		err = r.tail.Close()
	}
	if r.release != nil {
		r.release()
	}
	return err
}

func (r *replay) HasNextResultSet() bool {
	if r.tail != nil && r.cur.OnLastSet() {
		return r.tail.(driver.RowsNextResultSet).HasNextResultSet()
	}
	return r.cur.HasNextResultSet()
}

func (r *replay) NextResultSet() error {
	if r.tail != nil && r.cur.OnLastSet() {
		r.onParent = true
		return r.tail.(driver.RowsNextResultSet).NextResultSet()
	}
	return r.cur.NextResultSet()
}

func (r *replay) ColumnTypeScanType(i int) reflect.Type {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeScanType).ColumnTypeScanType(i)
	}
	return r.cur.Column(i).ScanType
}

func (r *replay) ColumnTypeDatabaseTypeName(i int) string {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(i)
	}
	return r.cur.Column(i).DBType
}

func (r *replay) ColumnTypeLength(i int) (int64, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeLength).ColumnTypeLength(i)
	}
	c := r.cur.Column(i)
	return c.Length, c.LengthOK
}

func (r *replay) ColumnTypeNullable(i int) (bool, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeNullable).ColumnTypeNullable(i)
	}
	c := r.cur.Column(i)
	return c.Nullable, c.NullOK
}

func (r *replay) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypePrecisionScale).ColumnTypePrecisionScale(i)
	}
	c := r.cur.Column(i)
	return c.Precision, c.Scale, c.PrecisionScaleOK
}

// passRows wraps the parent's rows of a statement that went straight to the
// database: Close tells the connection its real connection is free again
// and, for a write, bumps the epochs of the tables it wrote once it is done.
type passRows struct {
	driver.Rows
	c       *conn
	written []write // what the statement may have written, outside a transaction
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
	err := p.Rows.Close()
	p.c.openRows.Add(-1)
	// A write is complete only now: its epochs move again, so that no
	// flight started while it ran is joined after it, and the fleet hears
	// of it once.
	for _, w := range p.written {
		p.c.s.finishWrite(w)
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
