package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// TestScopedChangeUndone: a change under a scope that a rollback undid
// leaves the session what it was before the transaction; one whose fate is
// unknown (a failed statement, a rollback to a savepoint before COMMIT)
// makes it unknown; one that committed makes it the new scope's.
func TestScopedChangeUndone(t *testing.T) {
	bg := context.Background()
	inA, inB := WithScope(bg, "a"), WithScope(bg, "b")
	const helperA, helperB = "SELECT app_use_tenant('a')", "SELECT app_use_tenant('b')"
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, x *connT) // chooses b under inB on a session of a
		// what the session is afterwards: "a", "b" or "" (unknown)
		want string
	}{
		{"Tx.Commit", func(t *testing.T, x *connT) {
			tx, err := x.c.BeginTx(inB, nil)
			x.must(err)
			_, err = tx.ExecContext(inB, helperB)
			x.must(err)
			x.must(tx.Commit())
		}, "b"},
		{"Tx.Rollback", func(t *testing.T, x *connT) {
			tx, err := x.c.BeginTx(inB, nil)
			x.must(err)
			_, err = tx.ExecContext(inB, helperB)
			x.must(err)
			x.must(tx.Rollback())
		}, "a"},
		{"ROLLBACK", func(t *testing.T, x *connT) {
			x.exec(inB, "BEGIN", helperB, "ROLLBACK")
		}, "a"},
		{"ROLLBACK AND CHAIN", func(t *testing.T, x *connT) {
			x.exec(inB, "BEGIN", helperB, "ROLLBACK AND CHAIN", "COMMIT")
		}, "a"},
		{"COMMIT", func(t *testing.T, x *connT) {
			x.exec(inB, "BEGIN", helperB, "COMMIT")
		}, "b"},
		{"failed statement", func(t *testing.T, x *connT) {
			if _, err := x.c.ExecContext(inB, helperB+", fail()"); err == nil {
				t.Fatal("did not fail")
			}
		}, ""},
		{"COMMIT after a failed statement", func(t *testing.T, x *connT) {
			x.exec(inB, "BEGIN", helperB)
			if _, err := x.c.ExecContext(inB, "SELECT fail()"); err == nil {
				t.Fatal("did not fail")
			}
			x.exec(inB, "COMMIT")
		}, ""},
		{"ROLLBACK after a failed statement", func(t *testing.T, x *connT) {
			x.exec(inB, "BEGIN", helperB)
			if _, err := x.c.ExecContext(inB, "SELECT fail()"); err == nil {
				t.Fatal("did not fail")
			}
			x.exec(inB, "ROLLBACK")
		}, "a"},
		{"ROLLBACK TO SAVEPOINT", func(t *testing.T, x *connT) {
			x.exec(inB, "BEGIN", "SAVEPOINT s", helperB, "ROLLBACK TO SAVEPOINT s", "COMMIT")
		}, ""},
		{"RELEASE SAVEPOINT", func(t *testing.T, x *connT) {
			x.exec(inB, "BEGIN", "SAVEPOINT s", helperB, "RELEASE SAVEPOINT s", "COMMIT")
		}, "b"},
		{"change under a then b, rolled back", func(t *testing.T, x *connT) {
			x.exec(inA, "BEGIN", helperA)
			x.exec(inB, helperB, "ROLLBACK")
		}, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, s, c, _ := openCached(t, Options{})
			c.d.onExec = func(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
				if strings.Contains(q, "fail()") {
					return nil, errors.New("division by zero")
				}
				return driver.RowsAffected(1), nil
			}
			// A session of each scope reads first: their entries.
			a := scopedConn(t, inA, db, helperA)
			b := scopedConn(t, inB, db, helperB)
			x := &connT{t: t, c: scopedConn(t, inA, db, helperA)}
			connRead(t, inA, a, ttlQuery)
			connRead(t, inB, b, ttlQuery)
			tc.change(t, x)
			// The helper's call may have counted as a write: fill the
			// entries again.
			connRead(t, inA, a, ttlQuery)
			connRead(t, inB, b, ttlQuery)
			for _, scope := range []string{"a", "b"} {
				before := s.Stats()
				connRead(t, WithScope(bg, scope), x.c, ttlQuery)
				st := s.Stats()
				shared := st.FreshHits == before.FreshHits+1
				bypassed := st.BypassReasons[bypassSession] == before.BypassReasons[bypassSession]+1
				if shared != (scope == tc.want) || bypassed == shared {
					t.Errorf("read under %s: shared %v, bypassed %v; the session should be %q's", scope, shared, bypassed, tc.want)
				}
			}
		})
	}
}

// connT runs statements on a connection, failing the test on an error.
type connT struct {
	t *testing.T
	c *sql.Conn
}

func (x *connT) must(err error) {
	x.t.Helper()
	if err != nil {
		x.t.Fatal(err)
	}
}

func (x *connT) exec(ctx context.Context, stmts ...string) {
	x.t.Helper()
	for _, q := range stmts {
		_, err := x.c.ExecContext(ctx, q)
		x.must(err)
	}
}

// TestExplainAnalyzeChangesSession: EXPLAIN ANALYZE runs its statement, and
// what it calls through a view is seen by no verdict: the session counts as
// changed. A plain EXPLAIN runs nothing.
func TestExplainAnalyzeChangesSession(t *testing.T) {
	s := New()
	sc := s.newScope()
	for sql, changes := range map[string]bool{
		"EXPLAIN ANALYZE SELECT * FROM tenant_view":          true,
		"EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM items": true,
		"EXPLAIN SELECT * FROM tenant_view":                  false,
	} {
		c := &conn{s: s.engine, sc: sc}
		c.record(context.Background(), &fate{r: sqlscan.Scan(sql)}, false)
		if c.tainted != changes {
			t.Errorf("%s: session changed %v, want %v", sql, c.tainted, changes)
		}
	}
}
