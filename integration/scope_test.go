package integration

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// TestScopesNeverShare: the same statement text on two scopes (two
// connectors on one Shield; two DSNs opened by driver name on the default
// Shield) reads different data, so the two must never share a flight.
func TestScopesNeverShare(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	id := uniqueID(t)
	a, b := "sa_"+id, "sb_"+id
	mustExec(t, admin,
		"CREATE SCHEMA "+a, "CREATE SCHEMA "+b,
		fmt.Sprintf(`CREATE TABLE %s.t (v text)`, a), fmt.Sprintf(`CREATE TABLE %s.t (v text)`, b),
		fmt.Sprintf(`INSERT INTO %s.t VALUES ('a1'), ('a2')`, a),
		fmt.Sprintf(`INSERT INTO %s.t VALUES ('b1')`, b))
	cleanupExec(t, admin, "DROP SCHEMA IF EXISTS "+a+" CASCADE", "DROP SCHEMA IF EXISTS "+b+" CASCADE")
	dsnA := withDSNParams(t, base, "search_path", a)
	dsnB := withDSNParams(t, base, "search_path", b)

	// run holds two callers of dbA in a gated flight, then sends the same
	// text on dbB, which must lead a flight of its own.
	run := func(t *testing.T, sh *sqlflight.Shield, dbA, dbB *sql.DB) {
		ctx := testContext(t, testTimeout)
		g := newGate(t, admin, base, "gate")
		query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT string_agg(t.v, ',' ORDER BY t.v) FROM %[1]s() AS g CROSS JOIN t`, g.fn)
		before := sh.Stats()
		var wg sync.WaitGroup
		defer wg.Wait()
		g.close(t)
		defer g.open(t)
		read := func(db *sql.DB, want string) {
			defer wg.Done()
			var got sql.NullString
			if err := db.QueryRowContext(ctx, query).Scan(&got); err != nil {
				t.Errorf("read: %v", err)
			} else if got.String != want {
				t.Errorf("read %q, want %q (results crossed scopes)", got.String, want)
			}
		}
		wg.Add(2)
		go read(dbA, "a1,a2")
		go read(dbA, "a1,a2")
		waitUntil(t, time.Minute, func() string { return "two callers in scope A's flight: " + statsString(sh.Stats()) },
			func() bool { return sh.Stats().Waiting-before.Waiting >= 2 })
		wg.Add(1)
		go read(dbB, "b1")
		waitUntil(t, time.Minute, func() string { return "scope B's caller to wait: " + statsString(sh.Stats()) },
			func() bool { return sh.Stats().Waiting-before.Waiting >= 3 })
		if st := sh.Stats(); st.Flights-before.Flights != 2 || st.Followers-before.Followers != 1 {
			t.Errorf("want 2 flights (one per scope) and 1 follower, have %d and %d: %s",
				st.Flights-before.Flights, st.Followers-before.Followers, statsString(st))
		}
		g.open(t)
		wg.Wait()
	}

	t.Run("two connectors on one Shield", func(t *testing.T) {
		sh := sqlflight.New()
		open := func(dsn string) *sql.DB {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			db := sh.OpenDB(stdlib.GetConnector(*cfg))
			t.Cleanup(func() { _ = db.Close() })
			return db
		}
		dbA, dbB := open(dsnA), open(dsnB)
		if sqlflight.ShieldOf(dbA) != sh || sqlflight.ShieldOf(dbB) != sh {
			t.Fatal("ShieldOf does not return the Shield that opened the *sql.DB")
		}
		run(t, sh, dbA, dbB)
	})

	t.Run("two DSNs by driver name", func(t *testing.T) {
		open := func(dsn string) *sql.DB {
			db, err := sql.Open("sqlflight", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db
		}
		dbA, dbB := open(dsnA), open(dsnB)
		sh := sqlflight.Default()
		if sh == nil || sqlflight.ShieldOf(dbA) != sh || sqlflight.ShieldOf(dbB) != sh {
			t.Fatal(`a *sql.DB from sql.Open("sqlflight", …) does not report the default Shield`)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dbA.PingContext(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		run(t, sh, dbA, dbB)
	})
}
