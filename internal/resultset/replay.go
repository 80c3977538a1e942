package resultset

import (
	"database/sql/driver"
	"io"
	"reflect"
)

// NewReplay returns rows over res from its beginning.
func NewReplay(res *Result) *Replay { return &Replay{cur: NewCursor(res)} }

// NewHandoff returns rows that replay res, a prefix of what tail returned
// (Materialize stopped), and then go on reading tail: for the one caller
// the rows of a result too large to share go to.
func NewHandoff(res *Result, tail driver.Rows) *Replay {
	return &Replay{cur: NewCursor(res), tail: tail}
}

// Replay is one caller's rows over a Result: a driver.Rows with every
// optional Rows interface of database/sql (the caller exposes only those the
// Result's Mask claims). Each caller gets a Replay of its own; Next copies
// every []byte anew. A Replay made by NewHandoff replays a prefix and then
// goes on reading the parent rows (tail) it was read from; once tail moved
// to a later result set, it only delegates (onParent).
type Replay struct {
	cur      Cursor // over the recorded result
	tail     driver.Rows
	onParent bool
	// rowOnTail: the current row came from tail's NextRow (Go 1.27).
	rowOnTail bool
	// Release, when set, is called once by Close.
	Release func()
	closed  bool
}

// onTail reports whether the buffered rows are used up and the parent rows
// take over.
func (r *Replay) onTail() bool {
	return r.onParent || (r.tail != nil && r.cur.AtEnd())
}

// Columns returns the current result set's column names.
func (r *Replay) Columns() []string {
	if r.onParent {
		return r.tail.Columns()
	}
	return r.cur.Columns()
}

// Next copies the next row into dest. Every []byte is a fresh copy, so a
// caller that scans into sql.RawBytes and writes to it changes only its own.
func (r *Replay) Next(dest []driver.Value) error {
	if r.closed {
		return io.EOF
	}
	if r.onTail() {
		return r.tail.Next(dest)
	}
	return r.cur.Next(dest)
}

// Close closes the tail rows, if any, and calls Release once.
func (r *Replay) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	if r.tail != nil {
		err = r.tail.Close()
	}
	if r.Release != nil {
		r.Release()
	}
	return err
}

// HasNextResultSet reports whether another result set follows.
func (r *Replay) HasNextResultSet() bool {
	if r.tail != nil && r.cur.OnLastSet() {
		return r.tail.(driver.RowsNextResultSet).HasNextResultSet()
	}
	return r.cur.HasNextResultSet()
}

// NextResultSet moves to the next result set.
func (r *Replay) NextResultSet() error {
	if r.tail != nil && r.cur.OnLastSet() {
		r.onParent = true
		return r.tail.(driver.RowsNextResultSet).NextResultSet()
	}
	return r.cur.NextResultSet()
}

// ColumnTypeScanType returns column i's scan type as the parent reported it.
func (r *Replay) ColumnTypeScanType(i int) reflect.Type {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeScanType).ColumnTypeScanType(i)
	}
	return r.cur.Column(i).ScanType
}

// ColumnTypeDatabaseTypeName returns column i's database type name.
func (r *Replay) ColumnTypeDatabaseTypeName(i int) string {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(i)
	}
	return r.cur.Column(i).DBType
}

// ColumnTypeLength returns column i's length, if the parent knew it.
func (r *Replay) ColumnTypeLength(i int) (int64, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeLength).ColumnTypeLength(i)
	}
	c := r.cur.Column(i)
	return c.Length, c.LengthOK
}

// ColumnTypeNullable returns whether column i may be NULL, if the parent knew it.
func (r *Replay) ColumnTypeNullable(i int) (bool, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeNullable).ColumnTypeNullable(i)
	}
	c := r.cur.Column(i)
	return c.Nullable, c.NullOK
}

// ColumnTypePrecisionScale returns column i's precision and scale, if the parent knew them.
func (r *Replay) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypePrecisionScale).ColumnTypePrecisionScale(i)
	}
	c := r.cur.Column(i)
	return c.Precision, c.Scale, c.PrecisionScaleOK
}

// Mask returns the interfaces the replayed Result claims (Result.Mask).
func (r *Replay) Mask() uint16 { return r.cur.Result().Mask }
