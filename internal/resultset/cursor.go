package resultset

import (
	"database/sql/driver"
	"io"
)

// Cursor is one reader's position in a Result: a result set and, in it, the
// rows read so far. It never writes to the Result, and every []byte it
// gives back is a fresh copy. A Cursor is for one goroutine; many Cursors
// may read one Result at once. Its methods other than Result need a Result
// of at least one set (Materialize always makes one).
type Cursor struct {
	res *Result
	set int
	pos int // rows of Sets[set] read; the current row is pos-1
}

// NewCursor returns a Cursor before the first row of res's first set.
func NewCursor(res *Result) Cursor { return Cursor{res: res} }

// Result returns the result the cursor reads.
func (c *Cursor) Result() *Result { return c.res }

// cur returns the current result set.
func (c *Cursor) cur() *Set { return &c.res.Sets[c.set] }

// AtEnd reports whether the cursor read every row of the last result set:
// where a reader of a prefix goes on with the parent rows.
func (c *Cursor) AtEnd() bool { return c.OnLastSet() && c.pos >= c.cur().Rows() }

// OnLastSet reports whether the current result set is the result's last.
func (c *Cursor) OnLastSet() bool { return c.set == len(c.res.Sets)-1 }

// Columns returns the column names of the current result set; the caller
// must not modify them.
func (c *Cursor) Columns() []string { return c.cur().Names }

// Column returns what the parent rows said of column i of the current
// result set; it panics if i is out of range.
func (c *Cursor) Column(i int) Column { return c.cur().Cols[i] }

// Next copies the next row of the current result set into dest, which
// holds at least a value per column, and returns io.EOF after its last.
// Every []byte is a fresh copy, so a caller that scans into sql.RawBytes
// and writes to it changes only its own.
func (c *Cursor) Next(dest []driver.Value) error {
	rs := c.cur()
	if c.pos >= rs.Rows() {
		return io.EOF
	}
	n := len(rs.Names)
	row := rs.Vals[c.pos*n : (c.pos+1)*n]
	for i, v := range row {
		dest[i] = fresh(v)
	}
	c.pos++
	return nil
}

// NextRow moves to the next row of the current result set without reading
// it, for Value, and returns io.EOF after its last.
func (c *Cursor) NextRow() error {
	if c.pos >= c.cur().Rows() {
		return io.EOF
	}
	c.pos++
	return nil
}

// HasRow reports whether there is a current row for Value: NextRow moved
// to one.
func (c *Cursor) HasRow() bool { return c.pos != 0 && c.pos <= c.cur().Rows() }

// Value returns column index of the current row, a []byte as a fresh copy.
// It panics without a current row (HasRow) or if index is out of range.
func (c *Cursor) Value(index int) driver.Value {
	rs := c.cur()
	if !c.HasRow() {
		panic("resultset: Value without a current row")
	}
	if index < 0 || index >= len(rs.Names) {
		panic("resultset: column index out of range")
	}
	return fresh(rs.Vals[(c.pos-1)*len(rs.Names)+index])
}

// HasNextResultSet reports whether a result set follows the current one.
func (c *Cursor) HasNextResultSet() bool { return c.set < len(c.res.Sets)-1 }

// NextResultSet moves to the first row of the next result set, or returns
// io.EOF if the current one is the last.
func (c *Cursor) NextResultSet() error {
	if c.set >= len(c.res.Sets)-1 {
		return io.EOF
	}
	c.set++
	c.pos = 0
	return nil
}

// fresh returns v, a non-nil []byte as a copy of its own.
func fresh(v driver.Value) driver.Value {
	if b, ok := v.([]byte); ok && b != nil {
		return append(make([]byte, 0, len(b)), b...)
	}
	return v
}
