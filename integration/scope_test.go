package integration

import (
	"context"
	"database/sql"
	"fmt"
	"os"
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

// envRoles makes two login roles whose unqualified table t holds different
// rows ("$user" comes first in the default search_path), and returns them
// with the password both have and a DSN text that names no user.
func envRoles(t *testing.T) (a, b, password, dsn string) {
	t.Helper()
	base := postgresDSN(t)
	admin := openRaw(t, base)
	id := uniqueID(t)
	a, b, password = "sqlflight_scope_a_"+id, "sqlflight_scope_b_"+id, "pw_"+id
	for _, r := range []string{a, b} {
		mustExec(t, admin,
			fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, r, password),
			fmt.Sprintf(`CREATE SCHEMA %[1]s AUTHORIZATION %[1]s`, r),
			fmt.Sprintf(`CREATE TABLE %s.t (v text)`, r),
			fmt.Sprintf(`INSERT INTO %s.t VALUES ('row of %s')`, r, r),
			fmt.Sprintf(`GRANT SELECT ON %s.t TO %s`, r, r))
		cleanupExec(t, admin, "DROP SCHEMA IF EXISTS "+r+" CASCADE", "DROP ROLE IF EXISTS "+r)
	}
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	dsn = fmt.Sprintf("host=%s port=%d dbname=%s sslmode=disable", cfg.Host, cfg.Port, cfg.Database)
	return a, b, password, dsn
}

// TestSameDSNTextOtherUser: the same DSN text, opened after the environment
// changed the user it reaches (PGUSER, or PGSERVICE with a service file),
// never gets the first user's cached rows; a *sql.DB opened before the
// change keeps reaching its own user.
func TestSameDSNTextOtherUser(t *testing.T) {
	a, b, password, dsn := envRoles(t)
	t.Setenv("PGPASSWORD", password)
	services := t.TempDir() + "/pg_service.conf"
	if err := os.WriteFile(services, fmt.Appendf(nil, "[svc_a]\nuser=%s\n\n[svc_b]\nuser=%s\n", a, b), 0o600); err != nil {
		t.Fatal(err)
	}
	const q = `/* sqlflight: ttl=1m */ SELECT string_agg(v, ',') FROM t`
	for _, tc := range []struct {
		name       string
		env        string
		valA, valB string
	}{
		{"PGUSER", "PGUSER", a, b},
		{"service file", "PGSERVICE", "svc_a", "svc_b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PGUSER", "")
			t.Setenv("PGSERVICE", "")
			t.Setenv("PGSERVICEFILE", services)
			name := "sqlflight-scope-env-" + uniqueID(t)
			sh := sqlflight.Register(name, stdlib.GetDefaultDriver())
			t.Cleanup(func() { _ = sh.Close() })
			ctx := testContext(t, time.Minute)
			open := func() *sql.DB {
				db, err := sql.Open(name, dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}
			read := func(db *sql.DB) string {
				var v string
				if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
					t.Fatalf("read: %v", err)
				}
				return v
			}

			t.Setenv(tc.env, tc.valA)
			dbA := open()
			// Read until the result is served from the cache.
			waitUntil(t, time.Minute, func() string { return "a cache hit: " + statsString(sh.Stats()) }, func() bool {
				if got := read(dbA); got != "row of "+a {
					t.Fatalf("user a read %q", got)
				}
				return sh.Stats().FreshHits > 0
			})

			t.Setenv(tc.env, tc.valB)
			dbB := open()
			for range 3 {
				if got := read(dbB); got != "row of "+b {
					t.Fatalf("after %s changed, the same DSN text read %q: another user's cached rows", tc.env, got)
				}
			}

			// dbA's new real connections still log in as a (four
			// transactions at once: more than its real connections so far).
			before := sh.Stats().RealConnsOpened
			var txs []*sql.Tx
			for range 4 {
				tx, err := dbA.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				txs = append(txs, tx)
				var who string
				if err := tx.QueryRowContext(ctx, "SELECT current_user").Scan(&who); err != nil {
					t.Fatal(err)
				}
				if who != a {
					t.Errorf("a connection of the *sql.DB opened for %s logged in as %s", a, who)
				}
			}
			for _, tx := range txs {
				_ = tx.Rollback()
			}
			if sh.Stats().RealConnsOpened == before {
				t.Errorf("no new real connection was opened: %s", statsString(sh.Stats()))
			}
		})
	}
}
