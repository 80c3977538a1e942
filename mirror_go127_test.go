//go:build go1.27

package sqlflight

import (
	"database/sql/driver"
	"io"
	"testing"
)

// Go 1.27's driver.RowsColumnScanner is mirrored like every other optional
// Rows interface: TestMirrorsPgx checks pgx's rows (which implement it) and
// TestMirrorsSqlmock go-sqlmock's (which do not), shared and pass-through.
func init() {
	rowsFacesList = append(rowsFacesList, face{"RowsColumnScanner", is[driver.RowsColumnScanner]})
}

// scannerRows is a parent other than pgx whose rows implement
// driver.RowsColumnScanner.
type scannerRows struct{ n int }

func (r *scannerRows) Columns() []string              { return []string{"a"} }
func (r *scannerRows) Close() error                   { return nil }
func (r *scannerRows) Next(dest []driver.Value) error { return r.NextRow() }
func (r *scannerRows) NextRow() error {
	if r.n == 0 {
		return io.EOF
	}
	r.n--
	return nil
}
func (r *scannerRows) ScanColumn(driver.ScanContext, int, any) error { return nil }

// A shared result scans the way its parent would only for pgx's rows; from
// any other driver's it replays through Next, as under Go 1.26, and never
// claims RowsColumnScanner. Pass-through rows always claim what the parent
// has.
func TestColumnScannerOtherDriver(t *testing.T) {
	parent := &scannerRows{}
	if m := shareMask(parent, mirrorRowsMask(parent)); m&rowsColumnScanner != 0 {
		t.Errorf("shared mask %b claims RowsColumnScanner for a driver it cannot scan like", m)
	}
	if p := newPassRows(&conn{}, parent, nil); !is[driver.RowsColumnScanner](p) {
		t.Error("pass-through rows lost RowsColumnScanner")
	}
}
