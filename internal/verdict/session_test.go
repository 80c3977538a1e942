package verdict

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// fakeConn is a parent connection of another driver: it answers queries
// from rows, records what it ran, and fails with err when set.
type fakeConn struct {
	skipQuery bool // QueryContext answers driver.ErrSkip
	ran       []string
	rows      [][]driver.Value
	err       error
}

func (c *fakeConn) Prepare(q string) (driver.Stmt, error) { return &fakeStmt{c: c, q: q}, nil }
func (c *fakeConn) Close() error                          { return nil }
func (c *fakeConn) Begin() (driver.Tx, error)             { return nil, errors.New("fake: no Begin") }

func (c *fakeConn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	if c.skipQuery {
		return nil, driver.ErrSkip
	}
	c.ran = append(c.ran, "query "+q)
	return c.answer()
}

func (c *fakeConn) answer() (driver.Rows, error) {
	if c.err != nil {
		return nil, c.err
	}
	return &fakeRows{rows: c.rows}, nil
}

type fakeStmt struct {
	c *fakeConn
	q string
}

func (s *fakeStmt) Close() error  { return nil }
func (s *fakeStmt) NumInput() int { return -1 }
func (s *fakeStmt) Exec([]driver.Value) (driver.Result, error) {
	s.c.ran = append(s.c.ran, "exec "+s.q)
	return driver.RowsAffected(0), s.c.err
}
func (s *fakeStmt) Query([]driver.Value) (driver.Rows, error) {
	s.c.ran = append(s.c.ran, "prepared "+s.q)
	return s.c.answer()
}

type fakeRows struct{ rows [][]driver.Value }

func (r *fakeRows) Columns() []string {
	if len(r.rows) == 0 {
		return nil
	}
	return make([]string, len(r.rows[0]))
}
func (r *fakeRows) Close() error { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}

// serverErr is a server error as lib/pq and pgx v4 carry it.
type serverErr struct{ code string }

func (e serverErr) Error() string    { return "server says " + e.code }
func (e serverErr) SQLState() string { return e.code }

// fieldErr is a server error as bun's pgdriver carries it.
type fieldErr struct{ code string }

func (e fieldErr) Error() string { return "server says " + e.code }
func (e fieldErr) Field(f byte) string {
	if f == 'C' {
		return e.code
	}
	return ""
}

func TestSQLStateAcrossDrivers(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: "42P01"}, "42P01"},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "25006"}), "25006"},
		{serverErr{"42501"}, "42501"},
		{fmt.Errorf("wrapped: %w", fieldErr{"40001"}), "40001"},
		{errors.New("connection reset"), ""},
		{driver.ErrBadConn, ""},
		{nil, ""},
	} {
		if got := SQLState(c.err); got != c.want {
			t.Errorf("SQLState(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestDriverSessionTextAndFallback: a parent's values come back in text
// form, NULL as nil, and a parent that skips QueryContext is asked through
// a prepared statement.
func TestDriverSessionTextAndFallback(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, skip := range []bool{false, true} {
		fc := &fakeConn{skipQuery: skip, rows: [][]driver.Value{
			{"a", []byte("b"), true, false, int64(-7), nil, at, 1.5},
		}}
		rows, err := OfDriver(fc).Query(context.Background(), "SELECT x", "arg")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, v := range rows[0] {
			if v == nil {
				got = append(got, "<nil>")
				continue
			}
			got = append(got, *v)
		}
		want := "a b t f -7 <nil> 2024-05-06T07:08:09Z 1.5"
		if strings.Join(got, " ") != want {
			t.Errorf("skip=%v: row %q, want %q", skip, strings.Join(got, " "), want)
		}
		wantRan := "query SELECT x"
		if skip {
			wantRan = "prepared SELECT x"
		}
		if len(fc.ran) != 1 || fc.ran[0] != wantRan {
			t.Errorf("skip=%v: ran %q, want %q", skip, fc.ran, wantRan)
		}
	}
}

// TestDriverSessionClean: a session is not clean inside a transaction, nor
// after an error that is not the server's answer; a server error leaves it
// clean.
func TestDriverSessionClean(t *testing.T) {
	ctx := context.Background()
	fc := &fakeConn{}
	s := OfDriver(fc)
	if err := s.Exec(ctx, "BEGIN"); err != nil || s.Clean() {
		t.Fatalf("after BEGIN: err %v, clean %v", err, s.Clean())
	}
	if err := s.Exec(ctx, "ROLLBACK"); err != nil || !s.Clean() {
		t.Fatalf("after ROLLBACK: err %v, clean %v", err, s.Clean())
	}
	if fc.ran[0] != "exec BEGIN" {
		t.Fatalf("BEGIN ran as %q, want a prepared statement's Exec", fc.ran[0])
	}
	fc.err = serverErr{"42P01"}
	if _, err := s.Query(ctx, "SELECT 1"); err == nil || !s.Clean() {
		t.Fatalf("after a server error: err %v, clean %v", err, s.Clean())
	}
	fc.err = errors.New("connection reset")
	if _, err := s.Query(ctx, "SELECT 1"); err == nil || s.Clean() {
		t.Fatalf("after a broken connection: err %v, clean %v", err, s.Clean())
	}
}

// TestPostgresVersionNotPostgreSQL: a server that fails the question, or
// answers it otherwise than PostgreSQL does, is not PostgreSQL.
func TestPostgresVersionNotPostgreSQL(t *testing.T) {
	ctx := context.Background()
	for _, fc := range []*fakeConn{
		{err: serverErr{"HY000"}},
		{rows: [][]driver.Value{{"150004", "CockroachDB CCL v23"}}},
		{rows: [][]driver.Value{{"80000", "PostgreSQL 8.0"}}},
		{rows: [][]driver.Value{{"x", "PostgreSQL 15.4"}}},
	} {
		if v := PostgresVersion(ctx, fc); v != 0 {
			t.Errorf("PostgresVersion = %d for %+v", v, fc)
		}
	}
	fc := &fakeConn{rows: [][]driver.Value{{"150004", "PostgreSQL 15.4 on x86_64"}}}
	if v := PostgresVersion(ctx, fc); v != 150004 {
		t.Errorf("PostgresVersion = %d, want 150004", v)
	}
	if len(fc.ran) != 1 || fc.ran[0] != "query "+VersionQuery {
		t.Errorf("ran %q", fc.ran)
	}
}

func TestVersionNum(t *testing.T) {
	for in, want := range map[string]int{
		"15.4": 150004, "16.0 (Debian 16.0-1)": 160000, "9.6.24 (Debian …)": 90624, "9.6": 90600,
		"10beta1": 100000, "": 0,
	} {
		if got := versionNum(in); got != want {
			t.Errorf("versionNum(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestTextArray(t *testing.T) {
	if got := TextArray([]string{"a", `b"c`, `d\e`, ""}); got != `{"a","b\"c","d\\e",""}` {
		t.Fatalf("TextArray = %s", got)
	}
	if got := TextArray(nil); got != "{}" {
		t.Fatalf("TextArray(nil) = %s", got)
	}
}
