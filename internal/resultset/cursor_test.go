package resultset_test

import (
	"database/sql/driver"
	"io"
	"testing"

	"github.com/sqlflight/sqlflight/internal/resultset"
)

// twoSets is a result of two sets: two rows of (int64, []byte), then one
// row of a string.
func twoSets(t *testing.T) *resultset.Result {
	t.Helper()
	rows := &multiRows{bufRows{
		names: [][]string{{"id", "b"}, {"s"}},
		sets: [][][]driver.Value{
			{{int64(1), []byte("one")}, {int64(2), []byte(nil)}},
			{{"x"}},
		},
	}}
	res, prefix, err := resultset.Materialize(rows, 0, roomy)
	if err != nil || prefix {
		t.Fatalf("Materialize: prefix %v, %v", prefix, err)
	}
	return res
}

// Every reader gets []byte values of its own: writing to one changes
// neither the result nor another reader's.
func TestCursorGivesEveryReaderFreshCopies(t *testing.T) {
	res := twoSets(t)
	a, b := resultset.NewCursor(res), resultset.NewCursor(res)
	da, db := make([]driver.Value, 2), make([]driver.Value, 2)
	if err := a.Next(da); err != nil {
		t.Fatal(err)
	}
	da[1].([]byte)[0] = 'X'
	if err := b.Next(db); err != nil {
		t.Fatal(err)
	}
	if got := string(db[1].([]byte)); got != "one" {
		t.Errorf("second reader read %q after the first wrote to its own", got)
	}
	if got := string(res.Sets[0].Vals[1].([]byte)); got != "one" {
		t.Errorf("the result holds %q after a reader wrote to its own", got)
	}
	c := resultset.NewCursor(res)
	if err := c.NextRow(); err != nil || !c.HasRow() {
		t.Fatalf("NextRow: %v, has row %v", err, c.HasRow())
	}
	v := c.Value(1).([]byte)
	v[0] = 'Y'
	if got := string(c.Value(1).([]byte)); got != "one" {
		t.Errorf("Value gave %q after an earlier copy was written to", got)
	}
}

// A cursor reads every row of every set in order, then io.EOF; a nil
// []byte stays nil.
func TestCursorReadsEverySet(t *testing.T) {
	res := twoSets(t)
	c := resultset.NewCursor(res)
	if c.Result() != res || c.OnLastSet() || c.AtEnd() || !c.HasNextResultSet() || c.HasRow() {
		t.Fatal("a new cursor is not before the first row of the first set")
	}
	if cols := c.Columns(); len(cols) != 2 || cols[1] != "b" || c.Column(1).DBType != "b_TYPE" {
		t.Fatalf("columns %v, column 1 %+v", cols, c.Column(1))
	}
	dest := make([]driver.Value, 2)
	if err := c.Next(dest); err != nil || dest[0] != int64(1) {
		t.Fatalf("row 0: %v %v", dest, err)
	}
	if err := c.Next(dest); err != nil || dest[0] != int64(2) || dest[1].([]byte) != nil {
		t.Fatalf("row 1: %#v %v", dest, err)
	}
	if err := c.Next(dest); err != io.EOF {
		t.Fatalf("after the last row: %v, want io.EOF", err)
	}
	if err := c.NextRow(); err != io.EOF {
		t.Fatalf("NextRow after the last row: %v, want io.EOF", err)
	}
	if c.AtEnd() {
		t.Fatal("at the end before the last set")
	}
	if err := c.NextResultSet(); err != nil || !c.OnLastSet() || c.HasNextResultSet() || c.HasRow() {
		t.Fatalf("NextResultSet: %v", err)
	}
	if err := c.NextRow(); err != nil || c.Value(0) != "x" || c.Columns()[0] != "s" {
		t.Fatalf("set 1 row 0: %v", err)
	}
	if !c.AtEnd() {
		t.Fatal("not at the end after the last row of the last set")
	}
	if err := c.NextResultSet(); err != io.EOF {
		t.Fatalf("NextResultSet after the last: %v, want io.EOF", err)
	}
}

// Value without a current row, or of a column out of range, panics.
func TestCursorValueOutOfRangePanics(t *testing.T) {
	res := twoSets(t)
	for name, f := range map[string]func(c *resultset.Cursor){
		"no row": func(c *resultset.Cursor) { c.Value(0) },
		"index":  func(c *resultset.Cursor) { _ = c.NextRow(); c.Value(2) },
	} {
		c := resultset.NewCursor(res)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(&c)
		}()
	}
}
