package resultset_test

import (
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// bufRows is a driver.Rows that, like pgx, returns every []byte in one
// buffer of its own that it overwrites on the next call of Next. Its rows
// are sets of rows of values; a []byte value is written into the buffer.
type bufRows struct {
	names  [][]string
	sets   [][][]driver.Value
	set    int
	pos    int
	buf    []byte
	err    error // returned by Next once pos reaches errAt
	errAt  int
	closed int
}

func (r *bufRows) Columns() []string { return r.names[r.set] }

func (r *bufRows) Close() error { r.closed++; return nil }

func (r *bufRows) Next(dest []driver.Value) error {
	if r.err != nil && r.pos == r.errAt {
		return r.err
	}
	if r.pos >= len(r.sets[r.set]) {
		return io.EOF
	}
	if r.buf == nil {
		r.buf = make([]byte, 0, 64)
	}
	r.buf = r.buf[:0]
	for i, v := range r.sets[r.set][r.pos] {
		if b, ok := v.([]byte); ok && b != nil {
			start := len(r.buf)
			r.buf = append(r.buf, b...)
			v = r.buf[start:len(r.buf):len(r.buf)]
		}
		dest[i] = v
	}
	r.pos++
	return nil
}

// multiRows adds driver.RowsNextResultSet and every ColumnType* interface
// to bufRows.
type multiRows struct{ bufRows }

func (r *multiRows) HasNextResultSet() bool { return r.set < len(r.sets)-1 }

func (r *multiRows) NextResultSet() error {
	if !r.HasNextResultSet() {
		return io.EOF
	}
	r.set++
	r.pos = 0
	return nil
}

func (r *multiRows) ColumnTypeScanType(i int) reflect.Type {
	return reflect.TypeFor[int64]()
}
func (r *multiRows) ColumnTypeDatabaseTypeName(i int) string { return r.names[r.set][i] + "_TYPE" }
func (r *multiRows) ColumnTypeLength(i int) (int64, bool)    { return int64(10 + i), true }
func (r *multiRows) ColumnTypeNullable(i int) (bool, bool)   { return i%2 == 0, true }
func (r *multiRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	return int64(20 + i), int64(i), true
}

// closeErrRows is bufRows whose Close fails.
type closeErrRows struct{ bufRows }

func (r *closeErrRows) Close() error { r.closed++; return errors.New("close failed") }

// bytesRows returns rows of one []byte column holding each of vals.
func bytesRows(vals ...string) *bufRows {
	r := &bufRows{names: [][]string{{"b"}}, sets: [][][]driver.Value{nil}}
	for _, v := range vals {
		r.sets[0] = append(r.sets[0], []driver.Value{[]byte(v)})
	}
	return r
}

var roomy = resultset.Limits{Rows: 1 << 20, Bytes: 1 << 30}

// A driver that reuses its []byte buffer cannot change a materialized
// result: every []byte is copied out of it.
func TestMaterializeCopiesBytesOutOfTheDriver(t *testing.T) {
	rows := bytesRows("first", "second", "third")
	res, prefix, err := resultset.Materialize(rows, 0, roomy)
	if err != nil || prefix {
		t.Fatalf("Materialize: prefix %v, %v", prefix, err)
	}
	for i := range rows.buf {
		rows.buf[i] = 'X'
	}
	want := []string{"first", "second", "third"}
	rs := res.Sets[0]
	if rs.N != 3 || len(rs.Vals) != 3 {
		t.Fatalf("%d rows, %d values, want 3 and 3", rs.N, len(rs.Vals))
	}
	for i, w := range want {
		if got := string(rs.Vals[i].([]byte)); got != w {
			t.Errorf("row %d: %q, want %q", i, got, w)
		}
	}
	if rows.closed != 1 {
		t.Errorf("rows closed %d times, want 1", rows.closed)
	}
}

// A nil []byte (SQL NULL) stays nil and an empty one stays empty and not
// nil; the column names are the result's own.
func TestMaterializeKeepsNilAndEmptyBytesAndNames(t *testing.T) {
	rows := &bufRows{names: [][]string{{"a", "b"}}, sets: [][][]driver.Value{{{[]byte(nil), []byte{}}}}}
	res, _, err := resultset.Materialize(rows, 0, roomy)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Sets[0].Vals
	if b := v[0].([]byte); b != nil {
		t.Errorf("nil []byte became %#v", b)
	}
	if b := v[1].([]byte); b == nil || len(b) != 0 {
		t.Errorf("empty []byte became %#v", b)
	}
	rows.names[0][0] = "changed"
	if res.Sets[0].Names[0] != "a" {
		t.Errorf("the result's names follow the driver's: %q", res.Sets[0].Names[0])
	}
}

// Every result set is read, with what every ColumnType* interface says of
// its columns; the mask is recorded untouched; rows of no column count.
func TestMaterializeEveryResultSetAndColumn(t *testing.T) {
	rows := &multiRows{bufRows{
		names: [][]string{{"id", "label"}, {}},
		sets: [][][]driver.Value{
			{{int64(1), "one"}, {int64(2), "two"}},
			{{}, {}, {}},
		},
	}}
	res, prefix, err := resultset.Materialize(rows, 0x2a, roomy)
	if err != nil || prefix {
		t.Fatalf("Materialize: prefix %v, %v", prefix, err)
	}
	if res.Mask != 0x2a || len(res.Sets) != 2 || res.Sets[0].Rows() != 2 || res.Sets[1].Rows() != 3 {
		t.Fatalf("mask %#x, %d sets, want 0x2a and 2 sets of 2 and 3 rows", res.Mask, len(res.Sets))
	}
	want := resultset.Column{ScanType: reflect.TypeFor[int64](), DBType: "label_TYPE", Length: 11, LengthOK: true,
		Nullable: false, NullOK: true, Precision: 21, Scale: 1, PrecisionScaleOK: true}
	if got := res.Sets[0].Cols[1]; got != want {
		t.Errorf("column 1: %+v, want %+v", got, want)
	}
	if res.Empty() {
		t.Error("a result of rows is empty")
	}
	// Bytes: 96 per column, wire.Size per value.
	wantBytes := 2*96 + 2*(wire.Size(int64(1))+wire.Size("one"))
	if res.Bytes != wantBytes {
		t.Errorf("%d bytes, want %d", res.Bytes, wantBytes)
	}
	if rows.closed != 1 {
		t.Errorf("rows closed %d times, want 1", rows.closed)
	}
}

// Past Limits.Rows rows in all, Materialize returns the prefix read,
// including the row that went over, and leaves the rows open after it.
func TestMaterializeStopsPastTheRowLimit(t *testing.T) {
	rows := bytesRows("a", "b", "c", "d", "e")
	res, prefix, err := resultset.Materialize(rows, 0, resultset.Limits{Rows: 2, Bytes: 1 << 30})
	if err != nil || !prefix {
		t.Fatalf("Materialize: prefix %v, %v; want a prefix", prefix, err)
	}
	if res.Sets[0].N != 3 || string(res.Sets[0].Vals[2].([]byte)) != "c" {
		t.Fatalf("prefix of %d rows, want 3 ending in c", res.Sets[0].N)
	}
	if rows.closed != 0 {
		t.Fatal("the rows of a prefix were closed")
	}
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil || string(dest[0].([]byte)) != "d" {
		t.Fatalf("the rows after the prefix: %v %q, want d", err, dest[0])
	}
	// The prefix's values are copies too: reading on did not change them.
	if string(res.Sets[0].Vals[2].([]byte)) != "c" {
		t.Errorf("prefix row 2 became %q", res.Sets[0].Vals[2])
	}
}

// Past Limits.Bytes (the estimate), Materialize returns a prefix.
func TestMaterializeStopsPastTheByteLimit(t *testing.T) {
	one := 96 + wire.Size([]byte("0123456789"))
	lim := resultset.Limits{Rows: 100, Bytes: one + wire.Size([]byte("0123456789"))}
	res, prefix, err := resultset.Materialize(bytesRows("0123456789", "0123456789", "0123456789"), 0, lim)
	if err != nil || !prefix || res.Sets[0].N != 3 || res.Bytes <= lim.Bytes {
		t.Fatalf("prefix %v of %d rows (%d bytes), %v; want a prefix of 3 rows over %d bytes",
			prefix, res.Sets[0].N, res.Bytes, err, lim.Bytes)
	}
	res, prefix, err = resultset.Materialize(bytesRows("0123456789", "0123456789"), 0, lim)
	if err != nil || prefix || res.Bytes != lim.Bytes {
		t.Fatalf("at the limit: prefix %v, %d bytes, %v; want the whole result of %d bytes", prefix, res.Bytes, err, lim.Bytes)
	}
}

// A value of a type outside driver.Value may hold references a copy cannot
// see: the result is never complete.
func TestMaterializeRefusesValuesItCannotCopy(t *testing.T) {
	type opaque struct{ p *int }
	rows := &bufRows{names: [][]string{{"v"}}, sets: [][][]driver.Value{{{int64(1)}, {opaque{}}, {int64(3)}}}}
	res, prefix, err := resultset.Materialize(rows, 0, roomy)
	if err != nil || !prefix || res.Sets[0].N != 2 {
		t.Fatalf("prefix %v, %v; want a prefix of 2 rows", prefix, err)
	}
}

// A read error, or an error closing the rows, fails the whole result.
func TestMaterializeErrorFailsTheWholeResult(t *testing.T) {
	boom := errors.New("boom")
	rows := bytesRows("a", "b", "c")
	rows.err, rows.errAt = boom, 2
	res, prefix, err := resultset.Materialize(rows, 0, roomy)
	if !errors.Is(err, boom) || res != nil || prefix {
		t.Fatalf("read error: %v, %v, prefix %v; want nil, boom", res, err, prefix)
	}
	if rows.closed != 1 {
		t.Errorf("rows closed %d times after a read error, want 1", rows.closed)
	}
	cr := &closeErrRows{*bytesRows("a")}
	if res, _, err := resultset.Materialize(cr, 0, roomy); err == nil || res != nil {
		t.Fatalf("close error: %v, %v; want nil and the error", res, err)
	}
}

// CopyValue copies a []byte, keeps the immutable driver.Values, sizes
// them as the wire does, and says a value of another type is unshareable.
func TestCopyValue(t *testing.T) {
	b := []byte("abc")
	c, n, ok := resultset.CopyValue(b, true)
	if !ok || n != wire.Size(b) || string(c.([]byte)) != "abc" || &c.([]byte)[0] == &b[0] {
		t.Fatalf("[]byte: %q %d %v, want a copy of its own", c, n, ok)
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, v := range []driver.Value{nil, int64(-1), 1.5, true, "s", at, []byte(nil)} {
		c, n, ok := resultset.CopyValue(v, true)
		if !ok || n != wire.Size(v) || !reflect.DeepEqual(c, v) {
			t.Errorf("%#v: %#v %d %v", v, c, n, ok)
		}
		if _, _, ok := resultset.CopyValue(v, false); ok {
			t.Errorf("%#v: an unshareable row became shareable", v)
		}
	}
	if _, n, ok := resultset.CopyValue(int32(1), true); ok || n != wire.Size(nil) {
		t.Errorf("int32: shareable %v, %d bytes", ok, n)
	}
}

// A result of no set, or of sets of no row, is empty.
func TestEmpty(t *testing.T) {
	if !(&resultset.Result{}).Empty() || !(&resultset.Result{Sets: make([]resultset.Set, 2)}).Empty() {
		t.Error("a result of no row is not empty")
	}
}

func TestLimitsWithin(t *testing.T) {
	m := resultset.Limits{Rows: 10, Bytes: 100}
	for _, c := range []struct {
		l    resultset.Limits
		want bool
	}{{m, true}, {resultset.Limits{Rows: 9, Bytes: 100}, true}, {resultset.Limits{Rows: 11, Bytes: 1}, false},
		{resultset.Limits{Rows: 1, Bytes: 101}, false}} {
		if got := c.l.Within(m); got != c.want {
			t.Errorf("%v.Within(%v) = %v, want %v", c.l, m, got, c.want)
		}
	}
}
