package pgxflight

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqlflight/sqlflight/internal/resultset"
)

// driverRows are pgx's rows of a statement passed through, as the Shield
// holds them (it only closes them: the face reads pgx's rows itself).
type driverRows struct{ rows pgx.Rows }

func (r *driverRows) Columns() []string {
	fds := r.rows.FieldDescriptions()
	names := make([]string, len(fds))
	for i := range fds {
		names[i] = fds[i].Name
	}
	return names
}

func (r *driverRows) Close() error {
	r.rows.Close()
	return r.rows.Err()
}

func (r *driverRows) Next(dest []driver.Value) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	vals, err := r.rows.Values()
	if err != nil {
		return err
	}
	for i := range dest {
		dest[i] = vals[i]
	}
	return nil
}

// passRows are pgx's own rows of a statement passed through: closing them
// (or reading past the last row) also closes what the Shield holds of them
// (engine: its writes are complete then) and releases the connection.
type passRows struct {
	pgx.Rows
	engine  driver.Rows
	release func() error
	done    bool
}

func (r *passRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *passRows) Close() {
	r.Rows.Close()
	if r.done {
		return
	}
	r.done = true
	_ = r.engine.Close()
	if r.release != nil {
		_ = r.release()
	}
}

// errRows are the rows of a statement that failed before it ran, as
// pgxpool's are: every method reports the error.
type errRows struct{ err error }

func (errRows) Close()                                       {}
func (e errRows) Err() error                                 { return e.err }
func (errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (errRows) Next() bool                                   { return false }
func (e errRows) Scan(...any) error                          { return e.err }
func (e errRows) Values() ([]any, error)                     { return nil, e.err }
func (errRows) RawValues() [][]byte                          { return nil }
func (errRows) Conn() *pgx.Conn                              { return nil }
func (errRows) TypeMap() *pgtype.Map                         { return nil }

// sharedRows replay a shared result (or the rows of a flight's origin,
// read by its leader alone) as pgx.Rows: each value goes back to the wire
// form pgx's stdlib read it from (resultset.PgxRaw), and scans through
// pgx's default type map as pgx's own rows scan.
type sharedRows struct {
	rows    driver.Rows
	release func() error
	fds     []pgconn.FieldDescription
	vals    []driver.Value
	raw     [][]byte
	m       *pgtype.Map
	kept    bool // TypeMap handed m out: it does not go back to the pool
	n       int64
	err     error
	closed  bool
	ended   bool // every row was read

	plans []pgtype.ScanPlan
	types []reflect.Type
}

var _ pgx.Rows = (*sharedRows)(nil)

func newSharedRows(rows driver.Rows, release func() error) *sharedRows {
	r := &sharedRows{rows: rows, release: release, m: resultset.PgxTypes()}
	names := rows.Columns()
	typed, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
	r.fds = make([]pgconn.FieldDescription, len(names))
	for i, name := range names {
		var oid uint32
		if typed != nil {
			oid, _ = resultset.PgxOID(r.m, typed.ColumnTypeDatabaseTypeName(i))
		}
		r.fds[i] = pgconn.FieldDescription{Name: name, DataTypeOID: oid, DataTypeSize: -1, TypeModifier: -1,
			Format: resultset.PgxFormat(oid)}
	}
	r.vals = make([]driver.Value, len(names))
	return r
}

func (r *sharedRows) FieldDescriptions() []pgconn.FieldDescription { return r.fds }

func (r *sharedRows) Err() error { return r.err }

// CommandTag is "SELECT n" once every row was read, as PostgreSQL tags a
// read; empty before.
func (r *sharedRows) CommandTag() pgconn.CommandTag {
	if !r.ended {
		return pgconn.CommandTag{}
	}
	return pgconn.NewCommandTag("SELECT " + strconv.FormatInt(r.n, 10))
}

func (r *sharedRows) Conn() *pgx.Conn { return nil }

func (r *sharedRows) TypeMap() *pgtype.Map {
	r.kept = true
	return r.m
}

func (r *sharedRows) fatal(err error) {
	if r.err == nil {
		r.err = err
	}
	r.Close()
}

func (r *sharedRows) Next() bool {
	if r.closed {
		return false
	}
	err := r.rows.Next(r.vals)
	if err == io.EOF {
		r.ended = true
		r.Close()
		return false
	}
	if err != nil {
		r.fatal(err)
		return false
	}
	if r.raw == nil {
		r.raw = make([][]byte, len(r.vals))
	}
	for i, v := range r.vals {
		format, raw, err := resultset.PgxRaw(r.m, r.fds[i].DataTypeOID, v)
		if err != nil {
			r.fatal(fmt.Errorf("pgxflight: column %q: %w", r.fds[i].Name, err))
			return false
		}
		if r.fds[i].Format != format {
			r.fds[i].Format, r.plans = format, nil // a value pgx's stdlib could not have read in binary
		}
		r.raw[i] = raw
	}
	r.n++
	return true
}

func (r *sharedRows) Scan(dest ...any) error {
	if r.closed && r.err != nil {
		return r.err
	}
	if r.raw == nil || r.closed {
		err := errors.New("pgxflight: Scan without a current row")
		r.fatal(err)
		return err
	}
	if len(dest) == 1 {
		if rs, ok := dest[0].(pgx.RowScanner); ok {
			err := rs.ScanRow(r)
			if err != nil {
				r.fatal(err)
			}
			return err
		}
	}
	if len(r.fds) != len(dest) {
		err := fmt.Errorf("number of field descriptions must equal number of destinations, got %d and %d", len(r.fds), len(dest))
		r.fatal(err)
		return err
	}
	if r.plans == nil {
		r.plans = make([]pgtype.ScanPlan, len(dest))
		r.types = make([]reflect.Type, len(dest))
	}
	for i, dst := range dest {
		if dst == nil {
			continue
		}
		if t := reflect.TypeOf(dst); r.plans[i] == nil || r.types[i] != t {
			r.plans[i] = r.m.PlanScan(r.fds[i].DataTypeOID, r.fds[i].Format, dst)
			r.types[i] = t
		}
		if err := r.plans[i].Scan(r.raw[i], dst); err != nil {
			err = pgx.ScanArgError{ColumnIndex: i, FieldName: r.fds[i].Name, Err: err}
			r.fatal(err)
			return err
		}
	}
	return nil
}

func (r *sharedRows) Values() ([]any, error) {
	if r.closed {
		return nil, errors.New("rows is closed")
	}
	values := make([]any, 0, len(r.fds))
	for i := range r.fds {
		buf, fd := r.raw[i], &r.fds[i]
		if buf == nil {
			values = append(values, nil)
			continue
		}
		if dt, ok := r.m.TypeForOID(fd.DataTypeOID); ok {
			v, err := dt.Codec.DecodeValue(r.m, fd.DataTypeOID, fd.Format, buf)
			if err != nil {
				r.fatal(err)
				return nil, err
			}
			values = append(values, v)
			continue
		}
		if fd.Format == pgtype.TextFormatCode {
			values = append(values, string(buf))
		} else {
			values = append(values, append([]byte(nil), buf...))
		}
	}
	return values, nil
}

// RawValues returns the current row's values in their wire form
// (FieldDescriptions' Format says which), the caller's own copies.
func (r *sharedRows) RawValues() [][]byte { return r.raw }

func (r *sharedRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	if err := r.rows.Close(); err != nil && r.err == nil {
		r.err = err
	}
	if r.release != nil {
		_ = r.release()
	}
	if !r.kept {
		resultset.PutPgxTypes(r.m)
		r.kept = true
	}
}

// row is QueryRow's: Scan reads the first row and closes the rows, also
// when a destination panics (the connection goes back).
type row struct{ rows pgx.Rows }

func (r *row) Scan(dest ...any) (err error) {
	rows := r.rows
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	defer rows.Close()
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			return errors.New("cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	_ = rows.Scan(dest...)
	rows.Close()
	return rows.Err()
}
