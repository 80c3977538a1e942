// Package resultset records the rows a query returned so that many callers
// can read them: a Result is every result set of a driver.Rows, materialized
// within limits, and a Cursor is one reader's position in it.
//
// Materialize reads a driver.Rows to the end and keeps a copy of every
// value. A driver may reuse the memory of a []byte it returned once Next is
// called again (pgx does), so every []byte is copied into memory of the
// Result's own; strings, numbers, booleans and times are immutable and kept
// as they are. A value of a type outside driver.Value may hold references a
// copy cannot see, so Materialize never returns a whole result holding one.
//
// Materialize stops as soon as the rows read exceed Limits (more rows in all
// result sets than Limits.Rows, or an estimate of more bytes than
// Limits.Bytes: 96 a column, wire.Size a value) or a value cannot be copied
// safely: it then returns what it read as a prefix and leaves the rows open,
// positioned after the last row read, for a single caller to go on reading;
// a prefix is not for sharing. A read error fails the whole result: nothing
// partial is returned beside an error.
//
// A Result that Materialize returned whole is immutable: nothing in this
// package writes to it again, and it is safe for concurrent readers as long
// as nobody else writes to it either. A Cursor gives back the values of the
// Result without handing out its memory: every []byte a reader receives is
// a fresh copy, so a reader that writes to one (sql.RawBytes does) changes
// only its own.
//
// A Replay is a Cursor as a driver.Rows, with every optional Rows
// interface of database/sql (under Go 1.27 also RowsColumnScanner, scanning
// as pgx v5's stdlib rows do): one caller's rows over a shared Result. A
// handoff (NewHandoff) replays a prefix and then reads on from the rows it
// was read from, for the one caller a result too large to share goes to.
//
// The package does not know the optional driver interfaces the rows had
// beyond recording what they said of their columns: Result.Mask is the
// caller's record of them, kept and returned untouched (the caller exposes
// of a Replay only the interfaces the mask claims).
package resultset

import (
	"database/sql/driver"
	"io"
	"reflect"
	"time"

	"github.com/sqlflight/sqlflight/internal/wire"
)

// Column is what the parent rows said of one column, for every ColumnType*
// interface they implement; a field of an interface they do not implement
// is zero.
type Column struct {
	ScanType         reflect.Type // driver.RowsColumnTypeScanType
	DBType           string       // driver.RowsColumnTypeDatabaseTypeName
	Length           int64        // driver.RowsColumnTypeLength
	LengthOK         bool
	Nullable, NullOK bool // driver.RowsColumnTypeNullable
	Precision, Scale int64
	PrecisionScaleOK bool // driver.RowsColumnTypePrecisionScale
}

// Set is one materialized result set: its column names and columns, and
// its values row-major (N rows of len(Names) values).
type Set struct {
	Names []string
	Cols  []Column
	Vals  []driver.Value
	N     int // rows (a result may have rows of no column)
}

// Rows returns the number of rows of the set, which may be positive for a
// set of no column.
func (rs *Set) Rows() int { return rs.N }

// Result is a materialized result: every result set, the caller's mask of
// the parent rows' optional interfaces, and an estimate of its size in
// memory in bytes. It is immutable once materialized.
type Result struct {
	Sets  []Set
	Mask  uint16
	Bytes int64
}

// Empty reports whether the result has no row in any result set (true for
// a result of no set).
func (r *Result) Empty() bool {
	for i := range r.Sets {
		if r.Sets[i].N > 0 {
			return false
		}
	}
	return true
}

// Limits bound a result that may be shared: at most Rows rows in all its
// result sets and an estimate of at most Bytes bytes.
type Limits struct {
	Rows  int
	Bytes int64
}

// Within reports whether both of l's limits are at most m's.
func (l Limits) Within(m Limits) bool { return l.Rows <= m.Rows && l.Bytes <= m.Bytes }

// columnBytes is the estimate of a column's name and metadata in a Result.
const columnBytes = 96

// Materialize reads rows to the end, copying every value, and closes them;
// the Result it returns records mask as its Mask. If the result turns out
// larger than lim, or holds a value it cannot copy safely, it stops and
// returns prefix set: res holds what was read, including the row that went
// over, and rows are left open after it for the caller alone to read on and
// close. A read error, or an error from NextResultSet or Close, closes rows
// and fails the whole result (res is nil).
func Materialize(rows driver.Rows, mask uint16, lim Limits) (res *Result, prefix bool, err error) {
	res = &Result{Mask: mask}
	total := 0
	for {
		rs := captureColumns(rows)
		res.Bytes += int64(len(rs.Names)) * columnBytes
		dest := make([]driver.Value, len(rs.Names))
		for {
			err := rows.Next(dest)
			if err == io.EOF {
				break
			}
			if err != nil {
				_ = rows.Close()
				return nil, false, err
			}
			total++
			shareable := true
			for i, v := range dest {
				var n int64
				dest[i], n, shareable = CopyValue(v, shareable)
				res.Bytes += n
			}
			rs.Vals = append(rs.Vals, dest...)
			rs.N++
			if !shareable || total > lim.Rows || res.Bytes > lim.Bytes {
				res.Sets = append(res.Sets, rs)
				return res, true, nil
			}
		}
		res.Sets = append(res.Sets, rs)
		nrs, ok := rows.(driver.RowsNextResultSet)
		if !ok || !nrs.HasNextResultSet() {
			break
		}
		if err := nrs.NextResultSet(); err == io.EOF {
			break
		} else if err != nil {
			_ = rows.Close()
			return nil, false, err
		}
	}
	if err := rows.Close(); err != nil {
		return nil, false, err
	}
	return res, false, nil
}

// captureColumns returns an empty set of the current result set's columns:
// a copy of their names and what every ColumnType* interface rows implement
// says of them.
func captureColumns(rows driver.Rows) Set {
	names := rows.Columns()
	rs := Set{Names: append([]string(nil), names...), Cols: make([]Column, len(names))}
	scanType, _ := rows.(driver.RowsColumnTypeScanType)
	dbType, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
	length, _ := rows.(driver.RowsColumnTypeLength)
	nullable, _ := rows.(driver.RowsColumnTypeNullable)
	precisionScale, _ := rows.(driver.RowsColumnTypePrecisionScale)
	for i := range rs.Cols {
		c := &rs.Cols[i]
		if scanType != nil {
			c.ScanType = scanType.ColumnTypeScanType(i)
		}
		if dbType != nil {
			c.DBType = dbType.ColumnTypeDatabaseTypeName(i)
		}
		if length != nil {
			c.Length, c.LengthOK = length.ColumnTypeLength(i)
		}
		if nullable != nil {
			c.Nullable, c.NullOK = nullable.ColumnTypeNullable(i)
		}
		if precisionScale != nil {
			c.Precision, c.Scale, c.PrecisionScaleOK = precisionScale.ColumnTypePrecisionScale(i)
		}
	}
	return rs
}

// CopyValue returns a copy of v that shares no memory with the driver, its
// estimated size in a Result (wire.Size), and shareable, or false if v may
// not be shared: a value of a type outside driver.Value may hold references
// the copy cannot see, and is returned as it is. A nil []byte stays nil;
// an empty one stays empty and non-nil.
func CopyValue(v driver.Value, shareable bool) (driver.Value, int64, bool) {
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
