package resultset

import (
	"database/sql/driver"
	"errors"
	"io"
)

// ErrSplit fails a Split whose rows cannot be told apart by key: a row whose
// key belongs to no result, a second result set, or a value that may not be
// shared.
var ErrSplit = errors.New("sqlflight: the rows of a batch could not be split by key")

// Split reads rows — one statement's rows for many keys, the key of each row
// in its last column — to the end and closes them, copying every value as
// Materialize does, into n results of the other columns: keyOf tells which
// result a row's key belongs to (-1: none). Every result has the rows'
// columns but the last, and mask as its Mask, even with no row (a key no row
// has). A result that goes over its limit (lims[i]) is dropped at once: it
// is nil and over[i] is set, for its caller to read alone. A read error, or
// ErrSplit, fails the whole split.
func Split(rows driver.Rows, mask uint16, n int, keyOf func(driver.Value) int, lims []Limits) (res []*Result, over []bool, err error) {
	rs := captureColumns(rows)
	last := len(rs.Names) - 1
	if last < 0 {
		_ = rows.Close()
		return nil, nil, ErrSplit
	}
	res, over = make([]*Result, n), make([]bool, n)
	total := make([]int, n)
	base := int64(last) * columnBytes
	for i := range res {
		res[i] = &Result{Mask: mask, Bytes: base, Sets: []Set{{Names: rs.Names[:last:last], Cols: rs.Cols[:last:last]}}}
	}
	dest := make([]driver.Value, len(rs.Names))
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = rows.Close()
			return nil, nil, err
		}
		k := keyOf(dest[last])
		if k < 0 || k >= n {
			_ = rows.Close()
			return nil, nil, ErrSplit
		}
		if over[k] {
			continue
		}
		r := res[k]
		set := &r.Sets[0]
		for _, v := range dest[:last] {
			c, size, ok := CopyValue(v, true)
			if !ok {
				_ = rows.Close()
				return nil, nil, ErrSplit
			}
			set.Vals = append(set.Vals, c)
			r.Bytes += size
		}
		set.N++
		total[k]++
		if total[k] > lims[k].Rows || r.Bytes > lims[k].Bytes {
			over[k], res[k] = true, nil
		}
	}
	if nrs, ok := rows.(driver.RowsNextResultSet); ok && nrs.HasNextResultSet() {
		_ = rows.Close()
		return nil, nil, ErrSplit
	}
	if err := rows.Close(); err != nil {
		return nil, nil, err
	}
	return res, over, nil
}
