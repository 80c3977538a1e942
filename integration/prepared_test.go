package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestPreparedStatementsShare: a statement prepared with db.Prepare shares
// like a plain query, and followers never open real connections for it (it
// is prepared lazily on the connection that reaches the database).
func TestPreparedStatementsShare(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		g := newGate(t, admin, dsn, "prep")
		db, sh := openFlight(t, dsn)
		// A first statement teaches the scope the shape of pgx's statements.
		warm, err := db.PrepareContext(ctx, "SELECT 1")
		if err != nil {
			t.Fatal(err)
		}
		warm.Close()
		stmt, err := db.PrepareContext(ctx, fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT %[1]s() + $1::int`, g.fn))
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		opened := sh.Stats().RealConnsOpened

		const callers = 200
		g.close(t)
		defer g.open(t)
		var wg sync.WaitGroup
		got := make([]int, callers)
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() { errs[i] = stmt.QueryRowContext(ctx, 41).Scan(&got[i]) })
		}
		waitUntil(t, time.Minute, func() string { return statsString(sh.Stats()) },
			func() bool { return sh.Stats().Waiting >= callers })
		g.open(t)
		wg.Wait()
		for i := range callers {
			if errs[i] != nil || got[i] != 42 {
				t.Fatalf("caller %d: %v %d", i, errs[i], got[i])
			}
		}
		if n := g.calls(t, admin); n != 1 {
			t.Errorf("the function ran %d times, want 1", n)
		}
		if extra := sh.Stats().RealConnsOpened - opened; extra > 1 {
			t.Errorf("%d real connections opened for %d callers of one prepared statement, want ≤ 1: %s",
				extra, callers, statsString(sh.Stats()))
		}

		// Inside a transaction the statement goes straight through.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := sh.Stats().Flights
		var v int
		if err := tx.StmtContext(ctx, stmt).QueryRowContext(ctx, 1).Scan(&v); err != nil || v != 2 {
			t.Fatalf("in a transaction: %v %d", err, v)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if sh.Stats().Flights != before {
			t.Error("a prepared statement shared inside a transaction")
		}

		// A lazily prepared statement reports its syntax error when it runs.
		bad, err := db.PrepareContext(ctx, "SELECT 1 FROM no_such_table_"+uniqueID(t))
		if err == nil {
			defer bad.Close()
			if err := bad.QueryRowContext(ctx).Scan(&v); err == nil {
				t.Fatal("a statement on a missing table ran")
			}
		}
	})
}
