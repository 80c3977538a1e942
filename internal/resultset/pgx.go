package resultset

import (
	"database/sql/driver"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgtype"
)

// A value materialized from pgx v5's stdlib rows, as pgx itself would scan
// it: the wire value it was read from, rebuilt. The stdlib reads the types
// of PgxBinary in binary and every other type as text, whose driver.Value
// is that text; PgxRaw gives the value back in the format it was read in,
// so that pgx's type map scans it as it would have scanned the original
// (Go 1.27's RowsColumnScanner here, and the pgx face's rows).

// pgxTypes holds pgx's default type maps; a Map is not safe for concurrent
// use.
var pgxTypes = sync.Pool{New: func() any { return pgtype.NewMap() }}

// PgxTypes returns one of pgx's default type maps for one goroutine's use;
// give it back with PutPgxTypes.
func PgxTypes() *pgtype.Map { return pgxTypes.Get().(*pgtype.Map) }

// PutPgxTypes gives back a map PgxTypes returned.
func PutPgxTypes(m *pgtype.Map) { pgxTypes.Put(m) }

// pgxBinary are the types pgx's stdlib reads in binary format (its
// databaseSQLResultFormats); it reads every other type as text, and its
// driver.Value of such a column is that text.
var pgxBinary = map[uint32]bool{
	pgtype.BoolOID: true, pgtype.ByteaOID: true, pgtype.CIDOID: true, pgtype.DateOID: true,
	pgtype.Float4OID: true, pgtype.Float8OID: true, pgtype.Int2OID: true, pgtype.Int4OID: true,
	pgtype.Int8OID: true, pgtype.OIDOID: true, pgtype.TimestampOID: true, pgtype.TimestamptzOID: true,
	pgtype.XIDOID: true,
}

// PgxFormat returns the format pgx's stdlib reads a column of type oid in.
func PgxFormat(oid uint32) int16 {
	if pgxBinary[oid] {
		return pgtype.BinaryFormatCode
	}
	return pgtype.TextFormatCode
}

// PgxOID returns the type OID of a column whose
// ColumnTypeDatabaseTypeName was dbType under pgx's stdlib (the type's
// name in capitals, or its OID as a number for a type its map does not
// name); ok is false for a name m does not know (a type registered on the
// connection's own type map).
func PgxOID(m *pgtype.Map, dbType string) (oid uint32, ok bool) {
	if t, ok := m.TypeForName(strings.ToLower(dbType)); ok {
		return t.OID, true
	}
	if n, err := strconv.ParseUint(dbType, 10, 32); err == nil {
		return uint32(n), true
	}
	return 0, false
}

// PgxRaw rebuilds the wire value, and its format, that pgx's stdlib read
// as v for a column of type oid.
func PgxRaw(m *pgtype.Map, oid uint32, v driver.Value) (int16, []byte, error) {
	format := PgxFormat(oid)
	switch v := v.(type) {
	case nil:
		return format, nil, nil
	case []byte:
		// bytea (binary), json, jsonb, xml (text): the bytes read.
		return format, v, nil
	case string:
		if format == pgtype.TextFormatCode {
			return format, []byte(v), nil
		}
	}
	if format == pgtype.BinaryFormatCode {
		if b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil); err == nil {
			return format, b, nil
		}
	}
	b, err := m.Encode(oid, pgtype.TextFormatCode, v, nil)
	if err != nil {
		return 0, nil, err
	}
	return pgtype.TextFormatCode, b, nil
}
