package integration

// A tenant change that did not take (issue 15, item 1): the tenant helper
// called under a scope in a transaction that rolled back, in a statement
// that failed, or after a savepoint it was rolled back to, leaves the
// session holding what it held before. The session must not become one of
// the new scope's: its reads would be cached under that scope and served
// to the scope's other sessions.

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/sqlflight/sqlflight"
)

func TestTenantChangeUndoneKeepsTheSessionOutOfTheScope(t *testing.T) {
	e := newRLSEnv(t, postgresDSN(t), "sql")
	helper := fmt.Sprintf(`SELECT %s($1)`, e.helper)
	exec := func(t *testing.T, ctx context.Context, c *sql.Conn, q string, args ...any) error {
		t.Helper()
		_, err := c.ExecContext(ctx, q, args...)
		return err
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		undo func(t *testing.T, ctx context.Context, c *sql.Conn) // chooses b under ctx, in a way that does not take
	}{
		{"Tx.Rollback", func(t *testing.T, ctx context.Context, c *sql.Conn) {
			tx, err := c.BeginTx(ctx, nil)
			must(t, err)
			_, err = tx.ExecContext(ctx, helper, "b")
			must(t, err)
			must(t, tx.Rollback())
		}},
		{"ROLLBACK", func(t *testing.T, ctx context.Context, c *sql.Conn) {
			must(t, exec(t, ctx, c, "BEGIN"))
			must(t, exec(t, ctx, c, helper, "b"))
			must(t, exec(t, ctx, c, "ROLLBACK"))
		}},
		{"failed statement", func(t *testing.T, ctx context.Context, c *sql.Conn) {
			if exec(t, ctx, c, fmt.Sprintf(`SELECT %s($1), 1/$2::int`, e.helper), "b", 0) == nil {
				t.Fatal("division by zero did not fail")
			}
		}},
		{"COMMIT of a failed transaction", func(t *testing.T, ctx context.Context, c *sql.Conn) {
			must(t, exec(t, ctx, c, "BEGIN"))
			must(t, exec(t, ctx, c, helper, "b"))
			if exec(t, ctx, c, "SELECT 1/$1::int", 0) == nil {
				t.Fatal("division by zero did not fail")
			}
			must(t, exec(t, ctx, c, "COMMIT")) // PostgreSQL rolls back
		}},
		{"ROLLBACK TO SAVEPOINT", func(t *testing.T, ctx context.Context, c *sql.Conn) {
			must(t, exec(t, ctx, c, "BEGIN"))
			must(t, exec(t, ctx, c, "SAVEPOINT s"))
			must(t, exec(t, ctx, c, helper, "b"))
			must(t, exec(t, ctx, c, "ROLLBACK TO SAVEPOINT s"))
			must(t, exec(t, ctx, c, "COMMIT"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := openFlight(t, e.dsn)
			ctx := testContext(t, testTimeout)
			inA, inB := sqlflight.WithScope(ctx, "a"), sqlflight.WithScope(ctx, "b")
			b := sqlConn(t, db)
			e.choose(t, inB, b, "b", 0)
			x := sqlConn(t, db)
			e.choose(t, inA, x, "a", 0)
			tc.undo(t, inB, x)
			// x still holds tenant a: the database answers a's rows.
			if got := scalar[string](t, inB, x, e.read()); got != e.want["a"] {
				t.Fatalf("the session whose change to b did not take read %q", got)
			}
			if got := scalar[string](t, inB, b, e.read()); got != e.want["b"] {
				t.Errorf("a session of b was served %q, its rows are %q", got, e.want["b"])
			}
		})
	}
}
