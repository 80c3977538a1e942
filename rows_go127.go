//go:build go1.27

package sqlflight

import (
	"database/sql/driver"

	"github.com/jackc/pgx/v5/stdlib"
)

// Go 1.27's database/sql scans through the driver when its rows implement
// driver.RowsColumnScanner (and then never calls Next): pgx scans arrays,
// ranges, multiranges and its native byte slices that way. The wrappers
// forward it exactly when the parent rows implement it.

// columnScannerFace is driver.RowsColumnScanner without driver.Rows.
type columnScannerFace interface {
	NextRow() error
	ScanColumn(scanCtx driver.ScanContext, index int, dest any) error
}

// rowsImpl is every Rows method a wrapper may be asked for.
type rowsImpl interface {
	rowsCommon
	columnScannerFace
}

func (p *passRows) NextRow() error { return p.Rows.(driver.RowsColumnScanner).NextRow() }

func (p *passRows) ScanColumn(scanCtx driver.ScanContext, index int, dest any) error {
	return p.Rows.(driver.RowsColumnScanner).ScanColumn(scanCtx, index, dest)
}

// shareMask is the mask a shared result of parent replays with. A shared
// result claims driver.RowsColumnScanner only when its replay can scan the
// way the parent would: for pgx's stdlib rows, whose column types it knows
// by name. For any other parent it replays through Next, as under Go 1.26.
func shareMask(parent any, mask uint16) uint16 {
	if _, ok := parent.(*stdlib.Rows); !ok || mask&rowsDatabaseTypeName == 0 {
		mask &^= rowsColumnScanner
	}
	return mask
}
