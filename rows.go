package sqlflight

import (
	"database/sql/driver"
	"github.com/sqlflight/sqlflight/internal/wire"
	"io"
	"reflect"
	"time"
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

// column is what the parent rows said of one column, for every
// ColumnType* interface they implement.
type column struct {
	scanType         reflect.Type
	dbType           string
	length           int64
	lengthOK         bool
	nullable, nullOK bool
	precision, scale int64
	precisionScaleOK bool
}

// resultSet is one materialized result set: values row-major.
type resultSet struct {
	names []string
	cols  []column
	vals  []driver.Value
	n     int // rows (a result may have rows of no column)
}

func (rs *resultSet) rows() int { return rs.n }

// result is an immutable materialized result: every result set, the shape of
// the parent rows, and an estimate of its size in memory.
type result struct {
	sets  []resultSet
	mask  uint16
	bytes int64
}

// empty reports whether the result has no row in any result set.
func (r *result) empty() bool {
	for i := range r.sets {
		if r.sets[i].n > 0 {
			return false
		}
	}
	return true
}

type limits struct {
	rows  int
	bytes int64
}

// materialize reads rows to the end, deep-copying every value, and closes
// them. If the result turns out larger than lim, or holds a value it cannot
// copy safely, it stops and returns handoff: rows that replay what was read
// and then go on reading the parent, for the leader alone. A read error
// fails the whole result: nothing partial is ever shared.
func materialize(rows driver.Rows, lim limits) (res *result, handoff *replay, err error) {
	res = &result{mask: shareMask(rows, mirrorRowsMask(rows))}
	total := 0
	for {
		rs := captureColumns(rows, res.mask)
		res.bytes += int64(len(rs.names)) * 96 // name, column metadata
		dest := make([]driver.Value, len(rs.names))
		for {
			err := rows.Next(dest)
			if err == io.EOF {
				break
			}
			if err != nil {
				_ = rows.Close()
				return nil, nil, err
			}
			total++
			shareable := true
			for i, v := range dest {
				var n int64
				dest[i], n, shareable = copyValue(v, shareable)
				res.bytes += n
			}
			rs.vals = append(rs.vals, dest...)
			rs.n++
			if !shareable || total > lim.rows || res.bytes > lim.bytes {
				res.sets = append(res.sets, rs)
				return nil, &replay{res: res, tail: rows}, nil
			}
		}
		res.sets = append(res.sets, rs)
		nrs, ok := rows.(driver.RowsNextResultSet)
		if !ok || !nrs.HasNextResultSet() {
			break
		}
		if err := nrs.NextResultSet(); err == io.EOF {
			break
		} else if err != nil {
			_ = rows.Close()
			return nil, nil, err
		}
	}
	if err := rows.Close(); err != nil {
		return nil, nil, err
	}
	return res, nil, nil
}

func captureColumns(rows driver.Rows, mask uint16) resultSet {
	names := rows.Columns()
	rs := resultSet{names: append([]string(nil), names...), cols: make([]column, len(names))}
	for i := range rs.cols {
		c := &rs.cols[i]
		if mask&rowsScanType != 0 {
			c.scanType = rows.(driver.RowsColumnTypeScanType).ColumnTypeScanType(i)
		}
		if mask&rowsDatabaseTypeName != 0 {
			c.dbType = rows.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(i)
		}
		if mask&rowsLength != 0 {
			c.length, c.lengthOK = rows.(driver.RowsColumnTypeLength).ColumnTypeLength(i)
		}
		if mask&rowsNullable != 0 {
			c.nullable, c.nullOK = rows.(driver.RowsColumnTypeNullable).ColumnTypeNullable(i)
		}
		if mask&rowsPrecisionScale != 0 {
			c.precision, c.scale, c.precisionScaleOK = rows.(driver.RowsColumnTypePrecisionScale).ColumnTypePrecisionScale(i)
		}
	}
	return rs
}

// copyValue returns a copy of v that shares no memory with the driver, its
// estimated size, and whether v may be shared: values of types outside
// driver.Value may hold references the copy cannot see.
func copyValue(v driver.Value, shareable bool) (driver.Value, int64, bool) {
	switch v := v.(type) {
	case nil, int64, float64, bool, string, time.Time:
		return v, wire.Size(v), shareable
	case []byte:
		if v == nil {
			return v, wire.Size(v), shareable
		}
		return append(make([]byte, 0, len(v)), v...), wire.Size(v), shareable
	}
	return v, wire.Size(nil), false
}

// replay is one caller's cursor over a shared result. If tail is set, the
// result is a prefix and tail goes on reading the parent after it (the
// leader's rows of a result too large to share); once tail moved to a later
// result set, replay only delegates (onParent).
type replay struct {
	res      *result
	set      int
	pos      int // next row of res.sets[set]
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
	return mirrorRows(&replay{res: res}, res.mask&mirrorRowsAll)
}

func (r *replay) cur() *resultSet { return &r.res.sets[r.set] }

// onTail reports whether the buffered rows are used up and the parent rows
// take over.
func (r *replay) onTail() bool {
	return r.onParent || (r.tail != nil && r.set == len(r.res.sets)-1 && r.pos >= r.cur().rows())
}

func (r *replay) Columns() []string {
	if r.onParent {
		return r.tail.Columns()
	}
	return r.cur().names
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
	rs := r.cur()
	if r.pos >= rs.rows() {
		return io.EOF
	}
	n := len(rs.names)
	row := rs.vals[r.pos*n : (r.pos+1)*n]
	for i, v := range row {
		if b, ok := v.([]byte); ok && b != nil {
			v = append(make([]byte, 0, len(b)), b...)
		}
		dest[i] = v
	}
	r.pos++
	return nil
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
	if r.tail != nil && r.set == len(r.res.sets)-1 {
		return r.tail.(driver.RowsNextResultSet).HasNextResultSet()
	}
	return r.set < len(r.res.sets)-1
}

func (r *replay) NextResultSet() error {
	if r.tail != nil && r.set == len(r.res.sets)-1 {
		r.onParent = true
		return r.tail.(driver.RowsNextResultSet).NextResultSet()
	}
	if r.set >= len(r.res.sets)-1 {
		return io.EOF
	}
	r.set++
	r.pos = 0
	return nil
}

func (r *replay) ColumnTypeScanType(i int) reflect.Type {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeScanType).ColumnTypeScanType(i)
	}
	return r.cur().cols[i].scanType
}

func (r *replay) ColumnTypeDatabaseTypeName(i int) string {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(i)
	}
	return r.cur().cols[i].dbType
}

func (r *replay) ColumnTypeLength(i int) (int64, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeLength).ColumnTypeLength(i)
	}
	c := &r.cur().cols[i]
	return c.length, c.lengthOK
}

func (r *replay) ColumnTypeNullable(i int) (bool, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypeNullable).ColumnTypeNullable(i)
	}
	c := &r.cur().cols[i]
	return c.nullable, c.nullOK
}

func (r *replay) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if r.onParent {
		return r.tail.(driver.RowsColumnTypePrecisionScale).ColumnTypePrecisionScale(i)
	}
	c := &r.cur().cols[i]
	return c.precision, c.scale, c.precisionScaleOK
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
