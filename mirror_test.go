package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/stdlib"
)

type face struct {
	name string
	has  func(any) bool
}

func is[T any](v any) bool { _, ok := v.(T); return ok }

var (
	connFacesList = []face{
		{"Pinger", is[driver.Pinger]},
		{"ExecerContext", func(v any) bool { return is[driver.ExecerContext](v) || is[driver.Execer](v) }},    //nolint:staticcheck
		{"QueryerContext", func(v any) bool { return is[driver.QueryerContext](v) || is[driver.Queryer](v) }}, //nolint:staticcheck
		{"ConnPrepareContext", is[driver.ConnPrepareContext]},
		{"ConnBeginTx", is[driver.ConnBeginTx]},
		{"SessionResetter", is[driver.SessionResetter]},
		{"Validator", is[driver.Validator]},
		{"NamedValueChecker", is[driver.NamedValueChecker]},
	}
	stmtFacesList = []face{
		{"StmtExecContext", is[driver.StmtExecContext]},
		{"StmtQueryContext", is[driver.StmtQueryContext]},
		{"NamedValueChecker", is[driver.NamedValueChecker]},
		{"ColumnConverter", is[driver.ColumnConverter]}, //nolint:staticcheck
	}
	rowsFacesList = []face{
		{"RowsNextResultSet", is[driver.RowsNextResultSet]},
		{"RowsColumnTypeScanType", is[driver.RowsColumnTypeScanType]},
		{"RowsColumnTypeDatabaseTypeName", is[driver.RowsColumnTypeDatabaseTypeName]},
		{"RowsColumnTypeLength", is[driver.RowsColumnTypeLength]},
		{"RowsColumnTypeNullable", is[driver.RowsColumnTypeNullable]},
		{"RowsColumnTypePrecisionScale", is[driver.RowsColumnTypePrecisionScale]},
	}
)

func sameFaces(t *testing.T, what string, faces []face, parent, wrapped any) {
	t.Helper()
	for _, f := range faces {
		p, w := f.has(parent), f.has(wrapped)
		if what == "conn" && f.name == "Validator" {
			// Every virtual connection is one (connMask).
			p = true
		}
		if p != w {
			t.Errorf("%s %s: parent %v, wrapper %v", what, f.name, p, w)
		}
	}
}

func rawConn(t *testing.T, db *sql.DB) (any, func()) {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var dc any
	if err := c.Raw(func(v any) error { dc = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return dc, func() { c.Close() }
}

func TestMirrorsSqlmock(t *testing.T) {
	mdb, mock, err := sqlmock.NewWithDSN("dsn-mirror", sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	defer mdb.Close()
	mock.MatchExpectationsInOrder(false)
	s := New()
	wdb := sql.OpenDB(dsnConnector{drv: s.Wrap(mdb.Driver()), dsn: "dsn-mirror"})
	defer wdb.Close()

	if _, ok := s.Wrap(mdb.Driver()).(driver.DriverContext); ok != is[driver.DriverContext](mdb.Driver()) {
		t.Error("DriverContext not mirrored")
	}
	parent, done1 := rawConn(t, mdb)
	defer done1()
	wrapped, done2 := rawConn(t, wdb)
	defer done2()
	sameFaces(t, "conn", connFacesList, parent, wrapped)

	const q = "SELECT a FROM t"
	ctx := context.Background()
	mock.ExpectPrepare(q)
	mock.ExpectPrepare(q)
	ps, err := parent.(driver.Conn).Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := wrapped.(driver.Conn).Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	sameFaces(t, "stmt", stmtFacesList, ps, ws)

	cols := func() *sqlmock.Rows {
		return mock.NewRowsWithColumnDefinition(sqlmock.NewColumn("a").OfType("INT8", int64(0)).Nullable(true)).AddRow(int64(1))
	}
	mock.ExpectQuery(q).WillReturnRows(cols())
	mock.ExpectQuery(q).WillReturnRows(cols())
	pr, err := parent.(driver.QueryerContext).QueryContext(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	wr, err := wrapped.(driver.QueryerContext).QueryContext(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	sameFaces(t, "shared rows", rowsFacesList, pr, wr)
	if a, b := pr.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(0), wr.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(0); a != b {
		t.Errorf("database type name %q vs %q", a, b)
	}
	dest := make([]driver.Value, 1)
	if err := wr.Next(dest); err != nil || dest[0] != int64(1) {
		t.Fatalf("replayed %v %v", dest, err)
	}
	if err := wr.Next(dest); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// A shared-tier result written by a build that knows more optional
// interfaces (Go 1.27's RowsColumnScanner, read by a Go 1.26 build) replays
// with the interfaces this build knows, instead of panicking.
func TestReplayUnknownMaskBits(t *testing.T) {
	r := newReplay(&result{Mask: 0xffff, Sets: []resultSet{{Names: []string{"a"}, Cols: make([]column, 1)}}})
	sameFaces(t, "replay of every bit", rowsFacesList, rowsImpl(&replay{}), r)
}

// Every mask builds the wrapper of exactly its bits, whichever parent will
// ever produce it; a mask with an unknown bit is refused.
func TestMirrorEveryMask(t *testing.T) {
	everyMask(t, "conn", connFacesList, mirrorConnAll, func(m uint16) any { return mirrorConn(&conn{}, m) })
	everyMask(t, "stmt", stmtFacesList, mirrorStmtAll, func(m uint16) any { return mirrorStmt(&stmt{}, m) })
	everyMask(t, "rows", rowsFacesList, mirrorRowsAll, func(m uint16) any { return mirrorRows(&replay{}, m) })
	defer func() {
		if recover() == nil {
			t.Error("mask with an unknown bit: no panic")
		}
	}()
	mirrorConn(&conn{}, mirrorConnAll+1)
}

// everyMask checks that for every mask up to all, build returns a value
// that has face i of faces exactly when bit i of the mask is set.
func everyMask(t *testing.T, what string, faces []face, all uint16, build func(uint16) any) {
	t.Helper()
	if bits.Len16(all) != len(faces) {
		t.Fatalf("%s: %d faces listed, %d bits in the masks", what, len(faces), bits.Len16(all))
	}
	for m := range all + 1 {
		v := build(m)
		for i, f := range faces {
			if want := m&(1<<i) != 0; f.has(v) != want {
				t.Errorf("%s mask %b: %s %v, want %v", what, m, f.name, !want, want)
			}
		}
	}
}

// TestMirrorsPgx needs a Postgres (SQLFLIGHT_POSTGRES_DSN).
func TestMirrorsPgx(t *testing.T) {
	dsn := postgresDSN(t)
	pdb, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	wdb := sql.OpenDB(dsnConnector{drv: New().Wrap(stdlib.GetDefaultDriver()), dsn: dsn})
	defer wdb.Close()
	if !is[driver.DriverContext](New().Wrap(stdlib.GetDefaultDriver())) {
		t.Error("DriverContext lost")
	}
	parent, done1 := rawConn(t, pdb)
	defer done1()
	wrapped, done2 := rawConn(t, wdb)
	defer done2()
	sameFaces(t, "conn", connFacesList, parent, wrapped)
	if _, ok := wrapped.(connBase).Unwrap().(*stdlib.Conn); !ok {
		t.Error("Unwrap does not reach *stdlib.Conn")
	}

	const q = "SELECT 1::int8 AS a, 'x'::text AS b"
	ctx := context.Background()
	ps, err := parent.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	// A fresh wrapped connection: the one above was tainted by Unwrap.
	wrapped2, done3 := rawConn(t, wdb)
	defer done3()
	ws, err := wrapped2.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	sameFaces(t, "stmt", stmtFacesList, ps, ws)

	pr, err := parent.(driver.QueryerContext).QueryContext(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	wr, err := wrapped2.(driver.QueryerContext).QueryContext(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	sameFaces(t, "shared rows", rowsFacesList, pr, wr)
	// Pass-through rows (on the tainted connection).
	tr, err := wrapped.(driver.QueryerContext).QueryContext(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sameFaces(t, "pass-through rows", rowsFacesList, pr, tr)
}

// TestSqlmockHerdAndCopies runs a herd over go-sqlmock: the mock holds one
// expectation, so a second origin would fail, and ExpectationsWereMet
// counts what reached "the database". sqlmock overwrites the []byte it
// returned on the next Next or Close: callers still read the original bytes
// only if the rows were copied.
func TestSqlmockHerdAndCopies(t *testing.T) {
	mdb, mock, err := sqlmock.NewWithDSN("dsn-herd", sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	defer mdb.Close()
	const q = "SELECT payload FROM blobs WHERE id = $1"
	rows := sqlmock.NewRows([]string{"payload"}).AddRow([]byte("first")).AddRow([]byte("second"))
	mock.ExpectQuery(q).WithArgs(int64(7)).WillDelayFor(time.Second).WillReturnRows(rows)
	s := New()
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(mdb.Driver()), dsn: "dsn-herd"})
	defer db.Close()

	const n = 25
	var wg sync.WaitGroup
	got := make([][]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			rs, err := db.Query(q, int64(7))
			if err != nil {
				errs[i] = err
				return
			}
			defer rs.Close()
			for rs.Next() {
				var b []byte
				if err := rs.Scan(&b); err != nil {
					errs[i] = err
					return
				}
				got[i] = append(got[i], string(b))
			}
			errs[i] = rs.Err()
		})
	}
	waitFor(t, "every caller in the flight", func() bool { return s.Stats().Waiting == n })
	wg.Wait()
	for i := range n {
		if errs[i] != nil || len(got[i]) != 2 || got[i][0] != "first" || got[i][1] != "second" {
			t.Fatalf("caller %d: %v %q", i, errs[i], got[i])
		}
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.OriginExecutions != 1 || st.Followers != n-1 {
		t.Fatalf("%+v", st)
	}
}
