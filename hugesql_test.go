package sqlflight

import (
	"context"
	"database/sql/driver"
	"testing"

	"github.com/sqlflight/sqlflight/internal/heaptest"
	"github.com/sqlflight/sqlflight/internal/hugesql"
)

// A statement of several megabytes costs a small multiple of its size to
// run through the driver, not fifty times it; a huge INSERT still
// invalidates its table.
func TestHugeStatementAllocations(t *testing.T) {
	const size = 6_900_000
	d := &fakeDriver{
		onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
			return &fakeRows{cols: []string{"id"}, rows: [][]driver.Value{{int64(1)}}}, nil
		},
		onExec: func(context.Context, string, []driver.NamedValue) (driver.Result, error) {
			return driver.RowsAffected(1), nil
		},
	}
	db, s := openFake(t, d)
	ctx := context.Background()
	read, insert := hugesql.In("huge_in_t", size), hugesql.Insert("huge_ins_t", size)
	query := func() {
		var id int64
		if err := db.QueryRowContext(ctx, read).Scan(&id); err != nil {
			t.Fatal(err)
		}
	}
	exec := func() {
		if _, err := db.ExecContext(ctx, insert); err != nil {
			t.Fatal(err)
		}
	}
	query() // warm the pool and the connection
	for _, c := range []struct {
		name string
		run  func()
		n    int
	}{{"IN-list SELECT", query, len(read)}, {"INSERT … VALUES", exec, len(insert)}} {
		got := heaptest.Allocated(c.run)
		t.Logf("%s of %d bytes: %d bytes allocated (%.1f× its size)", c.name, c.n, got, float64(got)/float64(c.n))
		if limit := uint64(3 * c.n); got > limit {
			t.Errorf("%s of %d bytes allocated %d bytes, want at most %d", c.name, c.n, got, limit)
		}
	}
	before := s.Stats().Invalidations
	exec()
	if s.Stats().Invalidations != before+1 {
		t.Errorf("a huge INSERT bumped %d epochs events, want 1", s.Stats().Invalidations-before)
	}
}
