//go:build go1.27

package resultset

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Go 1.27's database/sql scans through the driver when its rows implement
// driver.RowsColumnScanner (and then never calls Next): a Replay does so as
// pgx v5's stdlib rows do, so that a shared result of pgx's rows scans as
// pgx's own would.

// NextRow advances to the next row: a buffered one, then the parent's (the
// leader's rows of a result too large to share).
func (r *Replay) NextRow() error {
	if r.closed {
		return io.EOF
	}
	if r.onTail() {
		r.rowOnTail = true
		return r.tail.(driver.RowsColumnScanner).NextRow()
	}
	r.rowOnTail = false
	return r.cur.NextRow()
}

// errNoRow is returned by ScanColumn before NextRow or after the last row.
var errNoRow = errors.New("sqlflight: ScanColumn without a current row")

// ScanColumn scans column index of the current row into dest as pgx's
// stdlib rows do: database/sql's conversions for the destinations
// database/sql knows, pgx's type map for the others (slices, pgtype arrays,
// ranges, multiranges and native byte slices), from the raw value pgx
// would scan, rebuilt from the materialized one.
func (r *Replay) ScanColumn(scanCtx driver.ScanContext, index int, dest any) error {
	if r.rowOnTail {
		return r.tail.(driver.RowsColumnScanner).ScanColumn(scanCtx, index, dest)
	}
	if r.closed || !r.cur.HasRow() {
		return errNoRow
	}
	if index < 0 || index >= len(r.cur.Columns()) {
		return errors.New("sqlflight: ScanColumn index out of range")
	}
	return pgxScanColumn(scanCtx, r.cur.Column(index).DBType, r.cur.Value(index), dest)
}

// pgxScanColumn is pgx v5's stdlib Rows.ScanColumn over a materialized
// value v of a column whose ColumnTypeDatabaseTypeName was dbType.
func pgxScanColumn(scanCtx driver.ScanContext, dbType string, v driver.Value, dest any) error {
	if dest == nil {
		return errors.New("destination not a pointer")
	}
	rv := reflect.ValueOf(dest)
	if rv.Kind() == reflect.Pointer && rv.IsNil() {
		return errors.New("destination pointer is nil")
	}
	if isSQLScanDestination(rv.Type()) {
		return sql.ConvertAssign(scanCtx, dest, v)
	}
	m := PgxTypes()
	defer PutPgxTypes(m)
	oid, ok := PgxOID(m, dbType)
	if !ok {
		// A type registered on the connection's own type map: the
		// replay knows pgx's default types only.
		return errors.New("sqlflight: a shared result scans type " + strconv.Quote(dbType) +
			" only into database/sql destinations (pgx's default type map does not know it)")
	}
	format, src, err := PgxRaw(m, oid, v)
	if err != nil {
		return err
	}
	return m.Scan(oid, format, src, dest)
}

// sqlScanDestinations caches isSQLScanDestination: reflect.Type -> bool.
var sqlScanDestinations sync.Map

// isSQLScanDestination is pgx v5's stdlib rule: named scalar types,
// sql.Scanners and nullable pointers to them take database/sql's
// conversions; everything else is pgx's.
func isSQLScanDestination(t reflect.Type) bool {
	if cached, ok := sqlScanDestinations.Load(t); ok {
		return cached.(bool)
	}
	result := isSQLScanDestinationUncached(t)
	sqlScanDestinations.Store(t, result)
	return result
}

func isSQLScanDestinationUncached(t reflect.Type) bool {
	var namedPointers map[reflect.Type]bool
	for {
		if t.Implements(reflect.TypeFor[sql.Scanner]()) {
			return true
		}
		if t.Implements(reflect.TypeFor[pgtype.ArraySetter]()) || t.Implements(reflect.TypeFor[pgtype.BytesScanner]()) {
			return false
		}
		if t.Kind() != reflect.Pointer {
			break
		}
		if t.Name() != "" {
			if namedPointers[t] {
				return false
			}
			if namedPointers == nil {
				namedPointers = make(map[reflect.Type]bool)
			}
			namedPointers[t] = true
		}
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String, reflect.Interface:
		return true
	case reflect.Slice:
		return t.Elem().Kind() == reflect.Uint8
	case reflect.Struct:
		return t.ConvertibleTo(reflect.TypeFor[time.Time]())
	default:
		return false
	}
}
