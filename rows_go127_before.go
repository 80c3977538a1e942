//go:build !go1.27

package sqlflight

// Before Go 1.27, database/sql has no driver.RowsColumnScanner: the wrappers
// have only the methods every release knows.
type rowsImpl = rowsCommon

// shareMask is the mask a shared result replays with.
func shareMask(_ any, mask uint16) uint16 { return mask }
