package parent_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/sqlflight/sqlflight/internal/parent"
)

// bare implements only driver.Conn.
type bare struct{ closed *int }

func (b bare) Prepare(string) (driver.Stmt, error) { return stmt{b.closed}, nil }
func (b bare) Close() error                        { return nil }
func (b bare) Begin() (driver.Tx, error)           { return nil, errors.New("no") }

type stmt struct{ closed *int }

func (s stmt) Close() error                               { *s.closed++; return nil }
func (s stmt) NumInput() int                              { return -1 }
func (s stmt) Exec([]driver.Value) (driver.Result, error) { return driver.RowsAffected(1), nil }
func (s stmt) Query([]driver.Value) (driver.Rows, error)  { return nil, errors.New("no") }

// old has only the legacy Execer and Queryer.
type old struct {
	bare
	got *[]driver.Value
}

func (o old) Exec(q string, vals []driver.Value) (driver.Result, error) {
	*o.got = vals
	return driver.RowsAffected(len(vals)), nil
}

func (o old) Query(q string, vals []driver.Value) (driver.Rows, error) {
	*o.got = vals
	return nil, nil
}

func TestNeitherFormIsErrSkip(t *testing.T) {
	n := 0
	if _, err := parent.Exec(context.Background(), bare{&n}, "x", nil); err != driver.ErrSkip {
		t.Fatalf("Exec: %v, want driver.ErrSkip", err)
	}
	if _, err := parent.Query(context.Background(), bare{&n}, "x", nil); err != driver.ErrSkip {
		t.Fatalf("Query: %v, want driver.ErrSkip", err)
	}
}

func TestLegacyAdaptsAsDatabaseSQL(t *testing.T) {
	var got []driver.Value
	n := 0
	c := old{bare{&n}, &got}
	args := parent.Named([]driver.Value{int64(1), "a"})
	if args[0].Ordinal != 1 || args[1].Ordinal != 2 || args[1].Value != "a" {
		t.Fatalf("Named: %+v", args)
	}
	if res, err := parent.Exec(context.Background(), c, "x", args); err != nil || len(got) != 2 || got[1] != "a" {
		t.Fatalf("Exec: %v %v, values %v", res, err, got)
	}
	if _, err := parent.Query(context.Background(), c, "x", []driver.NamedValue{{Name: "n", Ordinal: 1, Value: 1}}); !errors.Is(err, parent.ErrNamed) {
		t.Fatalf("a named argument to a legacy Queryer: %v, want ErrNamed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got = nil
	if _, err := parent.Exec(ctx, c, "x", args); !errors.Is(err, context.Canceled) || got != nil {
		t.Fatalf("Exec on an ended context: %v, called with %v", err, got)
	}
}

func TestPrepareAfterTheContextEndedIsClosed(t *testing.T) {
	n := 0
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ps, err := parent.Prepare(ctx, bare{&n}, "x"); ps != nil || !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("Prepare: %v %v, %d closed; want the statement closed and ctx's error", ps, err, n)
	}
	if ps, err := parent.Prepare(context.Background(), bare{&n}, "x"); ps == nil || err != nil || n != 1 {
		t.Fatalf("Prepare: %v %v", ps, err)
	}
}
